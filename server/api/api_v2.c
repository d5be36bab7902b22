/*
 * api_v2.c - the Open Inference Protocol routes (see api_v2.h): server and model metadata, health,
 * and inference through the same forward path as /v1 (forward.h), so a request gives the same
 * numbers bit for bit whichever API it came through. Parsing and writing the protocol's bodies is
 * v2_request.c's and v2_response.c's; this file only joins them to the registry, the forward path and HTTP.
 */
#include "api_v2.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/sysinfo.h"
#include "codec/v2_codec.h"
#include "forward.h"
#include "store/datadir.h"
#include "store/registry.h"

#ifndef ATTND_VERSION
#define ATTND_VERSION "0.0.0"
#endif

void srv_v2_error_reply(srv_response *resp, const srv_error *err, const char *request_id)
{
    resp->content_type = "application/json";
    resp->body.len = 0;
    resp->body.failed = false;
    resp->status = srv_v2_error_write(&resp->body, err, request_id);
    if (resp->status == 503)
        srv_response_header(resp, "Retry-After", "1");
}

int srv_v2_server_metadata(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    srv_buf_puts(&resp->body, "{\"name\":\"attnd\",\"version\":");
    srv_buf_json_string(&resp->body, ATTND_VERSION);
    /* every extension served, as Triton names them; unload_dependents is taken (attnd's models
     * have no dependents to unload with them) */
    srv_buf_puts(&resp->body, ",\"extensions\":[\"binary_tensor_data\",\"model_repository\","
                              "\"model_repository(unload_dependents)\",\"statistics\","
                              "\"model_configuration\"]}");
    return 0;
}

int srv_v2_health_live(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    srv_buf_puts(&resp->body, "{\"live\":true}");
    return 0;
}

int srv_v2_health_ready(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    srv_app *app = ctx;
    if (!__atomic_load_n(&app->ready, __ATOMIC_ACQUIRE) ||
        __atomic_load_n(&app->draining, __ATOMIC_ACQUIRE))
        return srv_error_set(err, SRV_E_UNAVAILABLE, "", "not ready: the server is %s",
                             __atomic_load_n(&app->draining, __ATOMIC_ACQUIRE) ? "shutting down"
                                                                               : "starting");
    srv_buf_puts(&resp->body, "{\"ready\":true}");
    return 0;
}

/* Why the model called name is not served: 400 when the repository knows it (unloaded, damaged
 * in the data dir, or there and not loaded yet: not ready), 404 when it does not. Returns -1. */
static int v2_not_served(srv_app *app, const char *name, srv_error *err)
{
    if (!name)
        name = "";
    if (srv_registry_is_unloaded(app->registry, name, NULL))
        return srv_error_set(err, SRV_E_BAD_REQUEST, "name",
                             "model '%.64s' is not ready: it is unloaded; POST "
                             "/v2/repository/models/%.64s/load serves it again",
                             name, name);
    srv_damaged *damaged;
    int n = srv_persist_damaged_list(app->persist, &damaged);
    for (int i = 0; i < n; i++)
        if (!strcmp(damaged[i].name, name)) {
            srv_error_set(err, SRV_E_BAD_REQUEST, "name",
                          "model '%.64s' is not ready: it could not be loaded: %s", name,
                          damaged[i].reason);
            break;
        }
    free(damaged);
    if (err->code != SRV_OK)
        return -1;
    /* written to the data dir after start (no --watch): the index lists it, not loaded */
    srv_error e = {0};
    if (app->persist->dd && srv_dd_name_valid(name) &&
        srv_datadir_entry(app->persist->dd, name, &e) == 1)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "name",
                             "model '%.64s' is not ready: it is in the data dir and was not "
                             "loaded since it was written there; POST "
                             "/v2/repository/models/%.64s/load serves it",
                             name, name);
    return srv_error_set(err, SRV_E_LAYER_NOT_FOUND, "name",
                         "unknown model '%.64s'; POST /v2/repository/index lists the models", name);
}

