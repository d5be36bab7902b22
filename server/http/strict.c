/*
 * strict.c - the request line and headers held to what RFC 9110 and RFC 9112 say a server MUST
 * refuse, before a request is routed (see http_internal.h).
 *
 * libmicrohttpd 0.9.75 (Debian bookworm's) takes much of that kindly: a NUL byte in the target ends
 * the C string it hands over ("DELETE /v1/layers/victim<NUL>/../other" arrives as
 * "/v1/layers/victim"), a NUL in a header value cuts the value short, control bytes, spaces and any
 * method pass through, two Host headers and whitespace before a header's colon are accepted (its
 * MHD_OPTION_STRICT_FOR_CLIENT refuses the last only at -1, where it is lax about the rest; newer
 * versions have MHD_OPTION_CLIENT_DISCIPLINE_LVL, bookworm's has not), and a query of a few
 * thousand arguments fills the connection's memory pool while the target is parsed and leaves the
 * request hanging until --header-timeout. So:
 *
 *   - the target is looked at in libmicrohttpd's URI log callback (srv_http_on_target), which it
 *     calls with the request line's target as received, before it splits the query, decodes
 *     percent-escapes or hands it to anyone: a control byte, DEL or a space in it is a 400
 *     (RFC 9112 3.2: no whitespace; a control byte has no place in a URI, RFC 3986 2), and a query
 *     of more than SRV_HTTP_MAX_QUERY_ARGS arguments is cut off there (libmicrohttpd then parses
 *     none of it) and answered 414 at once;
 *   - NUL bytes cannot be seen in C strings, so they are found from where the pieces sit in
 *     libmicrohttpd's read buffer: it parses the request line and header lines in place, writing a
 *     NUL over each separator (the space after the method and before the version, each header's
 *     colon, each line's CR LF), so the bytes between the end of one piece's string and the start of
 *     the next are all NULs, and no more than its separators, unless the client sent a NUL there.
 *     That layout is checked before it is trusted (the target's pointer is the one the log callback
 *     saw, the version sits after it, the header block spans MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE
 *     bytes from the method); where it does not hold, the NUL checks are skipped rather than guessed.
 *     A folded header line (obs-fold) is copied elsewhere by libmicrohttpd and fails the same check:
 *     RFC 9112 5.2 lets a server refuse it with 400. A NUL that is the very last byte of a header line
 *     sent with a bare LF cannot be told from the CR of a CR LF, and changes nothing of what is read;
 *   - the method must be a token (RFC 9110 9.1, 5.6.2), every header name a token (so "Host : x",
 *     whitespace before the colon, is a 400: RFC 9112 5.1), every header value free of control bytes
 *     but tab (RFC 9110 5.5), and Host given once (RFC 9112 3.2).
 * Each answer names what is wrong and where (the byte and its offset), never echoing the bytes.
 */
#include "http_internal.h"

#include <stdio.h>
#include <string.h>
#include <strings.h>

/* RFC 9110 5.6.2: tchar = "!" / "#" / "$" / "%" / "&" / "'" / "*" / "+" / "-" / "." / "^" / "_"
 * / "`" / "|" / "~" / DIGIT / ALPHA */
static bool is_tchar(unsigned char ch)
{
    return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
           (ch && strchr("!#$%&'*+-.^_`|~", ch));
}

/* Index of the first byte of s[0, n) that is not a tchar, or n. */
static size_t token_end(const char *s, size_t n)
{
    size_t i = 0;
    while (i < n && is_tchar((unsigned char)s[i]))
        i++;
    return i;
}

void srv_http_target_seen(req_ctx *c, const char *uri)
{
    c->target = uri;
    c->target_len = uri ? strlen(uri) : 0;
    c->target_bad = -1;
    for (size_t i = 0; i < c->target_len; i++) {
        unsigned char ch = (unsigned char)uri[i];
        if (ch <= 0x20 || ch == 0x7f) {
            c->target_bad = ch;
            c->target_bad_at = i;
            break;
        }
    }
    const char *q = uri ? memchr(uri, '?', c->target_len) : NULL;
    if (!q || !q[1])
        return;
    int args = 1;
    for (const char *p = q + 1; *p; p++)
        args += *p == '&';
    c->query_args = args;
    if (args > SRV_HTTP_MAX_QUERY_ARGS) {
        /* libmicrohttpd parses the query from the byte after the '?' once this callback returns,
         * one pool allocation per argument; the target is its own writable buffer (the const is the
         * callback's signature, not the memory's), and an empty query there makes it parse none. */
        ((char *)q)[1] = '\0';
    }
}

/* What walking the header block found. */
typedef struct header_walk {
    const char *lo, *hi;   /* the header block, [method, method + header size)             */
    const char *prev_end;  /* end of the last piece's string; NULL: layout not checked      */
    int hosts;
    bool nul;              /* bytes between two pieces that are not only their separators   */
    const char *bad_name;  /* a header name that is not a token                            */
    const char *ctl_name;  /* a header whose value holds a control byte                     */
    unsigned char ctl;
    size_t ctl_at;
} header_walk;

