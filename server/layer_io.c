/*
 * layer_io.c - ETag / If-Match and safetensors bodies for the layer routes (see layer_io.h).
 */
#include "layer_io.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "persist.h"
#include "safetensors.h"
#include "weights.h"

int srv_if_match(const srv_request *req, srv_registry *reg, const char *name,
                 uint64_t *if_version, srv_error *err)
{
    *if_version = 0;
    const char *v = srv_request_header(req, "If-Match");
    if (!v)
        return 0;
    while (*v == ' ')
        v++;
    if (strcmp(v, "*") == 0) {
        srv_layer *cur = srv_registry_get(reg, name, NULL);
        if (!cur)
            return srv_error_set(err, SRV_E_CONFLICT, "If-Match",
                                 "If-Match: * asks for an existing layer, and there is no layer "
                                 "called '%s'", name);
        *if_version = cur->version;
        srv_layer_release(cur);
        return 0;
    }
    if (strncmp(v, "W/", 2) == 0)
        v += 2;
    bool quoted = *v == '"';
    if (quoted)
        v++;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (quoted && *end == '"')
        end++;
    while (*end == ' ')
        end++;
    if (errno || end == v || *end || x == 0 || *v == '-')
        return srv_error_set(err, SRV_E_BAD_REQUEST, "If-Match",
                             "If-Match must be one ETag this daemon gave (\"<version>\") or *");
    *if_version = x;
    return 0;
}

void srv_etag(srv_response *resp, uint64_t version)
{
    srv_response_header(resp, "ETag", "\"%llu\"", (unsigned long long)version);
}

/* True when the media type list s names type before any JSON type. */
static bool media_first(const char *s, const char *type)
{
    const char *t = strcasestr(s, type), *j = strcasestr(s, "application/json");
    return t && (!j || t < j);
}

bool srv_wants_octet(const srv_request *req)
{
    const char *a = srv_request_header(req, "Accept");
    return a && media_first(a, "application/octet-stream");
}

bool srv_is_octet(const srv_request *req)
{
    const char *ct = srv_request_header(req, "Content-Type");
    size_t n = strlen("application/octet-stream");
    return ct && strncasecmp(ct, "application/octet-stream", n) == 0 &&
           (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ');
}

srv_layer *srv_layer_from_safetensors(srv_app *app, const char *name, const char *body,
                                      size_t len, srv_error *err)
{
    srv_st st;
    if (srv_st_parse(&st, (const uint8_t *)body, len, app->limits.max_elements, "body", err) < 0)
        return NULL;
    srv_layer *l = NULL;
    const char *text = srv_st_meta(&st, "config");
    if (!text) {
        srv_error_set(err, SRV_E_MISSING_FIELD, "config",
                      "a safetensors layer carries its config as a JSON string in "
                      "__metadata__[\"config\"], e.g. \"{\\\"embed_dim\\\": 8, "
                      "\\\"num_heads\\\": 2}\"");
        goto out;
    }
    json_error_t jerr;
    json_t *cfg = json_loads(text, JSON_REJECT_DUPLICATES, &jerr);
    if (!cfg || !json_is_object(cfg)) {
        srv_error_set(err, SRV_E_BAD_JSON, "config",
                      "__metadata__[\"config\"] is not a JSON object: %s",
                      cfg ? "another JSON value" : jerr.text);
        json_decref(cfg);
        goto out;
    }
    l = srv_persist_build(name, cfg, &st, &app->limits, err);
    json_decref(cfg);
out:
    srv_st_free(&st);
    return l;
}

srv_layer *srv_weights_from_safetensors(srv_app *app, const srv_layer *old, const char *body,
                                        size_t len, srv_error *err)
{
    srv_st st;
    if (srv_st_parse(&st, (const uint8_t *)body, len, app->limits.max_elements, "body", err) < 0)
        return NULL;
    srv_layer *l = srv_persist_build(old->name, old->config, &st, &app->limits, err);
    srv_st_free(&st);
    return l;
}

int srv_weights_reply_safetensors(srv_response *resp, const srv_layer *l, srv_error *err)
{
    resp->content_type = "application/octet-stream";
    return srv_weights_to_safetensors(&resp->body, l->layer, err);
}
