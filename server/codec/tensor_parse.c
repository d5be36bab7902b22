/*
 * tensor_parse.c - tensors in their three JSON forms (docs/api.md, "Tensors in JSON"), read
 * (tensor_write.c writes them).
 *
 * A hot path: tensors are nearly all of a request's bytes (an L forward is a 30 MB body, three
 * million numbers). So parsing reads the JSON text directly with a hand-written scanner - one pass
 * that infers and checks the shape while it converts each number (float_parse.c) straight into the
 * tensor's one allocation - instead of a jansson node per number (~40 bytes and ~16-20 MB/s).
 * Over 700 lines, and one idea: the scanner of the three forms, whose nested, flat and base64
 * readers share its context, its error messages and its element store.
 *
 * Decisions the contract leaves open:
 *   - A tensor with a zero dimension ([] or [[]], or a 0 in "shape") is a 400 ("empty").
 *   - A bare number (or true/false) is a 0-dimensional tensor (count 1); so is "shape": [].
 *   - In the flat form "dtype" may be left out: float32, or bool when the data holds booleans.
 *   - Base64 bool tensors hold bytes 0 or 1; anything else is a 400.
 *   - Strings inside a tensor: only "-inf", only in float masks (allow_neg_inf); "inf", "nan",
 *     "Infinity" and every other string are a 400 bad_value.
 */
#include "tensor.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/bigbuf.h"
#include "base64.h"
#include "float_parse.h"
#include "json_scan.h"
#include "predecode.h"

/* The base64 form is little-endian float32, which is the host's layout: bytes are copied as they are. */
_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "base64 tensors assume a little-endian host");

typedef struct parse_ctx {
    const char *base; /* start of the tensor's text, for byte offsets in errors */
    const char *end;
    const srv_tensor_rules *rules;
    const char *field; /* the name in messages: "query", or "query.data" inside the flat form */
    const char *top;   /* the request field errors name ("query")                             */
    bool flat_data;    /* parsing the flat form's "data": one level only                       */
    srv_error *err;
} parse_ctx;

static int max_depth_of(const srv_tensor_rules *r)
{
    int d = r->max_depth;
    return d < 1 || d > SRV_TENSOR_MAX_DIMS ? SRV_TENSOR_MAX_DIMS : d;
}

/* srv_json_skip_ws without the call for the usual cases: none ("1,2") or one space ("1, 2"). */
static inline const char *skip_ws(const char *p, const char *end)
{
    if (p < end && (unsigned char)*p > ' ')
        return p;
    if (end - p >= 2 && *p == ' ' && (unsigned char)p[1] > ' ')
        return p + 1;
    return srv_json_skip_ws(p, end);
}

/* "query[1][0]" for the first `levels` indices in pos; into out[cap]. */
static const char *index_path(char *out, size_t cap, const char *field, const int64_t *pos, int levels)
{
    size_t n = (size_t)snprintf(out, cap, "%s", field);
    for (int i = 0; i < levels && n < cap; i++)
        n += (size_t)snprintf(out + n, cap - n, "[%lld]", (long long)pos[i]);
    return out;
}

static int json_err(const parse_ctx *c, const char *p, const char *what)
{
    return srv_error_set(c->err, SRV_E_BAD_JSON, c->top, "invalid JSON at byte %zu of %s: %s",
                         (size_t)(p - c->base), c->field, what);
}

/* Describes the (invalid) string value at p for an error: at most 24 bytes of it, printable ASCII. */
static void string_excerpt(char *out, size_t cap, const char *p, const char *end)
{
    size_t n = 0;
    p++; /* opening quote */
    while (p < end && *p != '"' && n + 4 < cap && n < 24) {
        unsigned char ch = (unsigned char)*p++;
        out[n++] = ch >= 0x20 && ch < 0x7F ? (char)ch : '?';
    }
    if (p < end && *p != '"' && n + 4 < cap) {
        memcpy(out + n, "...", 3);
        n += 3;
    }
    out[n] = '\0';
}

/* The growing element store of the nested parser: float or byte elements in one allocation. */
typedef struct elems {
    void *data;
    int64_t n, cap;
    int kind; /* -1 not known yet, SRV_DTYPE_F32, SRV_DTYPE_BOOL */
} elems;