/* True when [end, next) holds only NULs, at least lo_n and at most hi_n of them, inside the block. */
static bool only_separators(const header_walk *w, const char *end, const char *next, size_t lo_n,
                            size_t hi_n)
{
    if (end < w->lo || next > w->hi || next < end)
        return false;
    size_t n = (size_t)(next - end);
    if (n < lo_n || n > hi_n)
        return false;
    for (size_t i = 0; i < n; i++)
        if (end[i])
            return false;
    return true;
}

static enum MHD_Result walk_header(void *cls, enum MHD_ValueKind kind, const char *key,
                                   size_t key_size, const char *value, size_t value_size)
{
    header_walk *w = cls;
    if (key_size == 0 || token_end(key, key_size) != key_size) {
        if (!w->bad_name)
            w->bad_name = key;
    }
    if (key_size == 4 && strncasecmp(key, "Host", 4) == 0)
        w->hosts++;
    for (size_t i = 0; value && i < value_size && !w->ctl_name; i++) {
        unsigned char ch = (unsigned char)value[i];
        if ((ch < 0x20 && ch != '\t') || ch == 0x7f) {
            w->ctl_name = key;
            w->ctl = ch;
            w->ctl_at = i;
        }
    }
    if (w->prev_end) {
        /* the previous line's end (CR LF or LF, as NULs) and nothing else before this name; then
         * this name's colon, any blanks, and the value */
        if (!only_separators(w, w->prev_end, key, 1, 2) || !value || value < key + key_size + 1 ||
            value > w->hi || !only_separators(w, key + key_size, key + key_size + 1, 1, 1))
            w->nul = true;
        else
            w->prev_end = value + value_size;
    }
    return MHD_YES;
}

/* Copies name into out[size] with every byte outside printable ASCII as '?' (for a message). */
static const char *printable(char *out, size_t size, const char *name)
{
    size_t i = 0;
    for (; name[i] && i + 1 < size; i++)
        out[i] = (unsigned char)name[i] < 0x20 || (unsigned char)name[i] >= 0x7f ? '?' : name[i];
    out[i] = '\0';
    return out;
}

int srv_http_check_syntax(req_ctx *c, const char *method, const char *url, const char *version,
                          srv_error *err)
{
    struct MHD_Connection *conn = c->req.conn;
    size_t mlen = strlen(method), bad = token_end(method, mlen);
    if (mlen == 0 || bad != mlen)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "method",
                             "the method holds byte 0x%02x at offset %zu, which is not a token "
                             "character (RFC 9110 9.1)",
                             (unsigned char)method[bad], bad);
    if (c->target_bad >= 0)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "target",
                             "the request target holds %s (byte 0x%02x at offset %zu); send it "
                             "percent-encoded (RFC 9112 3.2)",
                             c->target_bad == ' ' ? "a space" : "a control character",
                             c->target_bad, c->target_bad_at);
    if (c->query_args > SRV_HTTP_MAX_QUERY_ARGS)
        return srv_error_set(err, SRV_E_URI_TOO_LONG, "target",
                             "the query has %d arguments; at most %d are read", c->query_args,
                             SRV_HTTP_MAX_QUERY_ARGS);

    /* The layout this file relies on (see the top): the target where the log callback saw it,
     * then the version, all inside the header block that starts at the method. */
    header_walk w = {0};
    const union MHD_ConnectionInfo *info =
        MHD_get_connection_info(conn, MHD_CONNECTION_INFO_REQUEST_HEADER_SIZE);
    size_t vlen = strlen(version);
    if (info && c->target && url == c->target && method < url && version > url &&
        (size_t)(version - method) < info->header_size) {
        w.lo = method;
        w.hi = method + info->header_size;
        /* method, its space, any more spaces (libmicrohttpd skips them), the target; the target's
         * string, then the space before the version */
        const char *p = method + mlen;
        bool sep = p < url && *p == '\0';
        for (p++; sep && p < url; p++)
            sep = *p == ' ';
        if (!sep || (size_t)(version - 1 - url) != c->target_len || version[-1] != '\0')
            return srv_error_set(err, SRV_E_BAD_REQUEST, "target",
                                 "the request line holds a NUL byte (RFC 9112 2.2)");
        w.prev_end = version + vlen;
    }
    MHD_get_connection_values_n(conn, MHD_HEADER_KIND, walk_header, &w);
    char name[48];
    if (w.bad_name)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "header",
                             "the header name '%s' is not a token: no whitespace before the colon, "
                             "no control characters (RFC 9112 5.1, RFC 9110 5.1)",
                             printable(name, sizeof name, w.bad_name));
    if (w.ctl_name)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "header",
                             "the value of header '%s' holds a control character (byte 0x%02x at "
                             "offset %zu; RFC 9110 5.5)",
                             printable(name, sizeof name, w.ctl_name), w.ctl, w.ctl_at);
    /* the last line's end and the empty line's (each CR LF or LF) close the block */
    if (w.nul || (w.prev_end && !only_separators(&w, w.prev_end, w.hi, 2, 4)))
        return srv_error_set(err, SRV_E_BAD_REQUEST, "header",
                             "a header line holds a NUL byte, or is folded onto the next line "
                             "(RFC 9110 5.5, RFC 9112 5.2)");
    if (w.hosts > 1)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "Host",
                             "the request has %d Host headers; send one (RFC 9112 3.2)", w.hosts);
    return 0;
}
