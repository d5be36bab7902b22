/*
 * layer_io.h - what the layer routes share for versions and binary bodies: ETag / If-Match, and
 * layers and weights as safetensors (Accept / Content-Type: application/octet-stream).
 *
 * ETag: a layer's version (registry.h) as a strong entity tag, "\"<version>\"", on GET and PUT of
 * a layer and of its weights. If-Match on PUT / DELETE makes the change conditional: "<version>"
 * (W/ prefix tolerated; a comma-separated list: any of them) must be the current version, "*" only
 * asks that the layer exists; anything else is a 409 (docs/api.md; HTTP's usual 412 is not used).
 * If-None-Match: * on PUT /v1/layers/{name} creates only (409 when the layer exists); on GET of a
 * layer or its weights, * or the current ETag answers 304 Not Modified.
 *
 * PUT /v1/layers/{name} with a safetensors body: the layer's config travels in the file's
 * __metadata__ under "config", as a JSON string (safetensors metadata values are strings), e.g.
 *   {"__metadata__": {"config": "{\"embed_dim\": 8, \"num_heads\": 2}"}, "in_proj_weight": ...}
 * and the tensors are the parameters under torch's state_dict names.
 */
#ifndef ATTND_LAYER_IO_H
#define ATTND_LAYER_IO_H

#include <stdbool.h>
#include <stdint.h>

#include "app/app.h"
#include "http/http.h"
#include "store/registry.h"

/* Reads If-Match for layer name into *if_version (0 when absent; "*" gives SRV_IF_EXISTS; a list
 * naming the current version gives the current version; a list that does not, its first version).
 * The condition is checked where the change happens (persist.h: against the data dir, which every
 * replica shares). Returns 0, or -1 with err: SRV_E_BAD_REQUEST (not an entity tag attnd gave). */
int srv_if_match(const srv_request *req, srv_registry *reg, const char *name,
                 uint64_t *if_version, srv_error *err);

/* Reads If-None-Match for a PUT of layer name, after srv_if_match: "*" (create only, never replace)
 * sets *if_version to SRV_IF_ABSENT, which the registry checks atomically; a list of ETags is a 409
 * at once when it names the current version. Returns 0, or -1 with err: SRV_E_CONFLICT,
 * SRV_E_BAD_REQUEST (not * nor ETags attnd gave). */
int srv_if_none_match(const srv_request *req, srv_registry *reg, const char *name,
                      uint64_t *if_version, srv_error *err);

/* Reads v, an If-Match or If-None-Match value other than "*", as a comma-separated list of ETags
 * (RFC 9110 8.8.3; blanks and empty elements ignored as 5.6.1.2 says): *first gets the first
 * tag's version, *found whether one of them is `now`. With `strong` (If-Match's comparison, RFC
 * 9110 8.8.3.2) weak tags (W/"7") count for neither, so *first is 0 when every tag is weak.
 * Returns 0, or -1 with a 400 naming header when a tag is not one this daemon gives
 * ("<version>", W/ and the quotes tolerated) or the list holds none. */
int srv_etag_list(const char *v, uint64_t now, const char *header, bool strong, uint64_t *first,
                  bool *found, srv_error *err);

/* Adds ETag: "<version>" to resp. */
void srv_etag(srv_response *resp, uint64_t version);

/* A conditional GET: when the request's If-None-Match is * or names "<version>", sets resp to
 * 304 Not Modified (no body; the caller has set the ETag) and returns true. */
bool srv_not_modified(const srv_request *req, srv_response *resp, uint64_t version);

/* True when the request's Accept asks for application/octet-stream with a higher quality than
 * application/json (or the same, listed first). */
bool srv_wants_octet(const srv_request *req);

/* The same for an Accept value (NULL: no header). */
bool srv_accept_prefers_octet(const char *accept);

/* True when the request's Content-Type is application/octet-stream. */
bool srv_is_octet(const srv_request *req);

/* A new layer entry (one reference, the caller's) named name from a safetensors body carrying its
 * config in __metadata__["config"]. NULL with err filled (400 for the file, 422 for the config). */
srv_layer *srv_layer_from_safetensors(srv_app *app, const char *name, const char *body,
                                      size_t len, srv_error *err);

/* A new entry with old's config and the weights of a safetensors body. NULL with err filled. */
srv_layer *srv_weights_from_safetensors(srv_app *app, const srv_layer *old, const char *body,
                                        size_t len, srv_error *err);

/* Fills resp with the layer's weights as a safetensors file (Content-Type
 * application/octet-stream). Returns 0 or -1 (SRV_E_NOMEM). */
int srv_weights_reply_safetensors(srv_response *resp, const srv_layer *l, srv_error *err);

#endif
