/*
 * error.c - the one table from error code to HTTP status and stable name, and the first-error-wins
 * setter every module uses (see error.h).
 *
 * Messages are formatted into the fixed-size arrays of srv_error; a message that does not fit is cut
 * at a UTF-8 character boundary and ends with "...", so the JSON error body stays valid UTF-8.
 */
#include "error.h"

#include <stdio.h>
#include <string.h>

#include "mha.h"

static const struct {
    int status;
    const char *name;
} srv_error_table[SRV_E_COUNT] = {
    [SRV_OK] = {200, "ok"},
    [SRV_E_BAD_JSON] = {400, "bad_json"},
    [SRV_E_BAD_REQUEST] = {400, "bad_request"},
    [SRV_E_BAD_VALUE] = {400, "bad_value"},
    [SRV_E_SHAPE] = {400, "shape_mismatch"},
    [SRV_E_UNKNOWN_FIELD] = {400, "unknown_field"},
    [SRV_E_MISSING_FIELD] = {400, "missing_field"},
    [SRV_E_BAD_NAME] = {400, "bad_name"},
    [SRV_E_UNAUTHORIZED] = {401, "unauthorized"},
    [SRV_E_FORBIDDEN] = {403, "forbidden"},
    [SRV_E_NOT_FOUND] = {404, "not_found"},
    [SRV_E_LAYER_NOT_FOUND] = {404, "layer_not_found"},
    [SRV_E_METHOD] = {405, "method_not_allowed"},
    [SRV_E_CONFLICT] = {409, "conflict"},
    [SRV_E_LENGTH_REQUIRED] = {411, "length_required"},
    [SRV_E_TIMEOUT] = {408, "request_timeout"},
    [SRV_E_TOO_LARGE] = {413, "too_large"},
    [SRV_E_MEDIA_TYPE] = {415, "unsupported_media_type"},
    [SRV_E_INVALID_CONFIG] = {422, "invalid_config"},
    [SRV_E_INTERNAL] = {500, "internal"},
    [SRV_E_NOMEM] = {503, "out_of_memory"},
    [SRV_E_UNAVAILABLE] = {503, "unavailable"},
    [SRV_E_NOT_IMPLEMENTED] = {501, "not_implemented"},
    [SRV_E_URI_TOO_LONG] = {414, "uri_too_long"},
    [SRV_E_INSUFFICIENT_STORAGE] = {507, "insufficient_storage"},
    [SRV_E_TOO_COSTLY] = {413, "too_costly"},
    [SRV_E_CANCELLED] = {499, "client_closed_request"},
};

int srv_error_status(srv_code code)
{
    if ((int)code < 0 || code >= SRV_E_COUNT)
        return 500;
    return srv_error_table[code].status;
}

const char *srv_error_name(srv_code code)
{
    if ((int)code < 0 || code >= SRV_E_COUNT)
        return "internal";
    return srv_error_table[code].name;
}

/* Copies src into dst[cap] (cap >= 4). When src does not fit, the copy is cut back to a UTF-8
 * character boundary and ends with "...", so it stays valid UTF-8 and shows it was cut. */
static void srv_error_copy(char *dst, size_t cap, const char *src, size_t len)
{
    if (len < cap) {
        memcpy(dst, src, len);
        dst[len] = '\0';
        return;
    }
    size_t n = cap - 4; /* room for "..." and the NUL */
    while (n > 0 && ((unsigned char)src[n] & 0xC0) == 0x80)
        n--; /* src[n] would be the first byte left out: never split a character */
    memcpy(dst, src, n);
    memcpy(dst + n, "...", 4);
}

int srv_error_setv(srv_error *err, srv_code code, const char *field, const char *fmt, va_list ap)
{
    if (!err || err->code != SRV_OK)
        return -1;
    err->code = code;
    if (!field)
        field = "";
    srv_error_copy(err->field, sizeof err->field, field, strlen(field));
    char tmp[1024];
    int n = vsnprintf(tmp, sizeof tmp, fmt ? fmt : "", ap);
    if (n < 0)
        n = 0;
    size_t len = (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1;
    srv_error_copy(err->message, sizeof err->message, tmp, len);
    return -1;
}

int srv_error_set(srv_error *err, srv_code code, const char *field, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    srv_error_setv(err, code, field, fmt, ap);
    va_end(ap);
    return -1;
}

int srv_error_from_mha(srv_error *err, const mha_error *e, const char *prefix)
{
    if (e->status == MHA_OK) /* the engine recorded nothing: leave err to the caller's own error */
        return -1;
    srv_code code;
    switch (e->status) {
    case MHA_ERR_CONFIG:
        code = SRV_E_INVALID_CONFIG;
        break;
    case MHA_ERR_SHAPE:
        code = SRV_E_SHAPE;
        break;
    case MHA_ERR_VALUE:
        code = SRV_E_BAD_VALUE;
        break;
    case MHA_ERR_PARAM:
        code = SRV_E_UNKNOWN_FIELD;
        break;
    case MHA_ERR_LIMIT:
        code = SRV_E_TOO_LARGE;
        break;
    case MHA_ERR_NOMEM:
        code = SRV_E_NOMEM;
        break;
    case MHA_ERR_CANCELLED:
        code = SRV_E_CANCELLED;
        break;
    default:
        code = SRV_E_INTERNAL;
        break;
    }
    char field[sizeof err->field];
    snprintf(field, sizeof field, "%s%s", e->field[0] ? prefix : "", e->field);
    return srv_error_set(err, code, field, "%s", e->message[0] ? e->message : mha_status_name(e->status));
}
