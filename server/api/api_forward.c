/*
 * api_forward.c - POST /v1/layers/{name}/forward and /trace.
 *
 * Body: {"query": T, "key": T, "value": T, "key_padding_mask": T, "attn_mask": T, "is_causal": b,
 *        "need_weights": b, "average_attn_weights": b, "positions": P, "key_positions": P,
 *        "weights_select": {...}, "need_output": b, "encoding": "nested"|"flat"|"base64"}
 * (T in any form of tensor.h, P of positions.h; null = absent; is_causal left out = the layer's),
 * and for a trace "stages": [names] (trace.h). The reply is written straight into one buffer that
 * is handed to libmicrohttpd as it is.
 */
#include <pthread.h>
#include <string.h>

#include "api.h"
#include "base/bigbuf.h"
#include "base/sysinfo.h"
#include "body.h"
#include "forward.h"

#define COMMON_FIELDS                                                                             \
    "query, key, value, key_padding_mask, attn_mask, is_causal, need_weights, "                   \
    "average_attn_weights, positions, key_positions, weights_select, encoding"
#define FORWARD_FIELDS COMMON_FIELDS ", need_output"
#define TRACE_FIELDS COMMON_FIELDS ", stages"

/* The members whose values are tensors: the scan only delimits them, srv_member_tensor checks them. */
static const char *const forward_tensors[] = {"query", "key", "value", "key_padding_mask",
                                              "attn_mask", NULL};

/* Reads the members m[0..n) of a forward body into args and enc; of a trace's (stages not NULL)
 * also "stages" (all of them when it is absent). */
static int read_forward(const srv_app *app, const srv_request *req, const srv_json_member *m,
                        int n, srv_forward_args *args, srv_encoding *enc, unsigned *stages,
                        srv_error *err)
{
    bool need_weights_given = false;
    if (stages)
        *stages = SRV_TRACE_ALL;
    for (int i = 0; i < n; i++) {
        const char *k = m[i].key;
        srv_tensor *t = NULL;
        bool mask = false, *flag = NULL;
        if (!strcmp(k, "query"))
            t = &args->query;
        else if (!strcmp(k, "key"))
            t = &args->key;
        else if (!strcmp(k, "value"))
            t = &args->value;
        else if (!strcmp(k, "key_padding_mask"))
            t = &args->key_padding_mask, mask = true;
        else if (!strcmp(k, "attn_mask"))
            t = &args->attn_mask, mask = true;
        else if (!strcmp(k, "is_causal")) {
            flag = &args->is_causal;
            args->is_causal_given = true;
        } else if (!strcmp(k, "positions") || !strcmp(k, "key_positions")) {
            srv_positions *p = k[0] == 'p' ? &args->positions : &args->key_positions;
            if (srv_member_positions(p, &m[i], k, app, err) < 0)
                return -1;
            continue;
        }
        else if (!strcmp(k, "need_weights")) {
            flag = &args->need_weights;
            need_weights_given = true;
        }
        else if (!stages && !strcmp(k, "need_output"))
            flag = &args->need_output;
        else if (!strcmp(k, "average_attn_weights"))
            flag = &args->average_attn_weights;
        else if (!strcmp(k, "encoding")) {
            if (srv_member_encoding(&m[i], enc, err) < 0)
                return -1;
            continue;
        } else if (!strcmp(k, "weights_select")) {
            if (srv_member_is_null(&m[i]))
                continue; /* null = not given */
            json_t *v = srv_member_json(&m[i], k, err);
            int rc = v ? srv_select_from_json(&args->select, v, err) : -1;
            json_decref(v);
            if (rc < 0)
                return -1;
            continue;
        } else if (stages && !strcmp(k, "stages")) {
            json_t *v = srv_member_json(&m[i], k, err);
            int rc = v ? srv_trace_stages_parse(v, stages, err) : -1;
            json_decref(v);
            if (rc < 0)
                return -1;
            continue;
        } else
            return srv_body_unknown(err, "", k, stages ? TRACE_FIELDS : FORWARD_FIELDS);

        if (flag && srv_member_is_null(&m[i])) { /* null = not given, as for the tensors */
            args->is_causal_given &= flag != &args->is_causal;
            need_weights_given &= flag != &args->need_weights;
            continue;
        }
        if (flag && srv_member_bool(&m[i], k, flag, err) < 0)
            return -1;
        /* null means "not given", as torch's None; query has no default */
        if (t == &args->query && srv_member_is_null(&m[i]))
            return srv_error_set(err, SRV_E_MISSING_FIELD, "query",
                                 "query is null; it is required (only key, value and the masks "
                                 "may be null, meaning not given)");
        if (t && !srv_member_is_null(&m[i]) &&
            srv_member_tensor(t, &m[i], k, mask, app, req, err) < 0)
            return -1;
    }
    if (!args->query.data)
        return srv_error_set(err, SRV_E_MISSING_FIELD, "query", "query is required");
    if (!stages && need_weights_given && !args->need_weights && args->select.given)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "need_weights",
                             "need_weights is false but weights_select chooses weights to return; "
                             "leave need_weights out (weights_select implies it)");
    if (!args->need_output && !args->need_weights && !args->select.given)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "need_output",
                             "need_output is false and no weights are asked for: the reply would "
                             "be empty; ask for weights (need_weights or weights_select), or "
                             "leave need_output out");
    /* The API defines key and value both left out (self-attention) and value left out (= key);
     * value without key is neither, and torch has no such call: most likely a key forgotten */
    if (args->value.data && !args->key.data)
        return srv_error_set(err, SRV_E_MISSING_FIELD, "key",
                             "value is given but key is not: give key too (key = query, if that is "
                             "what you mean), or leave both out for self-attention");
    return 0;
}

