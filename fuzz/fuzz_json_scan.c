/*
 * fuzz_json_scan.c - srv_json_object_scan against jansson, differentially.
 *
 * Input: one byte (bits 0-1: max members 1, 4, 64, 100000; bits 2-7: max_depth 0..63, 63 meaning
 * 1000, past the scanner's hard ceiling), then the text.
 * When the scanner accepts, jansson must accept the same text as an object with the same members
 * in the same order, each member's value text parsing (alone) to the same JSON value. When jansson
 * accepts an object the scanner must accept it too, unless it breaks one of the scanner's own
 * limits (depth, members, key length, a \u0000 in a key, a duplicate key). jansson refuses numbers
 * beyond a double or int64; those texts are only checked in the first direction.
 * srv_json_object_scan_lazy (every key lazy) against the strict scan: when the strict scan accepts,
 * the same members; when the lazy one refuses, the strict one's very error; it may accept more
 * only when some member was left lazy.
 */
#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/json_scan.h"
#include "fuzz_fail.h"


static int depth_of(const json_t *j)
{
    int d = 0;
    if (json_is_object(j)) {
        const char *k;
        json_t *v;
        json_object_foreach((json_t *)j, k, v) {
            int c = depth_of(v);
            d = c > d ? c : d;
        }
        return d + 1;
    }
    if (json_is_array(j)) {
        for (size_t i = 0; i < json_array_size(j); i++) {
            int c = depth_of(json_array_get(j, i));
            d = c > d ? c : d;
        }
        return d + 1;
    }
    return 0;
}

static bool jansson_own_limit(const json_error_t *e)
{
    /* jansson also refuses \u0000 in keys of nested objects (the scanner refuses it at the top
     * level only; the daemon hands nested objects to jansson, which refuses them then) */
    return strstr(e->text, "too big") || strstr(e->text, "overflow") ||
           strstr(e->text, "NUL byte in object key");
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const int maxes[4] = {1, 4, 64, 100000};
    int max = maxes[data[0] & 3];
    int max_depth = data[0] >> 2;
    if (max_depth == 63)
        max_depth = 1000;
    size_t len = size - 1;
    char *text = malloc(len ? len : 1);
    memcpy(text, data + 1, len);
    static srv_json_member *m; /* room for the largest max, allocated once (14 MB) */
    if (!m)
        m = calloc(100000, sizeof *m);
    srv_error err = {0};
    int n = srv_json_object_scan(text, len, "body", max_depth, m, max, &err);

    static srv_json_member *ml;
    if (!ml)
        ml = calloc(100000, sizeof *ml);
    static const char *const all[] = {"*", NULL};
    srv_error lerr = {0};
    int nl = srv_json_object_scan_lazy(text, len, "body", max_depth, all, ml, max, &lerr);
    if (n >= 0) {
        if (nl != n)
            FAIL("strict scan found %d members, lazy %d (%s)", n, nl, lerr.message);
        for (int i = 0; i < n; i++)
            if (strcmp(m[i].key, ml[i].key) || m[i].value != ml[i].value || m[i].value_len != ml[i].value_len)
                FAIL("member %d differs in the lazy scan", i);
    } else if (nl < 0) {
        if (lerr.code != err.code || strcmp(lerr.message, err.message) || strcmp(lerr.field, err.field))
            FAIL("lazy error \"%s\", strict \"%s\"", lerr.message, err.message);
    } else {
        bool lazy = false;
        for (int i = 0; i < nl; i++)
            lazy |= ml[i].lazy;
        if (!lazy)
            FAIL("lazy scan accepts with no lazy member what the strict one refuses: %s", err.message);
    }

    /* the scanner refuses duplicate keys at the top level only (nested objects go to jansson) */
    json_error_t je;
    json_t *doc = json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
    if (n >= 0) {
        if (err.code != SRV_OK)
            FAIL("accepted with an error set: %s", err.message);
        if (!doc) {
            if (!jansson_own_limit(&je))
                FAIL("scanner accepts, jansson refuses: %s (at %d)", je.text, je.position);
        } else {
            if (!json_is_object(doc) || json_object_size(doc) != (size_t)n)
                FAIL("scanner found %d members, jansson %zu", n,
                     json_is_object(doc) ? json_object_size(doc) : (size_t)-1);
            if (depth_of(doc) > max_depth)
                FAIL("accepted depth %d with max_depth %d", depth_of(doc), max_depth);
            const char *k;
            json_t *v;
            int i = 0;
            json_object_foreach(doc, k, v) {
                if (strcmp(k, m[i].key) != 0)
                    FAIL("member %d: key \"%s\", jansson \"%s\"", i, m[i].key, k);
                if (m[i].value < text || m[i].value + m[i].value_len > text + len)
                    FAIL("member %d: value outside the text", i);
                json_t *mv = json_loadb(m[i].value, m[i].value_len, JSON_DECODE_ANY | JSON_ALLOW_NUL, &je);
                if (!mv || !json_equal(mv, v))
                    FAIL("member %d (\"%s\"): value text \"%.*s\" differs", i, k, (int)m[i].value_len,
                         m[i].value);
                json_decref(mv);
                i++;
            }
        }
    } else {
        if (err.code == SRV_OK || !err.message[0])
            FAIL("refused without an error");
        json_decref(doc);
        doc = json_loadb(text, len, JSON_DECODE_ANY | JSON_ALLOW_NUL | JSON_REJECT_DUPLICATES, &je);
        /* jansson takes a raw NUL byte for the end of the text: it may accept what is not JSON */
        if (doc && !memchr(text, 0, len) && json_is_object(doc) && depth_of(doc) <= max_depth && (int)json_object_size(doc) <= max) {
            bool own_limit = false;
            const char *k;
            json_t *v;
            json_object_foreach(doc, k, v) {
                if (strlen(k) >= SRV_JSON_KEY_MAX)
                    own_limit = true;
            }
            /* a \u0000 in a key: jansson keeps it, the scanner refuses it */
            if (strstr(err.message, "\\u0000"))
                own_limit = true;
            if (!own_limit)
                FAIL("jansson accepts, scanner refuses: %s", err.message);
        }
    }
    json_decref(doc);
    free(text);
    return 0;
}