static int elems_grow(parse_ctx *c, elems *e)
{
    int64_t max = c->rules->max_elements > 0 ? c->rules->max_elements : INT64_MAX / 4;
    if (e->n >= max)
        return srv_error_set(c->err, SRV_E_TOO_LARGE, c->top,
                             "%s has more than %lld elements, the limit per tensor", c->field,
                             (long long)max);
    /* text denser than the first estimate (parse_nested): double, keeping the elements */
    int64_t cap = e->cap < max / 2 ? e->cap * 2 + 16 : max;
    void *p = srv_bigbuf_array_alloc((size_t)cap * 4);
    if (!p)
        return srv_error_set(c->err, SRV_E_NOMEM, c->top, "out of memory reading %s", c->field);
    memcpy(p, e->data, (size_t)e->n * (e->kind == SRV_DTYPE_BOOL ? 1 : 4));
    srv_bigbuf_array_free(e->data);
    e->data = p;
    e->cap = cap;
    return 0;
}

/* Parses one scalar of a nested array at p (no white space before it) into e; returns the position
 * after it or NULL. pos/levels name it in errors. */
static const char *parse_scalar(parse_ctx *c, const char *p, elems *e, const int64_t *pos, int levels)
{
    const srv_tensor_rules *r = c->rules;
    const char *end = c->end;
    char path[192];
    int kind;
    float f = 0;
    unsigned char bv = 0;
    const char *q;
    char ch = *p;

    /* one test for both (the sign of real data is random: a branch on it is mispredicted) */
    if (((unsigned)(ch - '0') <= 9) | (ch == '-')) {
        if (p + 1 < end && p[1] == 'I' && ch == '-') {
            json_err(c, p, "NaN and Infinity are not JSON numbers");
            return NULL;
        }
        bool ovf;
        size_t n = srv_parse_float(p, end, &f, &ovf);
        if (n == 0) {
            json_err(c, p, "invalid number");
            return NULL;
        }
        q = p + n;
        if (ovf) {
            srv_error_set(c->err, SRV_E_BAD_VALUE, c->top,
                          "%s = %.*s is out of float32 range (largest is 3.4028235e38)",
                          index_path(path, sizeof path, c->field, pos, levels),
                          (int)(n < 40 ? n : 40), p);
            return NULL;
        }
        kind = SRV_DTYPE_F32;
    } else if (ch == 't' || ch == 'f') {
        size_t n = ch == 't' ? 4 : 5;
        if ((size_t)(end - p) < n || memcmp(p, ch == 't' ? "true" : "false", n) != 0) {
            json_err(c, p, "invalid literal");
            return NULL;
        }
        q = p + n;
        if (!r->allow_bool) {
            srv_error_set(c->err, SRV_E_BAD_VALUE, c->top,
                          "%s is a boolean where %s holds numbers: true/false go in bool masks",
                          index_path(path, sizeof path, c->field, pos, levels), c->field);
            return NULL;
        }
        bv = ch == 't';
        kind = SRV_DTYPE_BOOL;
    } else if (ch == '"') {
        q = srv_json_string(p, end, NULL, 0, NULL, c->base, c->field, c->err);
        if (!q)
            return NULL;
        if (q - p == 6 && memcmp(p, "\"-inf\"", 6) == 0 && r->allow_neg_inf) {
            f = -INFINITY;
            kind = SRV_DTYPE_F32;
        } else {
            char ex[40];
            string_excerpt(ex, sizeof ex, p, end);
            srv_error_set(c->err, SRV_E_BAD_VALUE, c->top, "%s is the string \"%s\"; %s",
                          index_path(path, sizeof path, c->field, pos, levels), ex,
                          r->allow_neg_inf ? "a float mask takes numbers and \"-inf\" (NaN and +inf "
                                             "are not accepted)"
                                           : "expected a number (NaN and infinities are not accepted)");
            return NULL;
        }
    } else if (ch == 'n' && end - p >= 4 && memcmp(p, "null", 4) == 0) {
        srv_error_set(c->err, SRV_E_BAD_VALUE, c->top, "%s is null; expected a number",
                      index_path(path, sizeof path, c->field, pos, levels));
        return NULL;
    } else if (ch == '{') {
        srv_error_set(c->err, SRV_E_BAD_REQUEST, c->top,
                      "%s is an object; a nested tensor holds only arrays and numbers",
                      index_path(path, sizeof path, c->field, pos, levels));
        return NULL;
    } else {
        json_err(c, p,
                 ch == 'N' || ch == 'I' || ch == '-' ? "NaN and Infinity are not JSON numbers"
                                                     : "unexpected character, expected a number");
        return NULL;
    }
    /* the token must end here: "1.5.3", "01", "truex" are not JSON */
    if (q < end && !(*q == ',' || *q == ']' || *q == ' ' || *q == '\n' || *q == '\r' || *q == '\t' ||
                     *q == '}')) {
        json_err(c, q, "unexpected character after a value");
        return NULL;
    }

    if (e->kind != kind) {
        if (e->kind >= 0) {
            srv_error_set(c->err, SRV_E_BAD_VALUE, c->top,
                          "%s is a %s but earlier elements are %s; a tensor holds numbers or booleans, "
                          "not both",
                          index_path(path, sizeof path, c->field, pos, levels),
                          kind == SRV_DTYPE_BOOL ? "boolean" : "number",
                          e->kind == SRV_DTYPE_BOOL ? "booleans" : "numbers");
            return NULL;
        }
        e->kind = kind;
    }
    if (e->n >= e->cap && elems_grow(c, e) != 0)
        return NULL;
    if (kind == SRV_DTYPE_F32)
        ((float *)e->data)[e->n++] = f;
    else
        ((uint8_t *)e->data)[e->n++] = bv;
    return q;
}

