/*
 * weights_select.c - the weights a client chooses, as /v1, /v2 and describe write them (see
 * weights_select.h).
 */
#include "weights_select.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define V1_MEMBERS "heads, queries, keys, top_k, pool, pool_op, dtype"

void srv_select_init(srv_select *s)
{
    memset(s, 0, sizeof *s);
}

void srv_select_free(srv_select *s)
{
    free(s->heads);
    srv_select_init(s);
}

static int set_heads(srv_select *s, int64_t *heads, int64_t n)
{
    free(s->heads);
    s->heads = heads;
    s->sel.heads = heads;
    s->sel.nheads = n;
    return 0;
}

static int parse_pool_op(srv_select *s, const char *text, const char *field, srv_error *err)
{
    if (text && strcmp(text, "mean") == 0)
        s->sel.pool_op = MHA_POOL_MEAN;
    else if (text && strcmp(text, "max") == 0)
        s->sel.pool_op = MHA_POOL_MAX;
    else
        return srv_error_set(err, SRV_E_BAD_REQUEST, field, "%s must be \"mean\" or \"max\"",
                             field);
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* /v1: "weights_select": {...}                                                                   */

/* A JSON integer into *out; 400 naming field otherwise. */
static int json_int(const json_t *v, const char *field, const char *what, int64_t *out,
                    srv_error *err)
{
    if (!json_is_integer(v))
        return srv_error_set(err, SRV_E_BAD_REQUEST, field, "%s must be %s", field, what);
    *out = json_integer_value(v);
    return 0;
}

/* [a, b]: exactly two integers. */
static int json_pair(const json_t *v, const char *field, const char *what, int64_t out[2],
                     srv_error *err)
{
    if (!json_is_array(v) || json_array_size(v) != 2 || !json_is_integer(json_array_get(v, 0)) ||
        !json_is_integer(json_array_get(v, 1)))
        return srv_error_set(err, SRV_E_BAD_REQUEST, field, "%s must be %s", field, what);
    out[0] = json_integer_value(json_array_get(v, 0));
    out[1] = json_integer_value(json_array_get(v, 1));
    return 0;
}

int srv_select_from_json(srv_select *s, const json_t *v, srv_error *err)
{
    if (!json_is_object(v))
        return srv_error_set(err, SRV_E_BAD_REQUEST, "weights_select",
                             "weights_select must be an object with some of: " V1_MEMBERS);
    s->given = true;
    const char *key;
    json_t *m;
    json_object_foreach((json_t *)v, key, m)
    {
        char field[64];
        snprintf(field, sizeof field, "weights_select.%.40s", key);
        static const char *const members[] = {"heads", "queries", "keys", "top_k",
                                              "pool",  "pool_op", "dtype"};
        bool known = false;
        for (size_t i = 0; i < sizeof members / sizeof members[0]; i++)
            known |= strcmp(key, members[i]) == 0;
        if (!known)
            return srv_error_set(err, SRV_E_UNKNOWN_FIELD, field,
                                 "unknown member \"%.40s\" in weights_select; it has: " V1_MEMBERS,
                                 key);
        if (json_is_null(m)) /* null = not given, as for the tensors of /v1 */
            continue;
        if (strcmp(key, "heads") == 0) {
            if (!json_is_array(m) || json_array_size(m) == 0)
                return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                                     "weights_select.heads must be a non-empty array of head "
                                     "indices (leave it out for every head)");
            size_t n = json_array_size(m);
            int64_t *heads = malloc(n * sizeof *heads);
            if (!heads)
                return srv_error_set(err, SRV_E_NOMEM, field, "out of memory");
            for (size_t i = 0; i < n; i++) {
                const json_t *h = json_array_get(m, i);
                if (!json_is_integer(h)) {
                    free(heads);
                    return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                                         "weights_select.heads[%zu] is not an integer; heads are "
                                         "head indices",
                                         i);
                }
                heads[i] = json_integer_value(h);
            }
            set_heads(s, heads, (int64_t)n);
        } else if (strcmp(key, "queries") == 0) {
            if (json_pair(m, field, "[start, stop]: two integers, the query rows [start, stop)",
                          s->sel.queries, err) < 0)
                return -1;
            s->sel.has_queries = true;
        } else if (strcmp(key, "keys") == 0) {
            if (json_pair(m, field, "[start, stop]: two integers, the keys [start, stop)",
                          s->sel.keys, err) < 0)
                return -1;
            s->sel.has_keys = true;
        } else if (strcmp(key, "top_k") == 0) {
            if (json_int(m, field, "an integer k >= 1", &s->sel.top_k, err) < 0)
                return -1;
            s->sel.has_top_k = true;
        } else if (strcmp(key, "pool") == 0) {
            if (json_pair(m, field, "[a, b]: two integers, blocks of a query rows by b keys",
                          s->sel.pool, err) < 0)
                return -1;
            s->sel.has_pool = true;
        } else if (strcmp(key, "pool_op") == 0) {
            if (parse_pool_op(s, json_string_value(m), field, err) < 0)
                return -1;
        } else { /* dtype */
            s->dtype_given = true;
            if (srv_wire_dtype_parse(json_string_value(m), &s->dtype) < 0)
                return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                                     "weights_select.dtype must be \"float32\", \"float16\" or "
                                     "\"bfloat16\"");
        }
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* Flat parameters                                                                                */

/* A whole decimal number (optional '-'), the entire text; false otherwise. */
static bool text_int(const char *t, const char **end_at, int64_t *out)
{
    char *end;
    if (!t || !((*t >= '0' && *t <= '9') || (*t == '-' && t[1] >= '0' && t[1] <= '9')))
        return false;
    errno = 0;
    long long x = strtoll(t, &end, 10);
    if (errno)
        return false;
    *out = x;
    *end_at = end;
    return true;
}

