/*
 * json_walk.c - walking JSON text that srv_json_object_scan has already validated (json_walk.h):
 * strings and nesting tracked, runs of ordinary bytes skipped by table lookup.
 */
#include "json_walk.h"

#include <stdint.h>
#include <string.h>

/* Byte classes for walking JSON text that srv_json_object_scan has already validated:
 * 1 a quote, 2 an opening bracket, 3 a closing one, 0 anything else (digits, commas, ...). */
static const unsigned char walk_class[256] = {
    ['"'] = 1, ['['] = 2, ['{'] = 2, [']'] = 3, ['}'] = 3};

/* Returns the position after the string that starts at p (*p is '"'), or NULL at end. */
static const char *skip_string(const char *p, const char *end)
{
    for (p++; p < end; p++) {
        if (*p == '\\') {
            if (++p == end)
                return NULL;
        } else if (*p == '"') {
            return p + 1;
        }
    }
    return NULL;
}

const char *srv_json_walk_value(const char *p, const char *end)
{
    if (p >= end)
        return NULL;
    if (*p == '"')
        return skip_string(p, end);
    if (*p != '[' && *p != '{') { /* number or literal */
        while (p < end && *p != ',' && *p != ']' && *p != '}' && *p != ' ' && *p != '\t' &&
               *p != '\n' && *p != '\r')
            p++;
        return p;
    }
    int64_t depth = 0;
    for (;;) {
        while (p < end && !walk_class[(unsigned char)*p])
            p++;
        if (p == end)
            return NULL;
        switch (walk_class[(unsigned char)*p]) {
        case 1:
            p = skip_string(p, end);
            if (!p)
                return NULL;
            continue;
        case 2:
            depth++;
            break;
        default:
            if (--depth == 0)
                return p + 1;
        }
        p++;
    }
}

int srv_json_walk_members(srv_json_member *m, int max, const char **after, const char *p,
                          const char *end, const char *field, srv_error *err)
{
    int n = 0;
    p = srv_json_skip_ws(p + 1, end);
    if (p < end && *p == '}') {
        *after = p + 1;
        return 0;
    }
    for (;;) {
        p = srv_json_skip_ws(p, end);
        if (p == end || *p != '"')
            return srv_error_set(err, SRV_E_BAD_JSON, field, "%s: expected a member name", field);
        if (n == max)
            return srv_error_set(err, SRV_E_BAD_REQUEST, field, "%s has more than %d members",
                                 field, max);
        size_t klen;
        const char *q = srv_json_string(p, end, m[n].key, sizeof m[n].key, &klen, p, field, err);
        if (!q)
            return -1;
        if (klen >= sizeof m[n].key || strlen(m[n].key) != klen)
            return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                                 "%s has a member name that is "
                                 "too long or holds a NUL",
                                 field);
        for (int i = 0; i < n; i++)
            if (strcmp(m[i].key, m[n].key) == 0)
                return srv_error_set(err, SRV_E_BAD_JSON, field, "%s has \"%s\" twice", field,
                                     m[n].key);
        p = srv_json_skip_ws(q, end);
        if (p == end || *p != ':')
            return srv_error_set(err, SRV_E_BAD_JSON, field, "%s: expected ':'", field);
        p = srv_json_skip_ws(p + 1, end);
        const char *ve = srv_json_walk_value(p, end);
        if (!ve)
            return srv_error_set(err, SRV_E_BAD_JSON, field, "%s is cut short", field);
        m[n].value = p;
        m[n].value_len = (size_t)(ve - p);
        n++;
        p = srv_json_skip_ws(ve, end);
        if (p < end && *p == ',') {
            p++;
            continue;
        }
        if (p < end && *p == '}') {
            *after = p + 1;
            return n;
        }
        return srv_error_set(err, SRV_E_BAD_JSON, field, "%s: expected ',' or '}'", field);
    }
}