/* The layer the path's {name} names, at the path's {version} when there is one (the only version
 * a model has is its layer's current version counter). A new reference, or NULL with a 404. */
static srv_layer *v2_model(srv_app *app, const srv_request *req, char version[24], srv_error *err)
{
    const char *name = srv_request_param(req, "name");
    const char *want = srv_request_param(req, "version");
    srv_layer *l = name ? srv_registry_get(app->registry, name, NULL) : NULL;
    if (!l) {
        v2_not_served(app, name, err);
        return NULL;
    }
    snprintf(version, 24, "%" PRIu64, l->version);
    if (want && strcmp(want, version) != 0) {
        srv_error_set(err, SRV_E_LAYER_NOT_FOUND, "version",
                      "model '%s' has no version '%.32s'; its version is '%s'", l->name, want,
                      version);
        srv_layer_release(l);
        return NULL;
    }
    return l;
}

int srv_v2_model_metadata(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    srv_app *app = ctx;
    char version[24];
    srv_layer *l = v2_model(app, req, version, err);
    if (!l)
        return -1;
    srv_v2_metadata_write(&resp->body, l->name, version, mha_layer_config(l->layer), l->config);
    srv_layer_release(l);
    return 0;
}

int srv_v2_model_config(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    srv_app *app = ctx;
    char version[24];
    srv_layer *l = v2_model(app, req, version, err);
    if (!l)
        return -1;
    int rc = srv_v2_config_write(&resp->body, l->name, mha_layer_config(l->layer), l->config,
                                 app->opt.max_inflight);
    srv_layer_release(l);
    return rc < 0 ? srv_error_set(err, SRV_E_NOMEM, "", "out of memory writing the configuration")
                  : 0;
}

int srv_v2_model_ready(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    srv_app *app = ctx;
    char version[24];
    srv_layer *l = v2_model(app, req, version, err);
    if (!l)
        return -1;
    srv_buf_puts(&resp->body, "{\"name\":");
    srv_buf_json_string(&resp->body, l->name);
    srv_buf_puts(&resp->body, ",\"ready\":true}");
    srv_layer_release(l);
    return 0;
}

/* Views of the request's tensors as the forward path's arguments. The data stays the request's
 * (some of it points into the HTTP body): never srv_forward_args_free these. */
static void v2_forward_args(srv_forward_args *a, const srv_v2_request *vr)
{
    static const float empty[1]; /* a zero-element tensor is present: its data must not be NULL */
    srv_forward_args_init(a);
    srv_tensor *dst[SRV_V2_IN_COUNT] = {&a->query, &a->key, &a->value, &a->key_padding_mask,
                                        &a->attn_mask};
    for (int id = 0; id < SRV_V2_IN_COUNT; id++) {
        const srv_v2_input *in = &vr->inputs[id];
        if (!in->present)
            continue;
        if (id == SRV_V2_IN_POSITIONS || id == SRV_V2_IN_KEY_POSITIONS) {
            *(id == SRV_V2_IN_POSITIONS ? &a->positions : &a->key_positions) = in->pos;
            continue;
        }
        srv_tensor *t = dst[id];
        t->dtype = in->dtype;
        t->ndim = in->ndim;
        memcpy(t->shape, in->shape, sizeof t->shape);
        t->count = in->count;
        t->data = (void *)(in->data ? in->data : (const void *)empty); /* read-only use */
    }
    a->is_causal = vr->is_causal;
    a->is_causal_given = vr->is_causal_given;
    a->need_weights = vr->need_weights;
    a->average_attn_weights = vr->average_attn_weights;
    a->select = vr->select; /* a view too: heads stay the request's */
    a->select_style = SRV_SELECT_FLAT;
}

/* The inference's cost (--max-request-flops) from the shapes the request declares, before its
 * tensors are read (srv_v2_request_parse_checked). */
typedef struct v2_cost {
    const srv_app *app;
    const mha_config *cfg;
} v2_cost;

