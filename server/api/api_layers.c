/*
 * api_layers.c - the layer resource: list, create/replace, describe, delete, weights.
 *
 *   GET    /v1/layers                    {"layers": [{name, version, config, parameter_count}]}
 *   PUT    /v1/layers/{name}             {"config": C, "init": {"method", "seed"}} or
 *                                        {"config": C, "weights": {NAME: T, ...}}; 201 / 200
 *   GET    /v1/layers/{name}             describe (?L=&S=&N= add FLOPs for that size)
 *   DELETE /v1/layers/{name}             204
 *   GET    /v1/layers/{name}/weights     {NAME: T, ...} (?encoding=nested|flat|base64)
 *   PUT    /v1/layers/{name}/weights     {NAME: T, ...}: every parameter, shapes exact
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "body.h"
#include "codec/weights_select.h"
#include "layer_io.h"
#include "store/config.h"

/* Hands a JSON document to the response (status set). */
static int reply_json(srv_response *resp, json_t *doc, int status, srv_error *err)
{
    if (!doc)
        return srv_error_set(err, SRV_E_NOMEM, "", "out of memory writing the reply");
    char *s = json_dumps(doc, JSON_COMPACT);
    json_decref(doc);
    if (!s)
        return srv_error_set(err, SRV_E_NOMEM, "", "out of memory writing the reply");
    srv_buf_free(&resp->body);
    resp->body.data = s;
    resp->body.len = strlen(s);
    resp->body.cap = resp->body.len + 1;
    resp->status = status;
    return 0;
}

static json_t *shape_json(int ndim, const int64_t *shape)
{
    json_t *a = json_array();
    for (int i = 0; i < ndim; i++)
        json_array_append_new(a, json_integer(shape[i]));
    return a;
}

static json_t *range_json(int64_t lo, int64_t hi)
{
    return json_pack("[I,I]", (json_int_t)lo, (json_int_t)hi);
}

/* {name, version, config, parameter_count} - the short form used by list and PUT. */
/* The layer's config is copied, never shared: a JSON value's last reference may be dropped on
 * another thread (a replica's delete followed by --watch) than the one that wrote it out, and
 * jansson's reference count does not order the two (the entry's own count does). */
static json_t *summary_json(const srv_layer *l)
{
    return json_pack("{s:s, s:I, s:o, s:I}", "name", l->name, "version", (json_int_t)l->version,
                     "config", json_deep_copy(l->config), "parameter_count",
                     (json_int_t)mha_param_total(mha_layer_config(l->layer)));
}

/* Reads ?name= as a positive whole number up to max; absent leaves *out. */
static int query_dim(const srv_request *req, const char *name, int64_t max, int64_t *out,
                     srv_error *err)
{
    const char *v = srv_request_query(req, name);
    if (!v)
        return 0;
    char *end;
    long long x = strtoll(v, &end, 10);
    if (!*v || *end || x <= 0 || x > max)
        return srv_error_set(err, SRV_E_BAD_REQUEST, name,
                             "?%s= must be a whole number from 1 to %" PRId64 ", got '%.40s'", name,
                             max, v);
    *out = x;
    return 0;
}

/* a·b and a + b for a, b >= 0, INT64_MAX where they would pass it: describe's byte figures for
 * passes far past every limit (?N=, ?L= and ?S= up to 2^20 each) read as "at least this". */
static int64_t sat_mul(int64_t a, int64_t b)
{
    return a && b > INT64_MAX / a ? INT64_MAX : a * b;
}

static int64_t sat_add(int64_t a, int64_t b)
{
    return b > INT64_MAX - a ? INT64_MAX : a + b;
}

/* An upper bound of a tensor's JSON text, nested or flat, n elements of at most `each` characters
 * with their separator: the elements, the brackets of the nested form's arrays (one for each
 * element of every axis but the last: 2·(1 + d0 + d0·d1 + ...)), and the flat form's shape and
 * member names. */