/* "<int><sep><int>" exactly. */
static bool text_pair(const char *t, char sep, int64_t out[2])
{
    const char *e;
    if (!text_int(t, &e, &out[0]) || *e != sep || !text_int(e + 1, &e, &out[1]) || *e)
        return false;
    return true;
}

int srv_select_flat_param(srv_select *s, const char *name, const char *text, bool dtype_v2,
                          srv_error *err)
{
    const char *dt_name = dtype_v2 ? "weights_datatype" : "weights_dtype";
    if (strncmp(name, "weights_", 8) != 0)
        return 0;
    if (!text)
        text = "";
    if (strcmp(name, "weights_heads") == 0) {
        /* "0,5": at most one head per character pair */
        size_t cap = strlen(text) / 2 + 1, n = 0;
        int64_t *heads = malloc(cap * sizeof *heads);
        if (!heads)
            return srv_error_set(err, SRV_E_NOMEM, name, "out of memory");
        const char *p = text, *e;
        for (;;) {
            if (n == cap || !text_int(p, &e, &heads[n]) || (*e && *e != ',')) {
                free(heads);
                return srv_error_set(err, SRV_E_BAD_REQUEST, name,
                                     "weights_heads must be head indices separated by commas, "
                                     "like \"0,5\"; got \"%.40s\"",
                                     text);
            }
            n++;
            if (!*e)
                break;
            p = e + 1;
        }
        set_heads(s, heads, (int64_t)n);
    } else if (strcmp(name, "weights_queries") == 0 || strcmp(name, "weights_keys") == 0) {
        bool q = name[8] == 'q';
        if (!text_pair(text, ':', q ? s->sel.queries : s->sel.keys))
            return srv_error_set(err, SRV_E_BAD_REQUEST, name,
                                 "%s must be a range \"start:stop\" (stop not included), like "
                                 "\"0:128\"; got \"%.40s\"",
                                 name, text);
        if (q)
            s->sel.has_queries = true;
        else
            s->sel.has_keys = true;
    } else if (strcmp(name, "weights_top_k") == 0) {
        const char *e;
        if (!text_int(text, &e, &s->sel.top_k) || *e)
            return srv_error_set(err, SRV_E_BAD_REQUEST, name,
                                 "weights_top_k must be a whole number k >= 1; got \"%.40s\"",
                                 text);
        s->sel.has_top_k = true;
    } else if (strcmp(name, "weights_pool") == 0) {
        if (!text_pair(text, 'x', s->sel.pool))
            return srv_error_set(err, SRV_E_BAD_REQUEST, name,
                                 "weights_pool must be \"AxB\", blocks of A query rows by B keys, "
                                 "like \"8x8\"; got \"%.40s\"",
                                 text);
        s->sel.has_pool = true;
    } else if (strcmp(name, "weights_pool_op") == 0) {
        if (parse_pool_op(s, text, name, err) < 0)
            return -1;
    } else if (strcmp(name, dt_name) == 0) {
        int rc = -1;
        s->dtype_given = true;
        if (dtype_v2) {
            rc = 0;
            if (strcmp(text, "FP32") == 0)
                s->dtype = SRV_WIRE_F32;
            else if (strcmp(text, "FP16") == 0)
                s->dtype = SRV_WIRE_F16;
            else if (strcmp(text, "BF16") == 0)
                s->dtype = SRV_WIRE_BF16;
            else
                rc = -1;
        } else {
            rc = srv_wire_dtype_parse(text, &s->dtype);
        }
        if (rc < 0)
            return srv_error_set(err, SRV_E_BAD_REQUEST, name, "%s must be %s; got \"%.40s\"", name,
                                 dtype_v2 ? "\"FP32\", \"FP16\" or \"BF16\""
                                          : "\"float32\", \"float16\" or \"bfloat16\"",
                                 text);
    } else {
        return 0;
    }
    s->given = true;
    return 1;
}

/* ---------------------------------------------------------------------------------------------- */

int srv_select_engine_error(srv_error *err, const mha_error *me, srv_select_style style)
{
    if (strncmp(me->field, "select", 6) != 0)
        return srv_error_from_mha(err, me, "");
    const char *member = me->field[6] == '.' ? me->field + 7 : "";
    char field[64];
    if (style == SRV_SELECT_V1)
        snprintf(field, sizeof field, "weights_select%s%s", *member ? "." : "", member);
    else
        snprintf(field, sizeof field, "%s%s", *member ? "weights_" : "weights_select", member);
    /* the engine's message starts with the member's name: put the API's in its place */
    const char *rest = me->message;
    size_t ml = strlen(member);
    if (ml && strncmp(rest, member, ml) == 0)
        rest += ml;
    srv_code code = me->status == MHA_ERR_LIMIT   ? SRV_E_TOO_LARGE
                    : me->status == MHA_ERR_NOMEM ? SRV_E_NOMEM
                    : me->status == MHA_ERR_VALUE ? SRV_E_BAD_REQUEST
                                                  : SRV_E_INTERNAL;
    if (!ml)
        return srv_error_set(err, code, field, "%s", me->message);
    return srv_error_set(err, code, field, "%s%s", field, rest);
}

int64_t srv_select_binary_bytes(int64_t count, srv_wire_dtype dtype, bool top_k)
{
    return count * srv_wire_dtype_size(dtype) + (top_k ? count * 4 : 0);
}
