/* golden.c - loader of the torch-generated golden cases (see golden.h, tests/golden/README.md). */
#include "golden.h"

#include <dirent.h>
#include <errno.h>
#include <jansson.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"

static const char *const stage_names[MHA_TRACE_NSTAGES] = {
    "q_proj", "k_proj", "v_proj", "q_heads", "k_heads", "v_heads",
    "scores", "attn_weights", "head_outputs", "concat", "output",
};

const char *golden_stage_name(int stage)
{
    if (stage < 0 || stage >= MHA_TRACE_NSTAGES)
        return "?";
    return stage_names[stage];
}

/* ---------------------------------------------------------------------------------------------- */
/* base64                                                                                         */

static int b64_value(unsigned char ch)
{
    if (ch >= 'A' && ch <= 'Z')
        return ch - 'A';
    if (ch >= 'a' && ch <= 'z')
        return ch - 'a' + 26;
    if (ch >= '0' && ch <= '9')
        return ch - '0' + 52;
    if (ch == '+')
        return 62;
    if (ch == '/')
        return 63;
    return -1;
}

int64_t golden_base64_decode(uint8_t *out, size_t out_cap, const char *in, size_t in_len)
{
    while (in_len > 0 && in[in_len - 1] == '=')
        in_len--;
    if (in_len % 4 == 1)
        return -1;
    size_t need = in_len / 4 * 3 + (in_len % 4 ? in_len % 4 - 1 : 0);
    if (need > out_cap)
        return -1;
    size_t o = 0;
    uint32_t acc = 0;
    int bits = 0;
    for (size_t i = 0; i < in_len; i++) {
        int v = b64_value((unsigned char)in[i]);
        if (v < 0)
            return -1;
        acc = (acc << 6) | (uint32_t)v;
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            out[o++] = (uint8_t)(acc >> bits);
            acc &= (1u << bits) - 1;
        }
    }
    return (int64_t)o;
}

/* ---------------------------------------------------------------------------------------------- */
/* loading                                                                                        */

typedef struct loader {
    const char *path;
    char *err;
    size_t errlen;
} loader;