/* --max-request-flops from the shapes that query and key declare (the flat and base64 forms do),
 * before their data is decoded: 0, or -1 with err (413 too_costly). Nested tensors, and shapes that
 * do not fit the layer, are left to the pass's own checks. */
static int check_cost_early(const srv_app *app, const mha_config *cfg, const srv_json_member *m,
                            int n, srv_error *err)
{
    const srv_json_member *qm = NULL, *km = NULL;
    for (int i = 0; i < n; i++) {
        if (!strcmp(m[i].key, "query"))
            qm = &m[i];
        else if (!strcmp(m[i].key, "key") && !srv_member_is_null(&m[i]))
            km = &m[i];
    }
    int64_t q[SRV_TENSOR_MAX_DIMS], k[SRV_TENSOR_MAX_DIMS];
    int qn = 0, kn = 0;
    if (!qm || !srv_tensor_peek_shape(qm->value, qm->value_len, q, &qn) ||
        (km && !srv_tensor_peek_shape(km->value, km->value_len, k, &kn)))
        return 0;
    return srv_forward_check_cost(app, cfg, qn, q, kn, km ? k : NULL, err);
}

/* Reads a forward body for a layer of config cfg into args and enc (a trace's: stages too). */
static int parse_forward(const srv_app *app, const mha_config *cfg, const srv_request *req,
                         srv_forward_args *args, srv_encoding *enc, unsigned *stages,
                         srv_error *err)
{
    srv_json_member m[SRV_BODY_MAX_MEMBERS];
    int n = srv_body_scan_request(app, req, forward_tensors, m, err);
    if (n < 0)
        return -1;
    if (check_cost_early(app, cfg, m, n, err) < 0 ||
        read_forward(app, req, m, n, args, enc, stages, err) < 0)
        return srv_body_recheck(app, req->body, req->body_len, err);
    return 0;
}

static void put_shape(srv_buf *b, int ndim, const int64_t *shape)
{
    srv_buf_putc(b, '[');
    for (int i = 0; i < ndim; i++)
        srv_buf_printf(b, i ? ",%lld" : "%lld", (long long)shape[i]);
    srv_buf_putc(b, ']');
}

/* Bytes a tensor of count elements takes in enc at most (a float is at most 15 characters and a
 * separator), so the reply buffer is allocated once and never moved. */
static size_t estimate(int64_t count, srv_encoding enc)
{
    return enc == SRV_ENC_BASE64 ? (size_t)count * 16 / 3 + 64 : (size_t)count * 17 + 64;
}

/* Tensors at least this large, in nested form, are written by two threads: formatting a float is
 * the costliest step of a large JSON reply (an L output has 3 million of them). */
#define PARALLEL_WRITE_MIN 1000000

typedef struct half_job {
    srv_buf out;           /* the second half's text                                          */
    const float *data;     /* its items [n1, n), each `inner` floats, shaped shape[1..ndim)    */
    int64_t n0, n1;
    int64_t inner;
    int ndim;
    const int64_t *shape;
    int rc;
} half_job;

/* Items [n0, n1) of the outermost dimension as nested JSON, separated by commas. */
static int write_items(srv_buf *b, const float *data, int64_t n0, int64_t n1, int64_t inner,
                       int ndim, const int64_t *shape)
{
    int rc = 0;
    for (int64_t i = n0; i < n1 && rc == 0; i++) {
        if (i > n0)
            srv_buf_putc(b, ',');
        rc = srv_tensor_write(b, data + i * inner, ndim - 1, shape + 1, SRV_ENC_NESTED);
    }
    return rc < 0 || b->failed ? -1 : 0;
}