/* The fast lane of parse_nested, after a float number inside the innermost array (d arrays open):
 * appends the float numbers that follow as ", number" (the bulk of every tensor) and returns the
 * position of the first ',' it does not take. Anything unusual - white space before the ',', a
 * value that is not a plain number, an error, a full store - is left to the general loop, which
 * reads it again and reports it as it always does. */
static const char *number_run(parse_ctx *c, const char *p, elems *e, int64_t *pos, int d)
{
    const char *end = c->end;
    float *out = e->data;
    int64_t n = e->n, cap = e->cap;
    while (p < end && *p == ',' && n < cap) {
        const char *q = skip_ws(p + 1, end);
        if (q >= end || !(((unsigned)(*q - '0') <= 9) | (*q == '-')))
            break;
        bool ovf;
        size_t len = srv_parse_float(q, end, &out[n], &ovf);
        const char *r = q + len;
        if (len == 0 || ovf ||
            (r < end && *r != ',' && *r != ']' && *r != ' ' && *r != '\n' && *r != '\r' && *r != '\t'))
            break;
        n++;
        pos[d - 1]++;
        p = r;
    }
    e->n = n;
    return p;
}

/* Parses a nested array (or a bare scalar) at p into out, inferring and checking the shape with at
 * most max_depth levels. Returns the position after the value or NULL with err set (out then owns
 * nothing). */