static int64_t json_text_bound(int64_t n, int64_t each, const int64_t *shape, int ndim)
{
    int64_t arrays = 0, lead = 1;
    for (int i = 0; i < ndim; i++) {
        arrays = sat_add(arrays, lead);
        lead = sat_mul(lead, shape[i]);
    }
    return sat_add(sat_add(sat_mul(n, each), sat_mul(arrays, 2)), 64 + 21 * (int64_t)ndim);
}

/* The selection of describe's query (weights_heads=..., weights_dtype= or weights_datatype=,
 * average_attn_weights=), for a pass of N batches of L queries and S0 keys: what it would return
 * and how many bytes, beside the full map it replaces. NULL with err on a bad parameter; *none set when nothing is chosen. */
static json_t *selection_json(const srv_layer *l, const srv_request *req, const srv_app *app,
                              int64_t N, int64_t L, int64_t S0, bool *none, srv_error *err)
{
    static const char *const names[] = {"weights_heads",   "weights_queries", "weights_keys",
                                        "weights_top_k",   "weights_pool",    "weights_pool_op",
                                        "weights_dtype",   "weights_datatype"};
    srv_select sel;
    srv_select_init(&sel);
    json_t *doc = NULL;
    *none = false;
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *v = srv_request_query(req, names[i]);
        /* the precision by either API's name: float16 (/v1's), or FP16 (/v2's), not both */
        const bool v2_name = !strcmp(names[i], "weights_datatype");
        if (v && v2_name && srv_request_query(req, "weights_dtype")) {
            srv_error_set(err, SRV_E_BAD_REQUEST, "weights_datatype",
                          "?weights_dtype= and ?weights_datatype= both name the precision; give "
                          "one");
            goto done;
        }
        if (v && srv_select_flat_param(&sel, names[i], v, v2_name, err) < 0)
            goto done;
    }
    bool average = true;
    const char *avg = srv_request_query(req, "average_attn_weights");
    if (avg && strcmp(avg, "true") != 0 && strcmp(avg, "false") != 0) {
        srv_error_set(err, SRV_E_BAD_REQUEST, "average_attn_weights",
                      "?average_attn_weights= must be true or false, got '%.40s'", avg);
        goto done;
    }
    average = !avg || strcmp(avg, "true") == 0;
    if (!sel.given) {
        *none = !avg;
        if (avg) {
            srv_error_set(err, SRV_E_BAD_REQUEST, "average_attn_weights",
                          "?average_attn_weights= goes with a selection (?weights_heads=, "
                          "?weights_top_k=, ...)");
            goto done;
        }
        goto done;
    }
    if (!L) {
        srv_error_set(err, SRV_E_MISSING_FIELD, "L",
                      "a selection's size needs the pass's: give ?L= (and ?S=, ?N=) too");
        goto done;
    }
    const mha_config *cfg = mha_layer_config(l->layer);
    mha_plan plan;
    mha_error me = {0};
    mha_limits lim = app->limits;
    lim.max_elements = INT64_MAX; /* the size is the answer here, not a refusal */
    if (mha_plan_select(cfg, N, L, S0, true, average, &sel.sel, &lim, &plan, &me) != MHA_OK) {
        srv_select_engine_error(err, &me, SRV_SELECT_FLAT);
        goto done;
    }
    const int64_t n = plan.weights_count;
    const bool topk = plan.top_k > 0;
    const int64_t vbytes = sat_mul(n, srv_wire_dtype_size(sel.dtype)), ibytes = topk ? sat_mul(n, 4) : 0;
    /* base64: 4 characters per 3 bytes; JSON: a float32's shortest text is at most 15 characters
     * ("-1.17549435e-38"), an int32's 11, each with its comma */
    const int64_t b64 = sat_add(sat_mul(vbytes / 3 + (vbytes % 3 != 0), 4),
                                sat_mul(ibytes / 3 + (ibytes % 3 != 0), 4));
    const int64_t jtext = sat_add(json_text_bound(n, 16, plan.weights_shape, plan.weights_ndim),
                                  topk ? json_text_bound(n, 12, plan.weights_shape,
                                                         plan.weights_ndim)
                                       : 0);
    const int64_t full = sat_mul(sat_mul(sat_mul(plan.N, average ? 1 : plan.H), L), plan.S);
    json_t *shape = json_array();
    for (int i = 0; i < plan.weights_ndim; i++)
        json_array_append_new(shape, json_integer(plan.weights_shape[i]));
    doc = json_pack("{s:I, s:I, s:I, s:b, s:o, s:I, s:s, s:s, s:{s:I, s:I, s:I}, s:b, s:{s:o, s:I}}",
                    "N", (json_int_t)plan.N, "L", (json_int_t)L, "S", (json_int_t)plan.S,
                    "average_attn_weights", average, "shape", shape, "elements", (json_int_t)n,
                    "dtype", srv_wire_dtype_name(sel.dtype), "returns",
                    topk ? "attn_topk (indices int32, values)" : "attn_weights", "bytes", "binary",
                    (json_int_t)sat_add(vbytes, ibytes), "base64", (json_int_t)b64, "json_at_most",
                    (json_int_t)jtext, "fits",
                    n <= app->limits.max_elements, "full_map", "shape",
                    average ? json_pack("[I,I,I]", (json_int_t)plan.N, (json_int_t)L,
                                        (json_int_t)plan.S)
                            : json_pack("[I,I,I,I]", (json_int_t)plan.N, (json_int_t)plan.H,
                                        (json_int_t)L, (json_int_t)plan.S),
                    "binary_bytes", (json_int_t)sat_mul(full, 4));
    if (!doc)
        srv_error_set(err, SRV_E_NOMEM, "", "out of memory writing the reply");