static void *write_half(void *arg)
{
    half_job *j = arg;
    j->rc = write_items(&j->out, j->data, j->n0, j->n1, j->inner, j->ndim, j->shape);
    return NULL;
}

/* srv_tensor_write, with large nested tensors split along their outermost dimension between this
 * thread and one more (the same text, in about half the time). */
static int write_tensor(srv_buf *b, const float *data, int ndim, const int64_t *shape,
                        srv_encoding enc)
{
    int64_t count = 1;
    for (int i = 0; i < ndim; i++)
        count *= shape[i];
    if (enc != SRV_ENC_NESTED || count < PARALLEL_WRITE_MIN || ndim < 2 || shape[0] < 2 ||
        srv_ncores() < 2)
        return srv_tensor_write(b, data, ndim, shape, enc);
    int64_t n = shape[0], mid = n / 2, inner = count / n;
    half_job j = {.data = data, .n0 = mid, .n1 = n, .inner = inner, .ndim = ndim, .shape = shape};
    srv_buf_init(&j.out);
    pthread_t t;
    if (srv_bigbuf_reserve(&j.out, (size_t)((n - mid) * inner) * 17 + 4096) < 0 ||
        pthread_create(&t, NULL, write_half, &j) != 0) {
        srv_bigbuf_free(&j.out);
        return srv_tensor_write(b, data, ndim, shape, enc);
    }
    srv_buf_putc(b, '[');
    int rc = write_items(b, data, 0, mid, inner, ndim, shape);
    pthread_join(t, NULL);
    srv_buf_putc(b, ',');
    srv_buf_append(b, j.out.data, j.out.len);
    srv_buf_putc(b, ']');
    srv_bigbuf_free(&j.out);
    return rc < 0 || j.rc < 0 || b->failed ? -1 : 0;
}

/* The chosen weights' values (data, shaped ndim/shape) in dtype and enc. Nested float16 and
 * bfloat16 values are rounded in place first, so that the large ones still go out on two threads. */
static int write_values(srv_buf *b, float *data, int ndim, const int64_t *shape, srv_encoding enc,
                        srv_wire_dtype dtype)
{
    if (dtype == SRV_WIRE_F32 || enc == SRV_ENC_NESTED) {
        if (dtype != SRV_WIRE_F32) {
            int64_t count = 1;
            for (int i = 0; i < ndim; i++)
                count *= shape[i];
            srv_f32_round_array(data, data, (size_t)count, dtype);
        }
        return write_tensor(b, data, ndim, shape, enc);
    }
    return srv_tensor_write_as(b, data, ndim, shape, enc, dtype);
}

/* The trace's reply: {"stages": [{"name", "shape", "axes", "tensor"}, ...]}, the stages asked for
 * in pipeline order, as trace.h shows them. With a selection, scores and attn_weights are the
 * chosen ones, in its dtype, and with top_k each has "indices" (int32) beside its "tensor". */
static int write_trace(srv_buf *b, srv_response *resp, const srv_forward_result *r,
                       bool batch_first, bool average, srv_encoding enc, srv_error *err)
{
    srv_trace_stage v[MHA_TRACE_NSTAGES];
    int64_t total = 0;
    for (int s = 0; s < MHA_TRACE_NSTAGES; s++)
        if (r->traced & 1u << s) {
            srv_trace_stage_view(&r->plan, batch_first, average, (mha_trace_stage)s, &v[s]);
            total += v[s].count;
        }
    srv_response_reserve(resp, estimate(total, enc) + 4096);
    srv_buf_puts(b, "{\"stages\":[");
    bool first = true;
    for (int s = 0; s < MHA_TRACE_NSTAGES; s++) {
        if (!(r->traced & 1u << s))
            continue;
        const float *src = s == MHA_TRACE_OUTPUT         ? r->output
                           : s == MHA_TRACE_ATTN_WEIGHTS ? r->attn_weights
                                                         : r->stage[s];
        float *copy = NULL;
        const float *data = srv_trace_stage_data(&v[s], src, &copy);
        if (!data)
            return srv_error_set(err, SRV_E_NOMEM, "", "out of memory writing the trace; retry later");
        srv_buf_printf(b, "%s{\"name\":\"%s\",\"shape\":", first ? "" : ",",
                       mha_trace_stage_name((mha_trace_stage)s));
        put_shape(b, v[s].ndim, v[s].shape);
        srv_buf_puts(b, ",\"axes\":[");
        for (int d = 0; d < v[s].ndim; d++)
            srv_buf_printf(b, "%s\"%c\"", d ? "," : "", v[s].axes[d]);
        srv_buf_puts(b, "],\"tensor\":");
        const bool chosen = r->plan.selected &&
                            (s == MHA_TRACE_SCORES || s == MHA_TRACE_ATTN_WEIGHTS);
        if (chosen)
            write_values(b, (float *)data, v[s].ndim, v[s].shape, enc, r->weights_dtype);
        else
            write_tensor(b, data, v[s].ndim, v[s].shape, enc);
        const int32_t *idx = s == MHA_TRACE_ATTN_WEIGHTS ? r->topk_indices : r->stage_indices[s];
        if (chosen && r->plan.top_k && idx) {
            srv_buf_puts(b, ",\"indices\":");
            srv_tensor_write_i32(b, idx, v[s].ndim, v[s].shape, enc);
        }
        srv_buf_putc(b, '}');
        srv_bigbuf_array_free(copy);
        first = false;
    }
    srv_buf_puts(b, "]}");
    return 0;
}

