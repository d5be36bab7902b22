/*
 * api_import.c - POST /v1/layers/{name}/import: layer I of a Hugging Face checkpoint kept on the
 * server becomes the layer {name} (store/hf_import.h does the mapping; SPEC §2).
 *
 *   POST /v1/layers/{name}/import   {"checkpoint": "<dir below --checkpoints-dir>", "layer": I}
 *   -> 201 created / 200 replaced: {name, version, config, parameter_count,
 *                                   import: {checkpoint, layer, family, tensors, bytes_read}}
 *
 * Off unless the daemon was started with --checkpoints-dir (403 otherwise). The checkpoint name is
 * resolved below that directory only: an absolute path, "..", or a link leading out is a 400.
 * A change like any other: the API key guards it, --read-only refuses it, If-Match /
 * If-None-Match apply, the data dir is written before the layer is published. It reads files, so
 * it always runs on a worker (SRV_ROUTE_WORKER), and imports run one at a time (503 + Retry-After
 * while one is running).
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"
#include "store/config.h"
#include "base/sysinfo.h"
#include "body.h"
#include "layer_io.h"
#include "store/hf_import.h"

#define IMPORT_FIELDS "checkpoint, layer"

/* Reads {"checkpoint": string, "layer": integer} (both required, nothing else). */
static int parse_body(srv_app *app, const srv_request *req, char *checkpoint, size_t size,
                      int64_t *layer, srv_error *err)
{
    srv_json_member m[SRV_BODY_MAX_MEMBERS];
    int n = srv_body_scan_request(app, req, NULL, m, err);
    if (n < 0)
        return -1;
    bool have_ckpt = false, have_layer = false;
    for (int i = 0; i < n; i++) {
        if (!strcmp(m[i].key, "checkpoint")) {
            if (srv_member_string(&m[i], "checkpoint", checkpoint, size, err) < 0)
                return -1;
            have_ckpt = true;
        } else if (!strcmp(m[i].key, "layer")) {
            json_t *v = srv_member_json(&m[i], "layer", err);
            if (!v)
                return -1;
            bool ok = json_is_integer(v) && json_integer_value(v) >= 0 &&
                      json_integer_value(v) <= INT32_MAX;
            *layer = ok ? json_integer_value(v) : 0;
            json_decref(v);
            if (!ok)
                return srv_error_set(err, SRV_E_BAD_REQUEST, "layer",
                                     "layer must be a layer index (0, 1, ...)");
            have_layer = true;
        } else {
            return srv_body_unknown(err, "", m[i].key, IMPORT_FIELDS);
        }
    }
    if (!have_ckpt)
        return srv_error_set(err, SRV_E_MISSING_FIELD, "checkpoint",
                             "checkpoint is required: a directory name below --checkpoints-dir");
    if (!have_layer)
        return srv_error_set(err, SRV_E_MISSING_FIELD, "layer", "layer is required");
    if (!checkpoint[0])
        return srv_error_set(err, SRV_E_BAD_REQUEST, "checkpoint", "checkpoint is empty");
    return 0;
}

static int reply(srv_response *resp, const srv_layer *l, bool replaced, const char *checkpoint,
                 int64_t layer, const srv_hf_layer *hl, uint64_t bytes_read, srv_error *err)
{
    json_t *doc = json_pack("{s:s, s:I, s:o, s:I, s:{s:s, s:I, s:s, s:i, s:I}}", "name", l->name,
                            "version", (json_int_t)l->version, "config", json_deep_copy(l->config),
                            "parameter_count",
                            (json_int_t)mha_param_total(mha_layer_config(l->layer)), "import",
                            "checkpoint", checkpoint, "layer", (json_int_t)layer, "family",
                            hl->family, "tensors", hl->tensors, "bytes_read",
                            (json_int_t)bytes_read);
    char *s = doc ? json_dumps(doc, JSON_COMPACT) : NULL;
    json_decref(doc);
    if (!s)
        return srv_error_set(err, SRV_E_NOMEM, "", "out of memory writing the reply");
    srv_buf_free(&resp->body);
    resp->body.data = s;
    resp->body.len = strlen(s);
    resp->body.cap = resp->body.len + 1;
    resp->status = replaced ? 200 : 201;
    return 0;
}

int srv_api_layer_import(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    srv_app *app = ctx;
    const char *name = srv_request_param(req, "name");
    if (!srv_layer_name_valid(name, err))
        return -1;
    char checkpoint[1024];
    int64_t layer = 0;
    if (parse_body(app, req, checkpoint, sizeof checkpoint, &layer, err) < 0)
        return -1;
    if (app->checkpoints_fd < 0)
        return srv_error_set(err, SRV_E_FORBIDDEN, "checkpoint",
                             "imports are off: the daemon was started without --checkpoints-dir");
    uint64_t if_version;
    if (srv_if_match(req, app->registry, name, &if_version, err) < 0 ||
        srv_if_none_match(req, app->registry, name, &if_version, err) < 0)
        return -1;
    /* one at a time: an import holds a layer's weights in memory and reads the disk for a while */
    int busy = pthread_mutex_trylock(&app->import_lock);
    if (busy) {
        return srv_error_set(err, SRV_E_UNAVAILABLE, "",
                             "another import is running; retry when it is done");
    }
    srv_hf_layer hl = {0};
    srv_layer *l = NULL;
    uint64_t bytes_read = 0;
    int rc = -1;
    double t0 = srv_now();
    srv_ckpt *ck = srv_ckpt_open(app->checkpoints_fd, checkpoint, true, err);
    /* the layers' memory (--max-weights-bytes), from config.json before a tensor is read or the
     * layer allocated (SPEC: a 507 before anything is allocated) */
    json_t *cfg = ck ? srv_hf_import_config(ck, layer, &app->limits, err) : NULL;
    mha_config c;
    int64_t bytes = cfg && srv_config_from_json(&c, cfg, &app->limits, "config", NULL) == 0
                        ? srv_layer_bytes(&c)
                        : 0;
    bool reserved = cfg && srv_registry_reserve(app->registry, name, bytes, err) == 0;
    json_decref(cfg);
    if (reserved && srv_hf_import(ck, layer, &app->limits, NULL, NULL, &hl, err) == 0) {
        bytes_read = srv_ckpt_bytes_read(ck);
        srv_response_timing(resp, "read", (srv_now() - t0) * 1e3);
        l = srv_layer_charge(srv_persist_build(name, hl.config, &hl.weights, &app->limits, err),
                             app->registry, bytes);
    } else if (reserved) {
        srv_registry_unreserve(app->registry, bytes); /* the read failed: nothing was made */
    }
    srv_ckpt_free(ck);
    bool replaced = false;
    if (l && srv_persist_put(app->persist, app->registry, l, if_version, &replaced, err) == 0) {
        if (!replaced)
            srv_response_header(resp, "Location", "/v1/layers/%s", l->name);
        srv_etag(resp, l->version);
        rc = reply(resp, l, replaced, checkpoint, layer, &hl, bytes_read, err);
    }
    pthread_mutex_unlock(&app->import_lock);
    srv_layer_release(l);
    srv_hf_layer_free(&hl);
    return rc;
}