static const char *parse_nested(parse_ctx *c, const char *p, int max_depth, srv_tensor *out)
{
    const srv_tensor_rules *r = c->rules;
    const char *end = c->end;
    int64_t pos[SRV_TENSOR_MAX_DIMS + 1] = {0};   /* elements so far in the open array per level */
    int64_t shape[SRV_TENSOR_MAX_DIMS + 1] = {0}; /* length of level L, known once one closed    */
    bool known[SRV_TENSOR_MAX_DIMS + 1] = {false};
    int leaf = -1; /* the level numbers sit at, once the first one is seen */
    int d = 0;     /* arrays open now */
    char path[192];

    /* The first allocation assumes 8 bytes of text a number (clients send about 10: "-0.123456, ");
     * denser text ("0,1,0") grows it. Not the bound of 2 bytes ("1,"): 4-5 times too big, the L
     * layer's query (12.6 MB of floats) would take 66 MB, which the array cache (bigbuf.h) then
     * holds, and faults in, for a tensor a fifth of its size. */
    elems e = {NULL, 0, 0, -1};
    int64_t max = r->max_elements > 0 ? r->max_elements : INT64_MAX / 4;
    int64_t est = (int64_t)((end - p) / 8 + 16);
    e.cap = est < max ? est : max;
    e.data = srv_bigbuf_array_alloc((size_t)(e.cap > 0 ? e.cap : 1) * 4);
    if (!e.data) {
        srv_error_set(c->err, SRV_E_NOMEM, c->top, "out of memory reading %s", c->field);
        return NULL;
    }

    for (;;) {
        /* a value at level d */
        if (p >= end) {
            json_err(c, p, "unexpected end, expected a value");
            goto fail;
        }
        if (*p == '[') {
            if (leaf >= 0 && d >= leaf) {
                srv_error_set(c->err, SRV_E_SHAPE, c->top,
                              "%s is an array where numbers were found before (ragged nesting)",
                              index_path(path, sizeof path, c->field, pos, d));
                goto fail;
            }
            if (d >= max_depth) {
                if (c->flat_data)
                    srv_error_set(c->err, SRV_E_BAD_REQUEST, c->top,
                                  "%s must be a flat array of numbers (the shape goes in \"shape\")",
                                  c->field);
                else
                    srv_error_set(c->err, SRV_E_SHAPE, c->top, "%s nests deeper than %d levels",
                                  c->field, max_depth);
                goto fail;
            }
            pos[d] = 0;
            d++;
            p = skip_ws(p + 1, end);
            if (p < end && *p == ']') { /* an empty array closes at once */
                p++;
                d--;
                if (known[d] && shape[d] != 0) {
                    srv_error_set(c->err, SRV_E_SHAPE, c->top,
                                  "%s is empty but earlier ones at that level have %lld elements "
                                  "(ragged)",
                                  index_path(path, sizeof path, c->field, pos, d), (long long)shape[d]);
                    goto fail;
                }
                if (leaf >= 0 && d + 1 > leaf) {
                    srv_error_set(c->err, SRV_E_SHAPE, c->top, "%s is an empty array where numbers "
                                  "were found before (ragged nesting)",
                                  index_path(path, sizeof path, c->field, pos, d));
                    goto fail;
                }
                known[d] = true;
                shape[d] = 0;
                goto after_value;
            }
            continue;
        }
        if (leaf < 0) {
            for (int l = d; l <= SRV_TENSOR_MAX_DIMS; l++) {
                if (known[l]) {
                    srv_error_set(c->err, SRV_E_SHAPE, c->top,
                                  "%s is a number where arrays were found before (ragged nesting)",
                                  index_path(path, sizeof path, c->field, pos, d));
                    goto fail;
                }
            }
            leaf = d;
        } else if (d != leaf) {
            srv_error_set(c->err, SRV_E_SHAPE, c->top,
                          "%s is a number where an array was expected (ragged nesting)",
                          index_path(path, sizeof path, c->field, pos, d));
            goto fail;
        }
        p = parse_scalar(c, p, &e, pos, d);
        if (!p)
            goto fail;
        if (e.kind == SRV_DTYPE_F32 && d > 0)
            p = number_run(c, p, &e, pos, d);

    after_value:
        /* after a value at level d: ',' or ']' closes into level d-1 */
        for (;;) {
            if (d == 0)
                goto done;
            p = skip_ws(p, end);
            if (p < end && *p == ',') {
                pos[d - 1]++;
                p = skip_ws(p + 1, end);
                break; /* next value */
            }
            if (p < end && *p == ']') {
                p++;
                d--;
                int64_t n = pos[d] + 1;
                if (known[d] && shape[d] != n) {
                    srv_error_set(c->err, SRV_E_SHAPE, c->top,
                                  "%s has %lld elements but earlier ones at that level have %lld "
                                  "(ragged arrays are not tensors)",
                                  index_path(path, sizeof path, c->field, pos, d), (long long)n,
                                  (long long)shape[d]);
                    goto fail;
                }
                known[d] = true;
                shape[d] = n;
                continue;
            }
            json_err(c, p, "expected ',' or ']'");
            goto fail;
        }
    }

done:
    out->ndim = 0;
    out->count = 1;
    int nd = leaf >= 0 ? leaf : 0;
    if (leaf < 0)
        while (nd < SRV_TENSOR_MAX_DIMS && known[nd])
            nd++;
    for (int l = 0; l < nd; l++) {
        out->shape[l] = shape[l];
        out->count *= shape[l];
    }
    out->ndim = nd;
    if (out->count == 0 && !c->flat_data) { /* a flat form's "data": [] is judged by its "shape" */
        char sh[160];
        size_t k = 0;
        for (int l = 0; l < nd && k < sizeof sh; l++)
            k += (size_t)snprintf(sh + k, sizeof sh - k, "%s%lld", l ? ", " : "", (long long)shape[l]);
        srv_error_set(c->err, SRV_E_SHAPE, c->top, "%s is empty (shape [%s]); a tensor needs at "
                      "least one element", c->field, nd ? sh : "");
        goto fail;
    }
    if (out->count != e.n) { /* cannot happen: every closed array was checked */
        srv_error_set(c->err, SRV_E_INTERNAL, c->top, "%s: shape/element count mismatch", c->field);
        goto fail;
    }
    out->dtype = e.kind == SRV_DTYPE_BOOL ? SRV_DTYPE_BOOL : SRV_DTYPE_F32;
    out->data = e.data;
    return p;

fail:
    srv_bigbuf_array_free(e.data);
    return NULL;
}