static int run(srv_app *app, const srv_request *req, srv_response *resp, bool trace,
               srv_error *err)
{
    srv_layer *layer = srv_registry_get(app->registry, srv_request_param(req, "name"), err);
    if (!layer)
        return -1;
    srv_forward_args args;
    srv_forward_args_init(&args);
    srv_encoding enc = SRV_ENC_NESTED;
    srv_forward_result r = {0};
    unsigned stages = 0;
    int rc = -1;
    double t0 = srv_now(), t1 = t0, t2 = t0, t3 = t0;
    bool average = true;
    args.cancel = req->gone;
    if (parse_forward(app, mha_layer_config(layer->layer), req, &args, &enc,
                      trace ? &stages : NULL, err) < 0)
        goto out;
    t1 = srv_now();
    if (srv_forward_run(app, layer, &args, stages, &r, err) < 0)
        goto out;
    average = args.average_attn_weights;
    bool need_output = args.need_output;
    t2 = srv_now();
    if (srv_request_gone(req)) { /* nobody will read the reply: do not write it */
        srv_error_set(err, SRV_E_CANCELLED, "", "the client hung up");
        goto out;
    }
    /* the inputs are not needed any more: give their memory back before writing the reply */
    srv_forward_args_free(&args);
    srv_forward_args_init(&args);

    srv_buf *b = &resp->body;
    if (!trace) {
        srv_response_reserve(resp, (need_output ? estimate(r.plan.out_count, enc) : 0) +
                                       estimate(r.plan.weights_count, enc) * (r.plan.top_k ? 2 : 1));
        srv_buf_putc(b, '{');
        if (need_output) {
            srv_buf_puts(b, "\"output\":");
            write_tensor(b, r.output, r.plan.out_ndim, r.plan.out_shape, enc);
        }
        const char *sep = need_output ? "," : "";
        if (r.attn_weights && r.plan.top_k) { /* a selection's strongest keys per row */
            srv_buf_printf(b, "%s\"attn_topk\":{\"indices\":", sep);
            srv_tensor_write_i32(b, r.topk_indices, r.plan.weights_ndim, r.plan.weights_shape,
                                 enc);
            srv_buf_puts(b, ",\"values\":");
            write_values(b, r.attn_weights, r.plan.weights_ndim, r.plan.weights_shape, enc,
                         r.weights_dtype);
            srv_buf_putc(b, '}');
        } else if (r.attn_weights) {
            srv_buf_printf(b, "%s\"attn_weights\":", sep);
            write_values(b, r.attn_weights, r.plan.weights_ndim, r.plan.weights_shape, enc,
                         r.weights_dtype);
        }
        srv_buf_puts(b, "}");
    } else if (write_trace(b, resp, &r, mha_layer_config(layer->layer)->batch_first, average, enc,
                           err) < 0) {
        goto out;
    }
    t3 = srv_now();
    srv_response_timing(resp, "parse", (t1 - t0) * 1e3);
    srv_response_timing(resp, "pass", (t2 - t1) * 1e3);
    srv_response_timing(resp, "write", (t3 - t2) * 1e3);
    rc = 0;
out:
    srv_forward_count(layer, req, rc == 0, rc == 0 ? t1 - t0 : 0, &r, rc == 0 ? t3 - t2 : 0);
    srv_forward_result_free(&r);
    srv_forward_args_free(&args);
    srv_layer_release(layer);
    return rc;
}

int srv_api_forward(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    srv_app *app = ctx;
    return run(app, req, resp, false, err);
}

int srv_api_trace(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    srv_app *app = ctx;
    return run(app, req, resp, true, err);
}