done:
    srv_select_free(&sel);
    return doc;
}

/* {"param": name, "rows": [lo, hi)} plus {"bias": {"param": "in_proj_bias", "rows": ...}} when the
 * layer has biases: one projection's rows (packed: offset within in_proj_weight / in_proj_bias). */
static json_t *rows_json(const char *param, int64_t off, int64_t bias_off, int64_t lo, int64_t hi,
                         bool bias)
{
    json_t *r = json_pack("{s:s, s:o}", "param", param, "rows", range_json(off + lo, off + hi));
    if (bias)
        json_object_set_new(r, "bias", json_pack("{s:s, s:o}", "param", "in_proj_bias", "rows",
                                                 range_json(bias_off + lo, bias_off + hi)));
    return r;
}

/* The describe document: config, parameters, head layout, FLOPs. */
static json_t *describe_json(const srv_layer *l, const srv_request *req, srv_app *app,
                             srv_error *err)
{
    const mha_config *cfg = mha_layer_config(l->layer);
    const int64_t E = cfg->embed_dim, H = cfg->num_heads, hd = mha_config_head_dim(cfg);
    const int64_t Hkv = mha_config_kv_heads(cfg), Dq = H * hd, Dkv = Hkv * hd, grp = H / Hkv;
    int64_t L = 0, S = 0, N = 1;
    int64_t max = app->limits.max_dim;
    if (query_dim(req, "L", max, &L, err) < 0 || query_dim(req, "S", max, &S, err) < 0 ||
        query_dim(req, "N", max, &N, err) < 0)
        return NULL;
    if (S && !L)
        L = S;
    if (L && !S)
        S = L;

    json_t *doc = summary_json(l);
    json_object_set_new(doc, "head_dim", json_integer(hd));
    json_object_set_new(doc, "num_kv_heads", json_integer(Hkv));
    json_object_set_new(doc, "created", json_real(l->created));
    json_object_set_new(doc, "updated", json_real(l->updated));

    json_t *params = json_array();
    for (int i = 0; i < mha_layer_param_count(l->layer); i++) {
        const mha_param_info *p = mha_layer_param_info(l->layer, i);
        json_array_append_new(params, json_pack("{s:s, s:o, s:I}", "name", p->name, "shape",
                                                shape_json(p->ndim, p->shape), "count",
                                                (json_int_t)p->count));
    }
    json_object_set_new(doc, "parameters", params);

    /* Query head h owns rows [h·hd, (h+1)·hd) of the q projection and those columns of
     * out_proj.weight; it reads kv head g = h·Hkv/H, which owns rows [g·hd, (g+1)·hd) of the k and
     * v projections (packed in_proj_weight: q rows at 0, k rows at Dq, v rows at Dq + Dkv). */
    const bool packed = mha_config_packed(cfg);
    const char *qp = packed ? "in_proj_weight" : "q_proj_weight";
    const char *kp = packed ? "in_proj_weight" : "k_proj_weight";
    const char *vp = packed ? "in_proj_weight" : "v_proj_weight";
    const int64_t koff = packed ? Dq : 0, voff = packed ? Dq + Dkv : 0;
    json_t *heads = json_array();
    for (int64_t h = 0; h < H; h++) {
        const int64_t g = h / grp, lo = h * hd, hi = lo + hd;
        json_t *o = json_pack("{s:I, s:I}", "head", (json_int_t)h, "kv_head", (json_int_t)g);
        json_object_set_new(o, "q", rows_json(qp, 0, 0, lo, hi, cfg->bias));
        json_object_set_new(o, "k", rows_json(kp, koff, Dq, g * hd, (g + 1) * hd, cfg->bias));
        json_object_set_new(o, "v", rows_json(vp, voff, Dq + Dkv, g * hd, (g + 1) * hd, cfg->bias));
        json_object_set_new(o, "out", json_pack("{s:s, s:o}", "param", "out_proj.weight",
                                                "columns", range_json(lo, hi)));
        if (cfg->alibi)
            json_object_set_new(o, "alibi_slope", json_real(mha_alibi_slope(h, H)));
        json_array_append_new(heads, o);
    }
    json_object_set_new(doc, "heads", heads);
    json_t *kv_heads = json_array();
    for (int64_t g = 0; g < Hkv; g++) {
        const int64_t lo = g * hd, hi = lo + hd;
        json_t *o = json_pack("{s:I, s:o}", "kv_head", (json_int_t)g, "query_heads",
                              range_json(g * grp, (g + 1) * grp));
        json_object_set_new(o, "k", rows_json(kp, koff, Dq, lo, hi, cfg->bias));
        json_object_set_new(o, "v", rows_json(vp, voff, Dq + Dkv, lo, hi, cfg->bias));
        if (cfg->add_bias_kv) {
            json_object_set_new(o, "bias_k", json_pack("{s:s, s:o}", "param", "bias_k", "columns",
                                                       range_json(lo, hi)));
            json_object_set_new(o, "bias_v", json_pack("{s:s, s:o}", "param", "bias_v", "columns",
                                                       range_json(lo, hi)));
        }
        json_array_append_new(kv_heads, o);
    }
    json_object_set_new(doc, "kv_heads", kv_heads);
    json_object_set_new(
        doc, "head_layout",
        json_string("ranges are half-open [start, stop); query head h owns rows [h*head_dim, "
                    "(h+1)*head_dim) of the q projection and those columns of out_proj.weight, and "
                    "reads kv head h*num_kv_heads/num_heads, which owns rows [g*head_dim, "
                    "(g+1)*head_dim) of the k and v projections; the packed in_proj_weight stacks "
                    "q, k, v (offsets 0, num_heads*head_dim, (num_heads+num_kv_heads)*head_dim)"));

    const int64_t Kd = cfg->kdim ? cfg->kdim : E, Vd = cfg->vdim ? cfg->vdim : E;
    const int extra = cfg->add_bias_kv + cfg->add_zero_attn;
    char formula[480];
    snprintf(formula, sizeof formula,
             "2*N*L*E*Dq + 2*N*S0*kdim*Dkv + 2*N*S0*vdim*Dkv + 4*N*L*S*Dq + 2*N*L*Dq*E with "
             "E=%" PRId64 ", Dq=num_heads*head_dim=%" PRId64 ", Dkv=num_kv_heads*head_dim=%" PRId64
             ", kdim=%" PRId64 ", vdim=%" PRId64 ", S=S0%s, i.e. N*(%" PRId64 "*L + %" PRId64
             "*S0 + %" PRId64 "*L*S); every key counted (is_causal and window skip the keys they "
             "mask)",
             E, Dq, Dkv, Kd, Vd, extra == 0 ? "" : extra == 1 ? "+1" : "+2", 4 * E * Dq,
             2 * (Kd + Vd) * Dkv, 4 * Dq);
    json_t *flops = json_pack("{s:s}", "formula", formula);
    if (L) {
        json_object_set_new(flops, "N", json_integer(N));
        json_object_set_new(flops, "L", json_integer(L));
        json_object_set_new(flops, "S", json_integer(S));
        json_object_set_new(flops, "value", json_real(mha_flops(cfg, N, L, S)));
    }
    json_object_set_new(doc, "flops", flops);

    bool none;
    json_t *chosen = selection_json(l, req, app, N, L, S, &none, err);
    if (!chosen && !none) {
        json_decref(doc);
        return NULL;
    }
    if (chosen)
        json_object_set_new(doc, "weights_select", chosen);
    return doc;
}