static int check_cost(void *cls, const srv_v2_request *vr, srv_error *err)
{
    const v2_cost *c = cls;
    const srv_v2_input *q = &vr->inputs[SRV_V2_IN_QUERY], *k = &vr->inputs[SRV_V2_IN_KEY];
    return srv_forward_check_cost(c->app, c->cfg, q->ndim, q->shape, k->ndim,
                                  k->present ? k->shape : NULL, err);
}

int srv_v2_infer(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    srv_app *app = ctx;
    char version[24];
    srv_layer *l = v2_model(app, req, version, err);
    if (!l)
        return -1;
    int rc = -1;
    srv_v2_request vr;
    srv_forward_result fr;
    memset(&vr, 0, sizeof vr);
    memset(&fr, 0, sizeof fr);
    double t0 = srv_now(), t1 = t0, t2 = t0, t3 = t0;
    const char *ce = srv_request_header(req, "Content-Encoding");
    if (ce && strcasecmp(ce, "identity") != 0) {
        /* Triton can take gzip/deflate bodies; attnd does not decompress: say so plainly instead
         * of failing on the compressed bytes as if they were JSON. */
        srv_error_set(err, SRV_E_MEDIA_TYPE, "Content-Encoding",
                      "Content-Encoding '%.32s' is not supported; send the body uncompressed", ce);
        goto done;
    }
    size_t header_len;
    v2_cost cost = {app, mha_layer_config(l->layer)};
    if (srv_v2_header_length(&header_len,
                             srv_request_header(req, "Inference-Header-Content-Length"),
                             req->body_len, err) < 0 ||
        srv_v2_request_parse_checked(&vr, req->body, req->body_len, header_len,
                                     app->opt.max_tensor_elements, check_cost, &cost, err) < 0)
        goto done;
    srv_forward_args args;
    v2_forward_args(&args, &vr);
    args.cancel = req->gone;
    t1 = srv_now();
    if (srv_forward_run(app, l, &args, 0, &fr, err) < 0)
        goto done;
    t2 = srv_now();
    srv_v2_result res[SRV_V2_OUT_COUNT];
    memset(res, 0, sizeof res);
    res[SRV_V2_OUT_OUTPUT].data = fr.output;
    res[SRV_V2_OUT_OUTPUT].ndim = fr.plan.out_ndim;
    memcpy(res[SRV_V2_OUT_OUTPUT].shape, fr.plan.out_shape, sizeof fr.plan.out_shape);
    /* the weights: attn_weights, or with a top-k selection its indices and values */
    const srv_v2_output_id vw = fr.plan.top_k ? SRV_V2_OUT_ATTN_TOPK_VALUES : SRV_V2_OUT_ATTN_WEIGHTS;
    res[vw].data = fr.attn_weights;
    res[vw].ndim = fr.plan.weights_ndim;
    memcpy(res[vw].shape, fr.plan.weights_shape, sizeof fr.plan.weights_shape);
    res[vw].dtype = fr.weights_dtype;
    if (fr.plan.top_k) {
        res[SRV_V2_OUT_ATTN_TOPK_INDICES] = res[vw];
        res[SRV_V2_OUT_ATTN_TOPK_INDICES].data = fr.topk_indices;
        res[SRV_V2_OUT_ATTN_TOPK_INDICES].is_int32 = true;
    }
    size_t json_len;
    if (srv_v2_response_write(&resp->body, &json_len, &vr, l->name, version, res, err) < 0)
        goto done;
    if (json_len < resp->body.len) {
        srv_response_header(resp, "Inference-Header-Content-Length", "%zu", json_len);
        resp->content_type = "application/octet-stream";
    }
    t3 = srv_now();
    rc = 0;
done:
    srv_forward_count(l, req, rc == 0, t1 - t0, &fr, t3 - t2);
    srv_forward_result_free(&fr);
    srv_v2_request_free(&vr);
    srv_layer_release(l);
    return rc;
}
