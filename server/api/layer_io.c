/*
 * layer_io.c - ETag / If-Match and safetensors bodies for the layer routes (see layer_io.h).
 */
#include "layer_io.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "codec/safetensors.h"
#include "http/accept.h"
#include "http/conditional.h"
#include "store/config.h"
#include "store/persist.h"
#include "store/weights.h"

/* Parses one entity tag of an If-Match list at *p ("7", W/"7" or 7, blanks around), moving *p past
 * it and its comma; *weak says whether it was W/. Returns the version, or 0 when it is not one
 * attnd gives: a version is written without leading zeros, and "007" is another tag than "7"
 * (RFC 9110 8.8.3.2 compares tags character by character). */
static uint64_t etag_version(const char **p, bool *weak)
{
    const char *v = *p;
    while (*v == ' ' || *v == '\t')
        v++;
    *weak = strncmp(v, "W/", 2) == 0;
    if (*weak)
        v += 2;
    bool quoted = *v == '"';
    if (quoted)
        v++;
    if (*v < '1' || *v > '9')
        return 0;
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    if (errno || (quoted && *end++ != '"'))
        return 0;
    while (*end == ' ' || *end == '\t')
        end++;
    if (*end != ',' && *end)
        return 0;
    *p = end + (*end == ',');
    return x;
}

/* The value of the precondition header `header` (leading blanks skipped), or NULL when the request
 * has none; *now gets the current version of layer `name` (0: there is none). */
static const char *precondition(const srv_request *req, srv_registry *reg, const char *name,
                                const char *header, uint64_t *now)
{
    const char *v = srv_request_header(req, header);
    if (!v)
        return NULL;
    while (*v == ' ')
        v++;
    srv_layer *cur = srv_registry_get(reg, name, NULL);
    *now = cur ? cur->version : 0;
    srv_layer_release(cur);
    return v;
}

static bool is_star(const char *v)
{
    return strcmp(v, "*") == 0 || strcmp(v, "* ") == 0;
}

int srv_etag_list(const char *v, uint64_t now, const char *header, bool strong, uint64_t *first,
                  bool *found, srv_error *err)
{
    *first = 0;
    *found = false;
    bool any = false;
    for (;;) {
        v += strspn(v, " \t,"); /* blanks, and empty list elements (RFC 9110 5.6.1.2: ignored) */
        if (!*v)
            break;
        bool weak;
        uint64_t x = etag_version(&v, &weak);
        if (!x)
            break;
        any = true;
        if (strong && weak)
            continue;
        if (!*first)
            *first = x;
        *found |= x == now;
    }
    if (*v || !any)
        return srv_error_set(err, SRV_E_BAD_REQUEST, header,
                             "%s must be * or ETags this daemon gave (\"<version>\", "
                             "comma-separated)", header);
    return 0;
}

int srv_if_match(const srv_request *req, srv_registry *reg, const char *name,
                 uint64_t *if_version, srv_error *err)
{
    *if_version = 0;
    uint64_t now, first;
    bool found;
    const char *v = precondition(req, reg, name, "If-Match", &now);
    if (!v)
        return 0;
    if (is_star(v)) { /* checked where the change happens: on disk, with a data dir */
        *if_version = SRV_IF_EXISTS;
        return 0;
    }
    /* the condition holds when any strong tag is the current version (RFC 9110 13.1.1: If-Match
     * compares strongly, so W/"7" never matches: a weak tag promises no byte-for-byte state to
     * change from), and the change is then conditional on that version; else on the first (a
     * 409 naming it) */
    if (srv_etag_list(v, now, "If-Match", true, &first, &found, err) < 0)
        return -1;
    if (!first)
        return srv_error_set(err, SRV_E_CONFLICT, "If-Match",
                             "If-Match compares ETags strongly (RFC 9110 13.1.1): a weak tag "
                             "W/\"<version>\" never matches; send the ETag as given, \"<version>\"");
    *if_version = found ? now : first;
    return 0;
}

int srv_if_none_match(const srv_request *req, srv_registry *reg, const char *name,
                      uint64_t *if_version, srv_error *err)
{
    uint64_t now, first;
    bool found;
    const char *v = precondition(req, reg, name, "If-None-Match", &now);
    if (!v)
        return 0;
    if (is_star(v)) {
        if (*if_version) /* If-Match asked for an existing layer too: both cannot hold */
            return srv_error_set(err, SRV_E_CONFLICT, "If-None-Match",
                                 "If-None-Match: * asks for a new layer, and If-Match for an "
                                 "existing one");
        if (now) /* refused at once; the registry checks again when it publishes */
            return srv_error_set(err, SRV_E_CONFLICT, "If-None-Match",
                                 "If-None-Match: * asks for a new layer, and layer '%s' exists "
                                 "(version %llu)", name, (unsigned long long)now);
        *if_version = SRV_IF_ABSENT;
        return 0;
    }
    /* the change happens unless one of the tags is the current version */
    if (srv_etag_list(v, now, "If-None-Match", false, &first, &found, err) < 0)
        return -1;
    if (found)
        return srv_error_set(err, SRV_E_CONFLICT, "If-None-Match",
                             "layer '%s' is at version %llu, which If-None-Match names", name,
                             (unsigned long long)now);
    return 0;
}

