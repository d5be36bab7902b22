/*
 * body.c - helpers for JSON request bodies (see body.h).
 */
#include "body.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "codec/predecode.h"

/* The member's value without surrounding white space. */
static void trimmed(const srv_json_member *m, const char **p, size_t *n)
{
    const char *s = m->value, *e = m->value + m->value_len;
    while (s < e && (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r'))
        s++;
    while (e > s && (e[-1] == ' ' || e[-1] == '\t' || e[-1] == '\n' || e[-1] == '\r'))
        e--;
    *p = s;
    *n = (size_t)(e - s);
}

static bool value_is(const srv_json_member *m, const char *lit)
{
    const char *p;
    size_t n;
    trimmed(m, &p, &n);
    return n == strlen(lit) && !memcmp(p, lit, n);
}

/* srv_body_scan, jumping over the strings plain knows (may be NULL). */
static int scan_body(const srv_app *app, const char *json, size_t len, const char *field,
                     const char *const *tensor_keys, const srv_json_plain *plain,
                     srv_json_member *out, srv_error *err)
{
    size_t i = 0;
    while (i < len && (json[i] == ' ' || json[i] == '\t' || json[i] == '\n' || json[i] == '\r'))
        i++;
    if (i == len)
        return srv_error_set(err, SRV_E_BAD_JSON, field,
                             "%s%sis empty; send a JSON object", field, *field ? " " : "the body ");
    if (tensor_keys)
        return srv_json_object_scan_lazy_plain(json, len, field, app->opt.max_json_depth,
                                               tensor_keys, plain, out, SRV_BODY_MAX_MEMBERS, err);
    return srv_json_object_scan(json, len, field, app->opt.max_json_depth, out,
                                SRV_BODY_MAX_MEMBERS, err);
}

int srv_body_scan(const srv_app *app, const char *json, size_t len, const char *field,
                  const char *const *tensor_keys, srv_json_member *out, srv_error *err)
{
    return scan_body(app, json, len, field, tensor_keys, NULL, out, err);
}

static const char *predecoded_close(void *cls, const char *open_quote)
{
    const srv_request *req = cls;
    return srv_predecoder_close(req->stream, req->body, open_quote);
}

int srv_body_scan_request(const srv_app *app, const srv_request *req,
                          const char *const *tensor_keys, srv_json_member *out, srv_error *err)
{
    srv_json_plain plain = {predecoded_close, (void *)req};
    return scan_body(app, req->body, req->body_len, "", tensor_keys,
                     req->stream ? &plain : NULL, out, err);
}

int srv_body_recheck(const srv_app *app, const char *json, size_t len, srv_error *err)
{
    srv_json_member m[SRV_BODY_MAX_MEMBERS];
    srv_error strict = {0};
    if (srv_body_scan(app, json, len, "", NULL, m, &strict) < 0)
        *err = strict; /* replaces the handler's error (srv_error_set keeps the first) */
    return -1;
}

bool srv_member_is_null(const srv_json_member *m)
{
    return value_is(m, "null");
}

int srv_member_bool(const srv_json_member *m, const char *field, bool *out, srv_error *err)
{
    if (value_is(m, "true"))
        *out = true;
    else if (value_is(m, "false"))
        *out = false;
    else
        return srv_error_set(err, SRV_E_BAD_REQUEST, field, "%s must be true or false", field);
    return 0;
}

/* Whether x holds a number of 2^63 or more in magnitude (read as a real). */
static bool holds_huge(const json_t *x)
{
    if (json_is_real(x))
        return fabs(json_real_value(x)) >= 0x1p63;
    size_t i;
    json_t *e;
    json_array_foreach(x, i, e) if (holds_huge(e)) return true;
    const char *k;
    json_object_foreach((json_t *)x, k, e) if (holds_huge(e)) return true;
    return false;
}

json_t *srv_member_json(const srv_json_member *m, const char *field, srv_error *err)
{
    json_error_t je;
    json_t *v = json_loadb(m->value, m->value_len, JSON_DECODE_ANY | JSON_REJECT_DUPLICATES, &je);
    if (!v && strstr(je.text, "too big")) { /* valid JSON, past jansson's int64 either way */
        /* read again with every integer a real, to name the member that holds it */
        char name[128];
        snprintf(name, sizeof name, "%s", field);
        json_t *r = json_loadb(m->value, m->value_len, JSON_DECODE_ANY | JSON_DECODE_INT_AS_REAL,
                               NULL);
        const char *k;
        json_t *e;
        json_object_foreach(r, k, e) if (holds_huge(e)) {
            snprintf(name, sizeof name, "%s.%s", field, k);
            break;
        }
        json_decref(r);
        srv_error_set(err, SRV_E_BAD_REQUEST, name,
                      "%s holds an integer outside -2^63 .. 2^63-1: %s", name, je.text);
    } else if (!v && strstr(je.text, "JSON_ALLOW_NUL")) /* jansson's flag name: say what it means */
        srv_error_set(err, SRV_E_BAD_JSON, field,
                      "%s holds \\u0000 (a NUL character) in a string, which is not accepted", field);
    else if (!v)
        srv_error_set(err, SRV_E_BAD_JSON, field, "%s is not valid JSON: %s", field, je.text);
    return v;
}

int srv_member_string(const srv_json_member *m, const char *field, char *out, size_t size,
                      srv_error *err)
{
    const char *p;
    size_t n;
    trimmed(m, &p, &n);
    if (n < 2 || *p != '"')
        return srv_error_set(err, SRV_E_BAD_REQUEST, field, "%s must be a string", field);
    json_t *v = srv_member_json(m, field, err);
    if (!v)
        return -1;
    int rc = 0;
    if (!json_is_string(v) || json_string_length(v) >= size)
        rc = srv_error_set(err, SRV_E_BAD_REQUEST, field, "%s must be a string of at most %zu bytes",
                           field, size - 1);
    else
        memcpy(out, json_string_value(v), json_string_length(v) + 1);
    json_decref(v);
    return rc;
}

int srv_member_tensor(srv_tensor *out, const srv_json_member *m, const char *field, bool mask,
                      const srv_app *app, const srv_request *req, srv_error *err)
{
    srv_tensor_rules rules = {
        .field = field,
        .allow_bool = mask,
        .allow_neg_inf = mask,
        .max_elements = app->opt.max_tensor_elements,
        .max_depth = app->opt.max_json_depth < SRV_TENSOR_MAX_DIMS ? app->opt.max_json_depth
                                                                  : SRV_TENSOR_MAX_DIMS,
        .predecoded = req ? req->stream : NULL,
        .body = req ? req->body : NULL,
    };
    return srv_tensor_parse(out, m->value, m->value_len, &rules, err);
}

int srv_member_positions(srv_positions *out, const srv_json_member *m, const char *field,
                         const srv_app *app, srv_error *err)
{
    memset(out, 0, sizeof *out);
    if (srv_member_is_null(m))
        return 0;
    json_t *v = srv_member_json(m, field, err);
    if (!v)
        return -1;
    int rc = srv_positions_from_json(out, v, field, app->opt.max_tensor_elements, err);
    json_decref(v);
    return rc;
}

int srv_member_encoding(const srv_json_member *m, srv_encoding *out, srv_error *err)
{
    char s[16];
    if (srv_member_string(m, "encoding", s, sizeof s, err) < 0 || srv_encoding_parse(s, out) < 0)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "encoding",
                             "encoding must be \"nested\", \"flat\" or \"base64\"");
    return 0;
}

int srv_body_unknown(srv_error *err, const char *prefix, const char *key, const char *known)
{
    char field[sizeof err->field];
    snprintf(field, sizeof field, "%s%s", prefix, key);
    return srv_error_set(err, SRV_E_UNKNOWN_FIELD, field, "unknown field '%s%s'; known: %s", prefix,
                         key, known);
}
