/*
 * api_health.c - GET /healthz (the process answers), /readyz (it should get traffic), /openapi.yaml.
 */
#include <string.h>

#include "api.h"
#include "base/sysinfo.h"

/* openapi_embed.c: the repository's openapi.yaml, built into the binary */
extern const char srv_openapi_yaml[];
extern const char srv_openapi_yaml_end[];

int srv_api_healthz(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    srv_app *app = ctx;
    srv_buf_printf(&resp->body, "{\"status\":\"ok\",\"version\":\"%s\",\"uptime_s\":%.3f}\n",
                   ATTND_VERSION, srv_now() - app->started);
    return 0;
}

int srv_api_readyz(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    srv_app *app = ctx;
    bool ready = __atomic_load_n(&app->ready, __ATOMIC_ACQUIRE);
    bool draining = __atomic_load_n(&app->draining, __ATOMIC_ACQUIRE);
    int layers = srv_registry_count(app->registry);
    if (ready && !draining) {
        /* layers of the data dir that could not be loaded are listed, with why; the daemon is
         * ready all the same (it serves the others) */
        srv_buf_printf(&resp->body, "{\"ready\":true,\"layers\":%d,\"damaged\":", layers);
        srv_persist_damaged_json(app->persist, &resp->body);
        srv_buf_puts(&resp->body, "}\n");
        return 0;
    }
    const char *why = draining ? "draining" : "starting";
    resp->status = 503;
    srv_response_header(resp, "Retry-After", "1");
    /* the error object every other error reply has, request id included */
    srv_buf_printf(&resp->body,
                   "{\"ready\":false,\"status\":\"%s\",\"layers\":%d,"
                   "\"error\":{\"code\":\"unavailable\",\"message\":\"the daemon is %s\"",
                   why, layers, draining ? "shutting down" : "starting");
    if (req->id) {
        srv_buf_puts(&resp->body, ",\"request_id\":");
        srv_buf_json_string(&resp->body, req->id);
    }
    srv_buf_puts(&resp->body, "}}\n");
    return 0;
}

int srv_api_openapi(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    resp->content_type = "application/yaml";
    return srv_buf_append(&resp->body, srv_openapi_yaml,
                          (size_t)(srv_openapi_yaml_end - srv_openapi_yaml)) < 0
               ? srv_error_set(err, SRV_E_NOMEM, "", "out of memory")
               : 0;
}