bool srv_not_modified(const srv_request *req, srv_response *resp, uint64_t version)
{
    char tag[32];
    snprintf(tag, sizeof tag, "\"%llu\"", (unsigned long long)version);
    if (!srv_none_match_hits(srv_request_header(req, "If-None-Match"), tag))
        return false;
    resp->status = 304;
    return true;
}

void srv_etag(srv_response *resp, uint64_t version)
{
    srv_response_header(resp, "ETag", "\"%llu\"", (unsigned long long)version);
}

bool srv_wants_octet(const srv_request *req)
{
    const char *a = srv_request_header(req, "Accept");
    if (!a)
        return false;
    return srv_accept_prefers_octet(a);
}

bool srv_accept_prefers_octet(const char *accept)
{
    /* the higher quality wins, then the earlier entry; JSON when neither is named */
    int po = 0, pj = 0;
    int qo = srv_accept_quality(accept, "application/octet-stream", &po);
    int qj = srv_accept_quality(accept, "application/json", &pj);
    return qo > 0 && (qo > qj || (qo == qj && po < pj));
}

bool srv_is_octet(const srv_request *req)
{
    const char *ct = srv_request_header(req, "Content-Type");
    size_t n = strlen("application/octet-stream");
    return ct && strncasecmp(ct, "application/octet-stream", n) == 0 &&
           (ct[n] == '\0' || ct[n] == ';' || ct[n] == ' ');
}

/* Reserves the memory of a layer called name with the config object cfg (--max-weights-bytes).
 * Returns the bytes reserved, 0 when cfg is not a valid config (nothing reserved: building the
 * layer reports it), or -1 with err (507). */
static int64_t reserve_for(srv_app *app, const char *name, const json_t *cfg, srv_error *err)
{
    mha_config c;
    if (!cfg || srv_config_from_json(&c, cfg, &app->limits, "config", NULL) < 0)
        return 0;
    int64_t bytes = srv_layer_bytes(&c);
    return srv_registry_reserve(app->registry, name, bytes, err) < 0 ? -1 : bytes;
}

/* The config a safetensors body carries in its header's __metadata__["config"], read before its
 * tensors are (new reference), or NULL. */
static json_t *header_config(srv_app *app, const char *body, size_t len)
{
    uint64_t hlen;
    srv_st_header h = {0};
    srv_st_header_limits lim = {SRV_ST_MAX_HEADER, SRV_ST_MAX_TENSORS, app->limits.max_elements,
                                false};
    if (len < 8 || srv_st_header_len((const uint8_t *)body, len, SRV_ST_MAX_HEADER, &hlen, "body",
                                     NULL) < 0 ||
        srv_st_header_parse(&h, (const uint8_t *)body + 8, (size_t)hlen, len - 8 - hlen, &lim,
                            "body", NULL) < 0)
        return NULL;
    const char *text = json_string_value(json_object_get(h.metadata, "config"));
    json_t *cfg = text ? json_loads(text, JSON_REJECT_DUPLICATES, NULL) : NULL;
    srv_st_header_free(&h);
    return cfg;
}

srv_layer *srv_layer_from_safetensors(srv_app *app, const char *name, const char *body,
                                      size_t len, srv_error *err)
{
    /* the layers' memory is checked from the header, before a tensor is decoded */
    json_t *early = header_config(app, body, len);
    int64_t bytes = reserve_for(app, name, early, err);
    json_decref(early);
    if (bytes < 0)
        return NULL;
    srv_st st;
    if (srv_st_parse(&st, (const uint8_t *)body, len, app->limits.max_elements, "body", err) < 0) {
        srv_registry_unreserve(app->registry, bytes);
        return NULL;
    }
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
    if (!bytes && (bytes = reserve_for(app, name, cfg, err)) < 0) {
        bytes = 0;
    } else {
        l = srv_persist_build(name, cfg, &st, &app->limits, err);
    }
    json_decref(cfg);
out:
    srv_st_free(&st);
    return srv_layer_charge(l, app->registry, bytes);
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
