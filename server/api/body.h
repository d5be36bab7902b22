/*
 * body.h - reading JSON request bodies: the top-level members, then each value by its kind.
 *
 * A body is split into members with srv_json_object_scan (no parse of the values; tensor values
 * are only delimited, see srv_body_scan's tensor_keys); a handler then
 * walks the members, parses each one it knows with the helpers below, and refuses any other with
 * srv_body_unknown (400 unknown_field naming it), so a typo like "need_weight" never passes.
 */
#ifndef ATTND_BODY_H
#define ATTND_BODY_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

#include "app/app.h"
#include "base/error.h"
#include "codec/json_scan.h"
#include "codec/positions.h"
#include "codec/tensor.h"
#include "http/http.h"

#define SRV_BODY_MAX_MEMBERS 32

/* Splits [json, json+len) (one JSON object) into members (up to SRV_BODY_MAX_MEMBERS), with the
 * daemon's depth limit. `field` names the object in errors ("" for a body). An empty text is a
 * 400 saying a JSON object is needed. Returns the count or -1.
 * tensor_keys (NULL-terminated, "*" for all; NULL for none) name the members whose array or object
 * values are tensors: they are only delimited, not validated (srv_json_object_scan_lazy), so the
 * handler must read each with srv_member_tensor, and when it refuses the body for any reason after
 * this scan succeeded, return srv_body_recheck(). */
int srv_body_scan(const srv_app *app, const char *json, size_t len, const char *field,
                  const char *const *tensor_keys, srv_json_member *out, srv_error *err);

/* srv_body_scan of req's whole body, jumping over its base64 texts that were decoded while it
 * arrived (predecode.h) instead of scanning them again. */
int srv_body_scan_request(const srv_app *app, const srv_request *req,
                          const char *const *tensor_keys, srv_json_member *out, srv_error *err);

/* For a handler that refuses a body scanned with tensor_keys: validates all of [json, json+len)
 * (the whole request body) as srv_body_scan without tensor_keys would, and when that finds an error
 * it replaces err - a syntax error anywhere in the body wins over what the handler found, as when
 * every body was validated whole first. Otherwise err stays. Returns -1. */
int srv_body_recheck(const srv_app *app, const char *json, size_t len, srv_error *err);

/* The member's value is JSON null. */
bool srv_member_is_null(const srv_json_member *m);

/* A boolean: exactly true or false (not 0/1, not "true"). 400 naming field otherwise. */
int srv_member_bool(const srv_json_member *m, const char *field, bool *out, srv_error *err);

/* A string (unescaped into out, at most size-1 bytes). 400 otherwise. */
int srv_member_string(const srv_json_member *m, const char *field, char *out, size_t size,
                      srv_error *err);

/* Any small JSON value parsed with jansson (new reference), or NULL with err filled (bad_json). */
json_t *srv_member_json(const srv_json_member *m, const char *field, srv_error *err);

/* A tensor in any of the three forms (tensor.h). mask: booleans and "-inf" allowed. Limits from the
 * daemon's options. req (may be NULL): the request whose body m is in, for the base64 texts already
 * decoded while it arrived (predecode.h). */
int srv_member_tensor(srv_tensor *out, const srv_json_member *m, const char *field, bool mask,
                      const srv_app *app, const srv_request *req, srv_error *err);

/* Positions (positions.h: [L] or [N,L] whole numbers in any of the three forms); null is absent
 * (out left zeroed). The element limit is the daemon's --max-tensor-elements. */
int srv_member_positions(srv_positions *out, const srv_json_member *m, const char *field,
                         const srv_app *app, srv_error *err);

/* "encoding": nested | flat | base64. */
int srv_member_encoding(const srv_json_member *m, srv_encoding *out, srv_error *err);

/* Fills err with the 400 for a member the endpoint does not know; `known` lists the ones it does
 * (for the message). `prefix` is put before the key in the field ("" or "weights."). Returns -1. */
int srv_body_unknown(srv_error *err, const char *prefix, const char *key, const char *known);

#endif