/* ---------------------------------------------------------------------------------------------- */
/* Weights as a JSON map                                                                          */

/* Sets every parameter of layer from the JSON map [json, json+len); `prefix` names the map in
 * errors ("weights." or ""). Every parameter must be present; unknown names are a 400. The map's
 * values are scanned lazily (tensors): on failure the caller runs srv_body_recheck on its body. */
static int fill_weights(mha_layer *layer, const char *json, size_t len, const char *prefix,
                        const srv_app *app, srv_error *err)
{
    srv_json_member m[SRV_BODY_MAX_MEMBERS];
    char field[200], known[256];
    int np = mha_layer_param_count(layer);
    size_t k = 0;
    known[0] = '\0';
    for (int i = 0; i < np && k < sizeof known; i++)
        k += (size_t)snprintf(known + k, sizeof known - k, "%s%s", i ? ", " : "",
                              mha_layer_param_info(layer, i)->name);

    char objname[32];
    snprintf(objname, sizeof objname, "%.*s", (int)(strlen(prefix) ? strlen(prefix) - 1 : 0),
             prefix);
    static const char *const all_tensors[] = {"*", NULL};
    int n = srv_body_scan(app, json, len, objname, all_tensors, m, err);
    if (n < 0)
        return -1;
    bool seen[MHA_MAX_PARAMS] = {0};
    for (int i = 0; i < n; i++) {
        int idx = mha_layer_param_find(layer, m[i].key);
        if (idx < 0)
            return srv_body_unknown(err, prefix, m[i].key, known);
        snprintf(field, sizeof field, "%.40s%.127s", prefix, m[i].key);
        srv_tensor t;
        if (srv_member_tensor(&t, &m[i], field, false, app, NULL, err) < 0)
            return -1;
        mha_error me = {0};
        int rc = 0;
        if (t.dtype != SRV_DTYPE_F32)
            rc = srv_error_set(err, SRV_E_BAD_REQUEST, field, "%s must hold numbers", field);
        else if (t.ndim > 3)
            rc = srv_error_set(err, SRV_E_SHAPE, field, "%s has %d dimensions, expected %d", field,
                               t.ndim, mha_layer_param_info(layer, idx)->ndim);
        else if (mha_layer_set_param(layer, m[i].key, t.data, t.ndim, t.shape, &me) != MHA_OK)
            rc = srv_error_from_mha(err, &me, prefix);
        srv_tensor_free(&t);
        if (rc < 0)
            return -1;
        seen[idx] = true;
    }
    for (int i = 0; i < np; i++)
        if (!seen[i]) {
            const mha_param_info *p = mha_layer_param_info(layer, i);
            snprintf(field, sizeof field, "%s%s", prefix, p->name);
            return srv_error_set(err, SRV_E_MISSING_FIELD, field,
                                 "%s is missing; this config has the parameters %s", field, known);
        }
    return 0;
}