/* Reads the "shape" array at p: non-negative integers. Returns position after it or NULL. */
static const char *parse_shape(parse_ctx *c, const char *p, int max_dims, int64_t *shape, int *ndim)
{
    const char *end = c->end;
    *ndim = 0;
    if (p >= end || *p != '[') {
        srv_error_set(c->err, SRV_E_BAD_REQUEST, c->top,
                      "%s.shape must be an array of non-negative integers", c->field);
        return NULL;
    }
    p = srv_json_skip_ws(p + 1, end);
    if (p < end && *p == ']')
        return p + 1;
    for (;;) {
        const char *t = p;
        int64_t v = 0;
        bool big = false;
        if (p < end && *p == '0') {
            p++;
        } else {
            while (p < end && (unsigned)(*p - '0') <= 9) {
                if (v > (INT64_MAX - 9) / 10)
                    big = true;
                else
                    v = v * 10 + (*p - '0');
                p++;
            }
        }
        if (p == t || (p < end && (*p == '.' || *p == 'e' || *p == 'E' || (unsigned)(*p - '0') <= 9))) {
            /* a valid JSON number that is not an integer, or no number: say which */
            srv_error set_probe = {0};
            const char *q = srv_json_skip_value(t, end, 0, 1, c->base, c->field, &set_probe);
            if (!q) {
                srv_error_set(c->err, set_probe.code, c->top, "%s", set_probe.message);
                return NULL;
            }
            srv_error_set(c->err, SRV_E_BAD_REQUEST, c->top,
                          "%s.shape[%d] is %.*s; shape entries are non-negative integers", c->field,
                          *ndim, (int)(q - t < 32 ? q - t : 32), t);
            return NULL;
        }
        if (*ndim >= max_dims) {
            srv_error_set(c->err, SRV_E_SHAPE, c->top, "%s.shape has more than %d dimensions",
                          c->field, max_dims);
            return NULL;
        }
        if (big) {
            srv_error_set(c->err, SRV_E_TOO_LARGE, c->top, "%s.shape[%d] = %.*s is too large",
                          c->field, *ndim, (int)(p - t < 32 ? p - t : 32), t);
            return NULL;
        }
        shape[(*ndim)++] = v;
        p = srv_json_skip_ws(p, end);
        if (p < end && *p == ',') {
            p = srv_json_skip_ws(p + 1, end);
            continue;
        }
        if (p < end && *p == ']')
            return p + 1;
        json_err(c, p, "expected ',' or ']' in shape");
        return NULL;
    }
}

/* Whether [s, s+n) holds only the base64 alphabet (RFC 4648: A-Z a-z 0-9 + /). */
static bool base64_text(const char *s, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        char ch = s[i];
        if (!((ch >= 'A' && ch <= 'Z') || (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') ||
              ch == '+' || ch == '/'))
            return false;
    }
    return true;
}

