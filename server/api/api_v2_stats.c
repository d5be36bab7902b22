/*
 * api_v2_stats.c - Triton's statistics extension: GET /v2/models/stats and
 * GET /v2/models/{name}[/versions/{version}]/stats (see api_v2.h).
 *
 * The counters are the layer's (store/layer_stats.h), the same that /metrics shows per layer. attnd
 * runs each request as one execution of batch size 1 (max_batch_size 0 in the model configuration,
 * no dynamic batching), so inference_count = execution_count = inference_stats.success.count, and
 * batch_stats has one entry, batch_size 1, once the layer has run. There is no response cache:
 * cache_hit and cache_miss stay zero. memory_usage is the layer's parameters in memory ("CPU").
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>

#include "api_v2.h"
#include "models.h"

static void duration(srv_buf *b, const char *name, uint64_t count, uint64_t ns)
{
    srv_buf_printf(b, "\"%s\":{\"count\":%" PRIu64 ",\"ns\":%" PRIu64 "}", name, count, ns);
}

/* One $model_stat object of the extension, in the order its document lists the fields. */
static void model_stat(srv_buf *b, const srv_model_entry *e)
{
    srv_layer_stats_snapshot s;
    srv_layer_stats_read(e->stats, &s);
    uint64_t n = s.success_count;
    srv_buf_puts(b, "{\"name\":");
    srv_buf_json_string(b, e->name);
    srv_buf_printf(b,
                   ",\"version\":\"%" PRIu64 "\",\"last_inference\":%" PRIu64
                   ",\"inference_count\":%" PRIu64 ",\"execution_count\":%" PRIu64
                   ",\"inference_stats\":{",
                   e->version, s.last_inference_ms, n, n);
    duration(b, "success", n, s.success_ns);
    srv_buf_putc(b, ',');
    duration(b, "fail", s.fail_count, s.fail_ns);
    srv_buf_putc(b, ',');
    duration(b, "queue", n, s.queue_ns);
    srv_buf_putc(b, ',');
    duration(b, "compute_input", n, s.input_ns);
    srv_buf_putc(b, ',');
    duration(b, "compute_infer", n, s.infer_ns);
    srv_buf_putc(b, ',');
    duration(b, "compute_output", n, s.output_ns);
    srv_buf_putc(b, ',');
    duration(b, "cache_hit", 0, 0);
    srv_buf_putc(b, ',');
    duration(b, "cache_miss", 0, 0);
    srv_buf_puts(b, "},\"response_stats\":{},\"batch_stats\":[");
    if (n) {
        srv_buf_puts(b, "{\"batch_size\":1,");
        duration(b, "compute_input", n, s.input_ns);
        srv_buf_putc(b, ',');
        duration(b, "compute_infer", n, s.infer_ns);
        srv_buf_putc(b, ',');
        duration(b, "compute_output", n, s.output_ns);
        srv_buf_putc(b, '}');
    }
    srv_buf_puts(b, "],\"memory_usage\":[");
    if (e->bytes > 0)
        srv_buf_printf(b, "{\"type\":\"CPU\",\"id\":0,\"byte_size\":%" PRId64 "}", e->bytes);
    srv_buf_puts(b, "]}");
}

int srv_v2_model_stats(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    srv_app *app = ctx;
    const char *name = srv_request_param(req, "name");
    const char *want = srv_request_param(req, "version");
    srv_model_entry *list;
    int n = srv_models_list(app, name, &list);
    if (n < 0)
        return srv_error_set(err, SRV_E_NOMEM, "", "out of memory listing the models");
    if (name && n == 0) {
        srv_models_free(list, n);
        return srv_error_set(err, SRV_E_LAYER_NOT_FOUND, "name",
                             "unknown model '%.64s'; GET /v2/models/stats lists every model", name);
    }
    char version[24];
    if (want && snprintf(version, sizeof version, "%" PRIu64, list[0].version) > 0 &&
        strcmp(want, version) != 0) {
        srv_error_set(err, SRV_E_LAYER_NOT_FOUND, "version",
                      "model '%s' has no version '%.32s'; its version is '%s'", list[0].name, want,
                      version);
        srv_models_free(list, n);
        return -1;
    }
    srv_buf *b = &resp->body;
    srv_buf_puts(b, "{\"model_stats\":[");
    for (int i = 0; i < n; i++) {
        if (i)
            srv_buf_putc(b, ',');
        model_stat(b, &list[i]);
    }
    srv_buf_puts(b, "]}");
    srv_models_free(list, n);
    return b->failed ? srv_error_set(err, SRV_E_NOMEM, "", "out of memory writing the statistics")
                     : 0;
}