/* Reads "init": {"method": "xavier_uniform"|"zeros", "seed": N}. */
static int parse_init(const srv_json_member *mem, char *method, size_t msize, uint64_t *seed,
                      srv_error *err)
{
    json_t *v = srv_member_json(mem, "init", err);
    if (!v)
        return -1;
    int rc = 0;
    const char *key;
    json_t *x;
    if (!json_is_object(v)) {
        rc = srv_error_set(err, SRV_E_BAD_REQUEST, "init",
                           "init must be an object like {\"method\": \"xavier_uniform\", \"seed\": 0}");
        goto out;
    }
    json_object_foreach(v, key, x)
    {
        if (!strcmp(key, "method")) {
            const char *s = json_string_value(x);
            if (!s || (strcmp(s, "xavier_uniform") != 0 && strcmp(s, "zeros") != 0)) {
                rc = srv_error_set(err, SRV_E_BAD_REQUEST, "init.method",
                                   "init.method must be \"xavier_uniform\" or \"zeros\"");
                goto out;
            }
            snprintf(method, msize, "%s", s);
        } else if (!strcmp(key, "seed")) {
            if (!json_is_integer(x) || json_integer_value(x) < 0) {
                rc = srv_error_set(err, SRV_E_BAD_REQUEST, "init.seed",
                                   "init.seed must be a whole number >= 0");
                goto out;
            }
            *seed = (uint64_t)json_integer_value(x);
        } else {
            char k[80];
            snprintf(k, sizeof k, "%.60s", key);
            rc = srv_body_unknown(err, "init.", k, "method, seed");
            goto out;
        }
    }
out:
    json_decref(v);
    return rc;
}