static int fail(loader *ld, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static int fail(loader *ld, const char *fmt, ...)
{
    if (!ld->err || ld->errlen == 0)
        return -1;
    int n = snprintf(ld->err, ld->errlen, "%s: ", ld->path);
    if (n < 0 || (size_t)n >= ld->errlen)
        return -1;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(ld->err + n, ld->errlen - (size_t)n, fmt, ap);
    va_end(ap);
    return -1;
}

static void tensor_free(golden_tensor *t)
{
    free(t->data);
    free(t->bytes);
    memset(t, 0, sizeof *t);
}

/* Decodes {"shape", "dtype", "base64"} into t. */
static int tensor_load(loader *ld, golden_tensor *t, json_t *obj, const char *what)
{
    memset(t, 0, sizeof *t);
    json_t *shape = json_object_get(obj, "shape");
    const char *dtype = json_string_value(json_object_get(obj, "dtype"));
    json_t *b64 = json_object_get(obj, "base64");
    if (!json_is_object(obj) || !json_is_array(shape) || !dtype || !json_is_string(b64))
        return fail(ld, "%s: not a {shape, dtype, base64} tensor", what);
    size_t ndim = json_array_size(shape);
    if (ndim > GOLDEN_MAX_NDIM)
        return fail(ld, "%s: %zu dimensions, at most %d", what, ndim, GOLDEN_MAX_NDIM);
    int64_t count = 1;
    for (size_t i = 0; i < ndim; i++) {
        json_t *d = json_array_get(shape, i);
        if (!json_is_integer(d) || json_integer_value(d) < 0 || json_integer_value(d) > (1 << 24))
            return fail(ld, "%s: bad shape[%zu]", what, i);
        t->shape[i] = json_integer_value(d);
        count *= t->shape[i];
        if (count > (int64_t)1 << 28)
            return fail(ld, "%s: too many elements", what);
    }
    t->ndim = (int)ndim;
    t->count = count;
    if (strcmp(dtype, "bool") == 0)
        t->is_bool = true;
    else if (strcmp(dtype, "float32") != 0)
        return fail(ld, "%s: dtype \"%s\", want float32 or bool", what, dtype);
    size_t nbytes = (size_t)count * (t->is_bool ? 1 : sizeof(float));
    uint8_t *buf = malloc(nbytes ? nbytes : 1);
    if (!buf)
        return fail(ld, "%s: out of memory", what);
    int64_t got = golden_base64_decode(buf, nbytes, json_string_value(b64), json_string_length(b64));
    if (got != (int64_t)nbytes) {
        free(buf);
        return fail(ld, "%s: base64 gives %lld bytes, shape needs %zu", what, (long long)got, nbytes);
    }
    if (t->is_bool) {
        t->bytes = buf;
    } else {
        /* little-endian float32 in the file; this machine is little-endian too (x86-64, arm64) */
        t->data = (float *)(void *)buf;
    }
    t->present = true;
    return 0;
}

static int opt_tensor(loader *ld, golden_tensor *t, json_t *parent, const char *key, const char *what)
{
    json_t *obj = json_object_get(parent, key);
    if (!obj) {
        memset(t, 0, sizeof *t);
        return 0;
    }
    return tensor_load(ld, t, obj, what);
}

static char *dup_string(json_t *s)
{
    const char *v = json_string_value(s);
    return strdup(v ? v : "");
}

static int get_bool(loader *ld, bool *out, json_t *obj, const char *key, bool dflt)
{
    json_t *v = json_object_get(obj, key);
    if (!v) {
        *out = dflt;
        return 0;
    }
    if (!json_is_boolean(v))
        return fail(ld, "%s is not a boolean", key);
    *out = json_is_true(v);
    return 0;
}

static int get_int(loader *ld, int64_t *out, json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (!json_is_integer(v))
        return fail(ld, "config.%s is not an integer", key);
    *out = json_integer_value(v);
    return 0;
}

/* An optional integer member (0 when absent). */
static int get_opt_int(loader *ld, int64_t *out, json_t *obj, const char *key)
{
    *out = 0;
    return json_object_get(obj, key) ? get_int(ld, out, obj, key) : 0;
}

static int load_config(loader *ld, mha_config *cfg, json_t *obj)
{
    if (!json_is_object(obj))
        return fail(ld, "no config object");
    memset(cfg, 0, sizeof *cfg);
    if (get_int(ld, &cfg->embed_dim, obj, "embed_dim") || get_int(ld, &cfg->num_heads, obj, "num_heads") ||
        get_int(ld, &cfg->kdim, obj, "kdim") || get_int(ld, &cfg->vdim, obj, "vdim") ||
        get_bool(ld, &cfg->bias, obj, "bias", true) ||
        get_bool(ld, &cfg->add_bias_kv, obj, "add_bias_kv", false) ||
        get_bool(ld, &cfg->add_zero_attn, obj, "add_zero_attn", false) ||
        get_bool(ld, &cfg->batch_first, obj, "batch_first", true) ||
        get_opt_int(ld, &cfg->head_dim, obj, "head_dim") ||
        get_opt_int(ld, &cfg->num_kv_heads, obj, "num_kv_heads") ||
        get_opt_int(ld, &cfg->window, obj, "window") ||
        get_bool(ld, &cfg->alibi, obj, "alibi", false) ||
        get_bool(ld, &cfg->is_causal, obj, "is_causal", false))
        return -1;
    json_t *dropout = json_object_get(obj, "dropout");
    cfg->dropout = dropout ? json_number_value(dropout) : 0.0;
    json_t *rope = json_object_get(obj, "rope");
    if (rope) {
        json_t *theta = json_object_get(rope, "theta");
        if (!json_is_number(theta))
            return fail(ld, "config.rope.theta is not a number");
        cfg->rope = true;
        cfg->rope_theta = json_number_value(theta);
    }
    return 0;
}

/* positions: a JSON array of integers [len], or of such arrays [N,len]; absent is fine. */
static int load_positions(loader *ld, golden_positions *p, json_t *parent, const char *key)
{
    memset(p, 0, sizeof *p);
    json_t *v = json_object_get(parent, key);
    if (!v)
        return 0;
    if (!json_is_array(v) || json_array_size(v) == 0 || json_array_size(v) > (1 << 20))
        return fail(ld, "inputs.%s is not a non-empty array", key);
    const bool two = json_is_array(json_array_get(v, 0));
    const size_t rows = two ? json_array_size(v) : 1;
    const size_t len = two ? json_array_size(json_array_get(v, 0)) : json_array_size(v);
    if (len == 0 || len > (1 << 20) || rows * len > (1 << 24))
        return fail(ld, "inputs.%s has a bad size", key);
    p->data = malloc(rows * len * sizeof(int64_t));
    if (!p->data)
        return fail(ld, "out of memory");
    for (size_t r = 0; r < rows; r++) {
        json_t *row = two ? json_array_get(v, r) : v;
        if (!json_is_array(row) || json_array_size(row) != len)
            return fail(ld, "inputs.%s row %zu is not an array of %zu", key, r, len);
        for (size_t i = 0; i < len; i++) {
            json_t *x = json_array_get(row, i);
            if (!json_is_integer(x))
                return fail(ld, "inputs.%s[%zu][%zu] is not an integer", key, r, i);
            p->data[r * len + i] = json_integer_value(x);
        }
    }
    p->present = true;
    p->ndim = two ? 2 : 1;
    p->shape[0] = two ? (int64_t)rows : (int64_t)len;
    p->shape[1] = two ? (int64_t)len : 0;
    return 0;
}

static int load_case(loader *ld, golden_case *c, json_t *root)
{
    if (!json_is_object(root))
        return fail(ld, "top level is not an object");
    c->name = dup_string(json_object_get(root, "name"));
    c->description = dup_string(json_object_get(root, "description"));
    if (!c->name || !c->description)
        return fail(ld, "out of memory");
    if (get_bool(ld, &c->fully_masked_rows, root, "fully_masked_rows", false))
        return -1;
    if (load_config(ld, &c->config, json_object_get(root, "config")))
        return -1;

    json_t *weights = json_object_get(root, "weights");
    if (!json_is_object(weights))
        return fail(ld, "no weights object");
    const char *wname;
    json_t *wval;
    json_object_foreach(weights, wname, wval)
    {
        if (c->n_weights == MHA_MAX_PARAMS)
            return fail(ld, "more than %d weights", MHA_MAX_PARAMS);
        golden_weight *w = &c->weights[c->n_weights];
        if (strlen(wname) >= sizeof w->name)
            return fail(ld, "weight name too long");
        strcpy(w->name, wname);
        if (tensor_load(ld, &w->t, wval, wname))
            return -1;
        if (w->t.is_bool)
            return fail(ld, "weight %s is bool", wname);
        c->n_weights++;
    }

    json_t *in = json_object_get(root, "inputs");
    if (!json_is_object(in))
        return fail(ld, "no inputs object");
    if (tensor_load(ld, &c->query, json_object_get(in, "query"), "inputs.query") ||
        opt_tensor(ld, &c->key, in, "key", "inputs.key") ||
        opt_tensor(ld, &c->value, in, "value", "inputs.value") ||
        opt_tensor(ld, &c->key_padding_mask, in, "key_padding_mask", "inputs.key_padding_mask") ||
        opt_tensor(ld, &c->attn_mask, in, "attn_mask", "inputs.attn_mask") ||
        load_positions(ld, &c->positions, in, "positions") ||
        load_positions(ld, &c->key_positions, in, "key_positions") ||
        get_bool(ld, &c->is_causal, in, "is_causal", c->config.is_causal) ||
        get_bool(ld, &c->need_weights, in, "need_weights", false) ||
        get_bool(ld, &c->average_attn_weights, in, "average_attn_weights", true))
        return -1;
    c->is_causal_given = json_object_get(in, "is_causal") != NULL;
    if (c->query.is_bool || c->key.is_bool || c->value.is_bool)
        return fail(ld, "query/key/value must be float32");

    json_t *exp = json_object_get(root, "expected");
    if (!json_is_object(exp))
        return fail(ld, "no expected object");
    if (tensor_load(ld, &c->output, json_object_get(exp, "output"), "expected.output") ||
        opt_tensor(ld, &c->attn_weights, exp, "attn_weights", "expected.attn_weights"))
        return -1;
    if (c->need_weights != c->attn_weights.present)
        return fail(ld, "expected.attn_weights is %s but need_weights is %s",
                    c->attn_weights.present ? "there" : "missing", c->need_weights ? "true" : "false");

    json_t *trace = json_object_get(root, "trace");
    if (trace && !json_is_object(trace))
        return fail(ld, "trace is not an object");
    for (int s = 0; s < MHA_TRACE_NSTAGES; s++) {
        char what[64];
        snprintf(what, sizeof what, "trace.%s", stage_names[s]);
        if (opt_tensor(ld, &c->trace[s], trace, stage_names[s], what))
            return -1;
    }

    c->config_json = json_dumps(json_object_get(root, "config"), JSON_COMPACT);
    c->inputs_json = json_dumps(in, JSON_COMPACT);
    c->weights_json = json_dumps(weights, JSON_COMPACT);
    if (!c->config_json || !c->inputs_json || !c->weights_json)
        return fail(ld, "out of memory");
    return 0;
}

int golden_load(golden_case *c, const char *path, char *err, size_t errlen)
{
    loader ld = {path, err, errlen};
    memset(c, 0, sizeof *c);
    json_error_t jerr;
    json_t *root = json_load_file(path, 0, &jerr);
    if (!root)
        return fail(&ld, "line %d: %s", jerr.line, jerr.text);
    c->path = strdup(path);
    int rc = c->path ? load_case(&ld, c, root) : fail(&ld, "out of memory");
    json_decref(root);
    if (rc)
        golden_free(c);
    return rc;
}

void golden_free(golden_case *c)
{
    if (!c)
        return;
    free(c->path);
    free(c->name);
    free(c->description);
    for (int i = 0; i < MHA_MAX_PARAMS; i++)
        tensor_free(&c->weights[i].t);
    tensor_free(&c->query);
    tensor_free(&c->key);
    tensor_free(&c->value);
    tensor_free(&c->key_padding_mask);
    tensor_free(&c->attn_mask);
    free(c->positions.data);
    free(c->key_positions.data);
    tensor_free(&c->output);
    tensor_free(&c->attn_weights);
    for (int s = 0; s < MHA_TRACE_NSTAGES; s++)
        tensor_free(&c->trace[s]);
    free(c->config_json); /* json_dumps uses jansson's allocator: malloc unless changed */
    free(c->inputs_json);
    free(c->weights_json);
    memset(c, 0, sizeof *c);
}

/* ---------------------------------------------------------------------------------------------- */
/* to mha_inputs                                                                                  */

static mha_tensor as_tensor(const golden_tensor *t)
{
    mha_tensor m;
    memset(&m, 0, sizeof m);
    if (!t->present)
        return m;
    m.data = t->data;
    m.ndim = t->ndim;
    for (int i = 0; i < t->ndim; i++)
        m.shape[i] = t->shape[i];
    return m;
}

static mha_mask as_mask(const golden_tensor *t)
{
    mha_mask m;
    memset(&m, 0, sizeof m);
    if (!t->present)
        return m;
    m.type = t->is_bool ? MHA_MASK_BOOL : MHA_MASK_FLOAT;
    m.data = t->is_bool ? (const void *)t->bytes : (const void *)t->data;
    m.ndim = t->ndim;
    for (int i = 0; i < t->ndim; i++)
        m.shape[i] = t->shape[i];
    return m;
}

static mha_positions as_positions(const golden_positions *p)
{
    mha_positions m;
    memset(&m, 0, sizeof m);
    if (!p->present)
        return m;
    m.data = p->data;
    m.ndim = p->ndim;
    m.shape[0] = p->shape[0];
    m.shape[1] = p->shape[1];
    return m;
}

mha_inputs golden_inputs(const golden_case *c)
{
    mha_inputs in;
    memset(&in, 0, sizeof in);
    in.query = as_tensor(&c->query);
    in.key = as_tensor(&c->key);
    in.value = as_tensor(&c->value);
    in.key_padding_mask = as_mask(&c->key_padding_mask);
    in.attn_mask = as_mask(&c->attn_mask);
    in.positions = as_positions(&c->positions);
    in.key_positions = as_positions(&c->key_positions);
    in.is_causal = c->is_causal;
    in.need_weights = c->need_weights;
    in.average_attn_weights = c->average_attn_weights;
    return in;
}

/* ---------------------------------------------------------------------------------------------- */
/* listing                                                                                        */

static int cmp_str(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

int golden_list(char ***paths, const char *dir)
{
    *paths = NULL;
    DIR *d = opendir(dir);
    if (!d)
        return -1;
    char **list = NULL;
    int n = 0, cap = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        size_t len = strlen(e->d_name);
        if (len < 6 || strcmp(e->d_name + len - 5, ".json") != 0 || e->d_name[0] == '.')
            continue;
        if (n == cap) {
            int ncap = cap ? cap * 2 : 64;
            char **nl = realloc(list, (size_t)ncap * sizeof *nl);
            if (!nl)
                goto error;
            list = nl;
            cap = ncap;
        }
        size_t plen = strlen(dir) + 1 + len + 1;
        list[n] = malloc(plen);
        if (!list[n])
            goto error;
        snprintf(list[n], plen, "%s/%s", dir, e->d_name);
        n++;
    }
    closedir(d);
    if (n > 1)
        qsort(list, (size_t)n, sizeof *list, cmp_str);
    *paths = list;
    return n;
error:
    closedir(d);
    golden_list_free(list, n);
    return -1;
}

void golden_list_free(char **paths, int n)
{
    if (!paths)
        return;
    for (int i = 0; i < n; i++)
        free(paths[i]);
    free(paths);
}

int golden_each(const char *dir, void (*fn)(golden_case *c, int index, void *ctx), void *ctx)
{
    char **paths;
    int n = golden_list(&paths, dir);
    if (!CHECK(n > 0, "golden cases in %s", dir))
        return n;
    for (int i = 0; i < n; i++) {
        golden_case c;
        char err[512];
        if (CHECK(golden_load(&c, paths[i], err, sizeof err) == 0, "%s", err))
            fn(&c, i, ctx);
    }
    golden_list_free(paths, n);
    return n;
}