/* The flat and base64 forms: {"shape": [...], "dtype": "...", "data": [...] | "base64": "..."}. */
static const char *parse_object_form(parse_ctx *c, const char *p, srv_tensor *out)
{
    const srv_tensor_rules *r = c->rules;
    const char *end = c->end;
    int max_dims = max_depth_of(r);
    int64_t shape[SRV_TENSOR_MAX_DIMS];
    int ndim = 0;
    bool have_shape = false, have_dtype = false, have_data = false, have_b64 = false;
    srv_dtype dtype = SRV_DTYPE_F32;
    srv_tensor data = {0};
    const char *b64 = NULL, *b64_end = NULL; /* the string with its quotes */
    size_t b64_len = 0;                       /* its length unescaped        */
    char datafield[96];
    snprintf(datafield, sizeof datafield, "%s.data", c->field);

    p = srv_json_skip_ws(p + 1, end);
    if (p < end && *p == '}') {
        p++;
        goto members_done;
    }
    for (;;) {
        char key[32];
        size_t klen;
        const char *kp = p;
        p = srv_json_string(p, end, key, sizeof key, &klen, c->base, c->field, c->err);
        if (!p)
            goto fail;
        p = srv_json_skip_ws(p, end);
        if (p >= end || *p != ':') {
            json_err(c, p, "expected ':' after a key");
            goto fail;
        }
        p = srv_json_skip_ws(p + 1, end);
        bool *seen = klen != strlen(key) ? NULL
                     : strcmp(key, "shape") == 0  ? &have_shape
                     : strcmp(key, "dtype") == 0  ? &have_dtype
                     : strcmp(key, "data") == 0   ? &have_data
                     : strcmp(key, "base64") == 0 ? &have_b64
                                                  : NULL;
        if (!seen) {
            char ex[40], f[128];
            string_excerpt(ex, sizeof ex, kp, end);
            /* named like every other unknown field: "query.dtyp", as "config.batch_frist" */
            snprintf(f, sizeof f, "%s.%s", c->top, klen == strlen(key) ? key : "?");
            srv_error_set(c->err, SRV_E_UNKNOWN_FIELD, f,
                          "%s has an unknown field \"%s\" (a tensor object has shape, dtype and data "
                          "or base64)",
                          c->field, ex);
            goto fail;
        }
        if (*seen) {
            srv_error_set(c->err, SRV_E_BAD_JSON, c->top, "duplicate key \"%s\" in %s", key, c->field);
            goto fail;
        }
        *seen = true;
        if (seen == &have_shape) {
            p = parse_shape(c, p, max_dims, shape, &ndim);
        } else if (seen == &have_dtype) {
            char dt[16];
            size_t dl;
            const char *q = p < end && *p == '"'
                                ? srv_json_string(p, end, dt, sizeof dt, &dl, c->base, c->field, c->err)
                                : NULL;
            if (q && dl == 7 && strcmp(dt, "float32") == 0) {
                dtype = SRV_DTYPE_F32;
            } else if (q && dl == 4 && strcmp(dt, "bool") == 0) {
                if (!r->allow_bool) {
                    srv_error_set(c->err, SRV_E_BAD_REQUEST, c->top,
                                  "%s.dtype is \"bool\"; %s takes float32 (only masks take bool)",
                                  c->field, c->field);
                    goto fail;
                }
                dtype = SRV_DTYPE_BOOL;
            } else {
                srv_error_set(c->err, SRV_E_BAD_REQUEST, c->top, "%s.dtype must be \"float32\"%s",
                              c->field, r->allow_bool ? " or \"bool\"" : "");
                goto fail;
            }
            p = q;
        } else if (seen == &have_data) {
            if (p >= end || *p != '[') {
                srv_error_set(c->err, SRV_E_BAD_REQUEST, c->top, "%s.data must be an array", c->field);
                goto fail;
            }
            parse_ctx dc = *c;
            dc.field = datafield;
            dc.flat_data = true;
            p = parse_nested(&dc, p, 1, &data);
        } else {
            if (p >= end || *p != '"') {
                srv_error_set(c->err, SRV_E_BAD_REQUEST, c->top, "%s.base64 must be a string",
                              c->field);
                goto fail;
            }
            b64 = p;
            /* decoded while the body arrived: base64 characters only, no need to look again */
            const char *close = r->predecoded ? srv_predecoder_close(r->predecoded, r->body, p) : NULL;
            if (close && close < end) {
                b64_len = (size_t)(close - p - 1);
                p = close + 1;
            } else {
                p = srv_json_string(p, end, NULL, 0, &b64_len, c->base, c->field, c->err);
            }
            b64_end = p;
        }
        if (!p)
            goto fail;
        p = srv_json_skip_ws(p, end);
        if (p < end && *p == ',') {
            p = srv_json_skip_ws(p + 1, end);
            continue;
        }
        if (p < end && *p == '}') {
            p++;
            break;
        }
        json_err(c, p, "expected ',' or '}'");
        goto fail;
    }

members_done:
    if (!have_shape) {
        srv_error_set(c->err, SRV_E_MISSING_FIELD, c->top,
                      "%s is an object without \"shape\" (a tensor object has shape, dtype and data "
                      "or base64)",
                      c->field);
        goto fail;
    }
    if (have_data == have_b64) {
        srv_error_set(c->err, have_data ? SRV_E_BAD_REQUEST : SRV_E_MISSING_FIELD, c->top,
                      "%s needs exactly one of \"data\" and \"base64\"", c->field);
        goto fail;
    }
    /* the element count, checked for overflow and against the limit before anything is allocated */
    int64_t max = r->max_elements > 0 ? r->max_elements : INT64_MAX / 4;
    int64_t count = 1;
    bool empty = false;
    char sh[160];
    size_t k = 0;
    for (int l = 0; l < ndim; l++) {
        if (k < sizeof sh)
            k += (size_t)snprintf(sh + k, sizeof sh - k, "%s%lld", l ? ", " : "", (long long)shape[l]);
        if (shape[l] == 0)
            empty = true;
        else if (count <= max)
            count = shape[l] > max / count ? max + 1 : count * shape[l];
    }
    sh[k < sizeof sh ? k : sizeof sh - 1] = '\0';
    if (ndim == 0)
        sh[0] = '\0';
    if (empty) {
        srv_error_set(c->err, SRV_E_SHAPE, c->top,
                      "%s is empty (shape [%s]); a tensor needs at least one element", c->field, sh);
        goto fail;
    }
    if (count > max) {
        srv_error_set(c->err, SRV_E_TOO_LARGE, c->top,
                      "%s has shape [%s], more than %lld elements, the limit per tensor", c->field, sh,
                      (long long)max);
        goto fail;
    }

    if (have_data) {
        if (have_dtype && data.dtype != dtype && data.count) {
            srv_error_set(c->err, SRV_E_BAD_VALUE, c->top, "%s.dtype is %s but %s.data holds %s",
                          c->field, dtype == SRV_DTYPE_BOOL ? "bool" : "float32", c->field,
                          data.dtype == SRV_DTYPE_BOOL ? "booleans" : "numbers");
            goto fail;
        }
        if (data.count != count) {
            srv_error_set(c->err, SRV_E_SHAPE, c->top,
                          "%s.data has %lld elements but shape [%s] needs %lld", c->field,
                          (long long)data.count, sh, (long long)count);
            goto fail;
        }
        out->dtype = data.dtype;
        out->data = data.data;
        data.data = NULL;
    } else {
        size_t esize = dtype == SRV_DTYPE_BOOL ? 1 : 4;
        const char *s = b64 + 1;
        size_t slen = (size_t)(b64_end - 1 - s);
        char *unescaped = NULL;
        if (b64_len != slen) { /* escapes (an encoder that writes "\/"): unescape first (rare) */
            unescaped = malloc(slen + 1);
            if (!unescaped) {
                srv_error_set(c->err, SRV_E_NOMEM, c->top, "out of memory reading %s", c->field);
                goto fail;
            }
            srv_json_string(b64, b64_end, unescaped, slen + 1, &slen, c->base, c->field, c->err);
            s = unescaped;
        }
        size_t need = (size_t)count * esize;
        size_t pad = slen >= 1 && s[slen - 1] == '=' ? (slen >= 2 && s[slen - 2] == '=' ? 2 : 1) : 0;
        size_t have = slen % 4 == 0 ? slen / 4 * 3 - pad : 0;
        if (slen % 4 != 0) {
            free(unescaped);
            srv_error_set(c->err, SRV_E_BAD_REQUEST, c->top,
                          "%s.base64 is not valid base64 (its length %zu is not a multiple of 4; "
                          "padding '=' is required)",
                          c->field, slen);
            goto fail;
        }
        if (have != need && !base64_text(s, slen - pad)) { /* say the real fault first */
            free(unescaped);
            srv_error_set(c->err, SRV_E_BAD_REQUEST, c->top,
                          "%s.base64 is not valid base64 (RFC 4648 alphabet A-Z a-z 0-9 + /, '=' "
                          "padding, no line breaks)",
                          c->field);
            goto fail;
        }
        if (have != need) {
            free(unescaped);
            srv_error_set(c->err, SRV_E_SHAPE, c->top,
                          "%s.base64 holds %zu bytes but shape [%s] of %s needs %zu", c->field, have,
                          sh, dtype == SRV_DTYPE_BOOL ? "bool (1 byte each)" : "float32 (4 bytes each)",
                          need);
            goto fail;
        }
        /* decoded already while the body arrived, when this is the very text (predecode.h) */
        size_t pre_len = 0;
        bool pre_nonfinite = false;
        uint8_t *buf = !unescaped && r->predecoded
                           ? srv_predecoder_take(r->predecoded, (size_t)(s - r->body),
                                                 (size_t)(s - r->body) + slen, &pre_len, &pre_nonfinite)
                           : NULL;
        bool special = pre_nonfinite; /* float32: an element is inf or NaN (found while decoding) */
        long got = (long)pre_len;
        if (!buf) {
            buf = srv_bigbuf_array_alloc(need + 3); /* decode writes whole triples */
            if (!buf) {
                free(unescaped);
                srv_error_set(c->err, SRV_E_NOMEM, c->top, "out of memory reading %s", c->field);
                goto fail;
            }
            got = dtype == SRV_DTYPE_F32 ? srv_base64_decode_f32(buf, &special, s, slen)
                                         : srv_base64_decode(buf, s, slen);
        }
        free(unescaped);
        if (got != (long)need) {
            srv_bigbuf_array_free(buf);
            srv_error_set(c->err, SRV_E_BAD_REQUEST, c->top,
                          "%s.base64 is not valid base64 (RFC 4648 alphabet A-Z a-z 0-9 + /, '=' "
                          "padding, no line breaks)",
                          c->field);
            goto fail;
        }
        if (dtype == SRV_DTYPE_F32) {
            float *f = (float *)buf;
            for (int64_t i = 0; special && i < count; i++) { /* find the element to name */
                if (isfinite(f[i]) || (r->allow_neg_inf && f[i] == -INFINITY))
                    continue;
                srv_error_set(c->err, SRV_E_BAD_VALUE, c->top,
                              "%s.base64 element %lld is %s; %s", c->field, (long long)i,
                              isnan(f[i]) ? "NaN" : f[i] > 0 ? "+inf" : "-inf",
                              r->allow_neg_inf ? "a float mask takes finite numbers and -inf"
                                               : "NaN and infinities are not accepted");
                srv_bigbuf_array_free(buf);
                goto fail;
            }
        } else {
            for (int64_t i = 0; i < count; i++) {
                if (buf[i] <= 1)
                    continue;
                srv_error_set(c->err, SRV_E_BAD_VALUE, c->top,
                              "%s.base64 byte %lld is %u; bool tensors hold bytes 0 and 1", c->field,
                              (long long)i, buf[i]);
                srv_bigbuf_array_free(buf);
                goto fail;
            }
        }
        out->dtype = dtype;
        out->data = buf;
    }
    out->ndim = ndim;
    memcpy(out->shape, shape, sizeof(int64_t) * (size_t)ndim);
    out->count = count;
    return p;

fail:
    srv_tensor_free(&data);
    return NULL;
}

int srv_tensor_parse(srv_tensor *out, const char *json, size_t len, const srv_tensor_rules *rules,
                     srv_error *err)
{
    memset(out, 0, sizeof *out);
    const char *name = rules->field ? rules->field : "tensor";
    parse_ctx c = {json, json + len, rules, name, name, false, err};
    const char *p = srv_json_skip_ws(json, c.end);
    if (p >= c.end)
        return srv_error_set(err, SRV_E_BAD_JSON, c.field, "%s is empty; expected a tensor", c.field);
    if (*p == '{')
        p = parse_object_form(&c, p, out);
    else
        p = parse_nested(&c, p, max_depth_of(rules), out);
    if (!p) {
        srv_tensor_free(out);
        return -1;
    }
    p = srv_json_skip_ws(p, c.end);
    if (p != c.end) {
        srv_tensor_free(out);
        return json_err(&c, p, "text after the tensor");
    }
    return 0;
}

void srv_tensor_free(srv_tensor *t)
{
    if (!t)
        return;
    srv_bigbuf_array_free(t->data);
    memset(t, 0, sizeof *t);
}