/* ---------------------------------------------------------------------------------------------- */
/* Handlers                                                                                       */

/* Saves (data dir) and publishes the new entry l (the caller's reference is taken), honouring
 * If-Match and If-None-Match; answers 201 + Location or 200, with the ETag. */
static int publish(srv_app *app, const srv_request *req, srv_response *resp, srv_layer *l,
                   srv_error *err)
{
    uint64_t if_version;
    bool replaced = false;
    if (srv_if_match(req, app->registry, l->name, &if_version, err) < 0 ||
        srv_if_none_match(req, app->registry, l->name, &if_version, err) < 0 ||
        srv_persist_put(app->persist, app->registry, l, if_version, &replaced, err) < 0) {
        srv_layer_release(l);
        return -1;
    }
    if (!replaced)
        srv_response_header(resp, "Location", "/v1/layers/%s", l->name);
    srv_etag(resp, l->version);
    int rc = reply_json(resp, summary_json(l), replaced ? 200 : 201, err);
    srv_layer_release(l);
    return rc;
}

int srv_api_layers_list(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    srv_app *app = ctx;
    srv_layer **list;
    int n = srv_registry_list(app->registry, &list);
    if (n < 0)
        return srv_error_set(err, SRV_E_NOMEM, "", "out of memory listing layers");
    json_t *arr = json_array();
    for (int i = 0; i < n; i++)
        json_array_append_new(arr, summary_json(list[i]));
    srv_registry_list_free(list, n);
    return reply_json(resp, json_pack("{s:o}", "layers", arr), 200, err);
}

/* The layer a JSON PUT body's members m[0..n) describe (a new reference), or NULL with err. */
static srv_layer *layer_from_json(srv_app *app, const char *name, const srv_json_member *m, int n,
                                  srv_error *err)
{
    const srv_json_member *config = NULL, *init = NULL, *weights = NULL;
    for (int i = 0; i < n; i++) {
        if (!strcmp(m[i].key, "config"))
            config = &m[i];
        else if (!strcmp(m[i].key, "init"))
            init = &m[i];
        else if (!strcmp(m[i].key, "weights"))
            weights = &m[i];
        else {
            srv_body_unknown(err, "", m[i].key, "config, init, weights");
            return NULL;
        }
    }
    if (!config) {
        srv_error_set(err, SRV_E_MISSING_FIELD, "config",
                      "config is required, e.g. {\"embed_dim\": 64, \"num_heads\": 4}");
        return NULL;
    }
    if (init && weights) {
        srv_error_set(err, SRV_E_BAD_REQUEST, "init", "give either init or weights, not both");
        return NULL;
    }

    mha_config cfg;
    json_t *cj = srv_member_json(config, "config", err);
    if (!cj)
        return NULL;
    int rc = srv_config_from_json(&cfg, cj, &app->limits, "config", err);
    json_decref(cj);
    if (rc < 0)
        return NULL;

    /* the layers' memory: refused here, before anything is allocated (--max-weights-bytes) */
    int64_t bytes = srv_layer_bytes(&cfg);
    if (srv_registry_reserve(app->registry, name, bytes, err) < 0)
        return NULL;
    srv_layer *l = NULL;
    if (weights) {
        mha_error me = {0};
        mha_layer *layer = mha_layer_create(&cfg, &app->limits, &me);
        if (!layer) {
            srv_error_from_mha(err, &me, "config.");
        } else if (fill_weights(layer, weights->value, weights->value_len, "weights.", app, err) <
                   0) {
            mha_layer_free(layer);
        } else {
            json_t *norm = srv_config_to_json(mha_layer_config(layer));
            l = norm ? srv_layer_new(name, layer, norm) : (mha_layer_free(layer), NULL);
            if (!l)
                srv_error_set(err, SRV_E_NOMEM, "", "out of memory creating layer '%s'", name);
        }
    } else {
        char method[32] = "xavier_uniform";
        uint64_t seed = 0;
        if (!init || parse_init(init, method, sizeof method, &seed, err) == 0)
            l = srv_layer_build_init(name, &cfg, &app->limits, method, seed, app->pool, err);
    }
    return srv_layer_charge(l, app->registry, bytes);
}

int srv_api_layer_put(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    srv_app *app = ctx;
    const char *name = srv_request_param(req, "name");
    if (!srv_layer_name_valid(name, err))
        return -1;
    if (srv_is_octet(req)) { /* a safetensors file, config in its metadata (layer_io.h) */
        srv_layer *l = srv_layer_from_safetensors(app, name, req->body, req->body_len, err);
        return l ? publish(app, req, resp, l, err) : -1;
    }
    static const char *const put_tensors[] = {"weights", NULL};
    srv_json_member m[SRV_BODY_MAX_MEMBERS];
    int n = srv_body_scan(app, req->body, req->body_len, "", put_tensors, m, err);
    if (n < 0)
        return -1;
    srv_layer *l = layer_from_json(app, name, m, n, err);
    if (!l)
        return srv_body_recheck(app, req->body, req->body_len, err);
    return publish(app, req, resp, l, err);
}

int srv_api_layer_get(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    srv_app *app = ctx;
    srv_layer *l = srv_registry_get(app->registry, srv_request_param(req, "name"), err);
    if (!l)
        return -1;
    srv_etag(resp, l->version);
    if (srv_not_modified(req, resp, l->version)) {
        srv_layer_release(l);
        return 0;
    }
    json_t *doc = describe_json(l, req, app, err);
    srv_layer_release(l);
    if (!doc)
        return -1;
    return reply_json(resp, doc, 200, err);
}

int srv_api_layer_delete(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    srv_app *app = ctx;
    const char *name = srv_request_param(req, "name");
    uint64_t if_version;
    if (srv_if_match(req, app->registry, name, &if_version, err) < 0 ||
        srv_persist_delete(app->persist, app->registry, name, if_version, err) < 0)
        return -1;
    resp->status = 204;
    return 0;
}

int srv_api_weights_get(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    srv_app *app = ctx;
    srv_encoding enc = SRV_ENC_NESTED;
    const char *e = srv_request_query(req, "encoding");
    if (e && srv_encoding_parse(e, &enc) < 0)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "encoding",
                             "?encoding= must be nested, flat or base64");
    srv_layer *l = srv_registry_get(app->registry, srv_request_param(req, "name"), err);
    if (!l)
        return -1;
    srv_etag(resp, l->version);
    srv_response_header(resp, "Vary", "Accept"); /* JSON or safetensors, by Accept */
    if (srv_not_modified(req, resp, l->version)) {
        srv_layer_release(l);
        return 0;
    }
    if (srv_wants_octet(req)) { /* a safetensors file */
        int rc = srv_weights_reply_safetensors(resp, l, err);
        srv_layer_release(l);
        return rc;
    }
    srv_buf *b = &resp->body;
    int np = mha_layer_param_count(l->layer);
    srv_response_reserve(resp, (size_t)mha_param_total(mha_layer_config(l->layer)) * 17 + 256);
    srv_buf_putc(b, '{');
    for (int i = 0; i < np; i++) {
        const mha_param_info *p = mha_layer_param_info(l->layer, i);
        srv_buf_puts(b, i ? ",\"" : "\"");
        srv_buf_puts(b, p->name);
        srv_buf_puts(b, "\":");
        srv_tensor_write(b, mha_layer_param_data(l->layer, i), p->ndim, p->shape, enc);
    }
    srv_buf_putc(b, '}');
    srv_response_header(resp, "X-Layer-Version", "%llu", (unsigned long long)l->version);
    srv_layer_release(l);
    return 0;
}

int srv_api_weights_put(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    srv_app *app = ctx;
    srv_layer *old = srv_registry_get(app->registry, srv_request_param(req, "name"), err);
    if (!old)
        return -1;
    mha_error me = {0};
    srv_layer *l = NULL;
    int rc = -1;
    uint64_t if_version;
    /* the same config, so the same size: a replacement, counted as the difference */
    int64_t bytes = srv_layer_bytes(mha_layer_config(old->layer));
    if (srv_if_match(req, app->registry, old->name, &if_version, err) < 0 ||
        srv_if_none_match(req, app->registry, old->name, &if_version, err) < 0 ||
        srv_registry_reserve(app->registry, old->name, bytes, err) < 0)
        goto out;
    if (srv_is_octet(req)) { /* a safetensors file */
        l = srv_layer_charge(srv_weights_from_safetensors(app, old, req->body, req->body_len, err),
                             app->registry, bytes);
        if (!l)
            goto out;
        goto publish;
    }
    mha_layer *layer = mha_layer_create(mha_layer_config(old->layer), &app->limits, &me);
    if (!layer) {
        srv_error_from_mha(err, &me, "");
    } else if (fill_weights(layer, req->body, req->body_len, "", app, err) < 0) {
        mha_layer_free(layer);
        srv_body_recheck(app, req->body, req->body_len, err);
    } else if (!(l = srv_layer_new(old->name, layer, json_deep_copy(old->config)))) {
        srv_error_set(err, SRV_E_NOMEM, "", "out of memory");
    }
    if (!srv_layer_charge(l, app->registry, bytes))
        goto out;
publish:
    /* conditional on the version read above (or If-Match's): a concurrent replacement is not
     * overwritten */
    if (srv_persist_put(app->persist, app->registry, l, if_version ? if_version : old->version,
                        NULL, err) < 0)
        goto out;
    srv_etag(resp, l->version);
    rc = reply_json(resp, summary_json(l), 200, err);
out:
    srv_layer_release(l);
    srv_layer_release(old);
    return rc;
}
