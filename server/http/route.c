/*
 * route.c - which route of the table a request is for, and its path placeholders (see http.h).
 *
 * {x} in a pattern matches one non-empty path segment. A path that matches a pattern with another
 * method is a 405 with Allow (HEAD is allowed wherever GET is); no pattern at all, a 404.
 */
#include <stdio.h>
#include <string.h>

#include "http.h"

/* Matches path against pattern; fills params (pointers into pathbuf, which is modified). */
static bool pattern_match(const char *pattern, const char *path, const char **params, int *nparams,
                          char *pathbuf, size_t pathbuf_size)
{
    *nparams = 0;
    size_t off = 0;
    const char *p = pattern, *s = path;
    while (*p && *s) {
        if (*p == '{') {
            const char *q = strchr(p, '}');
            size_t n = strcspn(s, "/");
            if (!q || n == 0 || *nparams >= SRV_MAX_PATH_PARAMS || off + n + 1 > pathbuf_size)
                return false;
            memcpy(pathbuf + off, s, n);
            pathbuf[off + n] = '\0';
            params[(*nparams)++] = pathbuf + off;
            off += n + 1;
            p = q + 1;
            s += n;
        } else if (*p++ != *s++) {
            return false;
        }
    }
    return *p == '\0' && *s == '\0';
}

const srv_route *srv_route_match(const srv_route *routes, const char *method, const char *path,
                                 srv_request *req, char *scratch, size_t scratch_size, char *allow,
                                 size_t allow_size, srv_error *err)
{
    const char *m = strcmp(method, "HEAD") == 0 ? "GET" : method;
    const char *params[SRV_MAX_PATH_PARAMS];
    int nparams;
    size_t alen = 0;
    allow[0] = '\0';
    const srv_route *matched = NULL; /* a route of the path, for another method */
    for (const srv_route *r = routes; r->method; r++) {
        if (!pattern_match(r->pattern, path, params, &nparams, scratch, scratch_size))
            continue;
        matched = r;
        if (!strcmp(r->method, m)) {
            memcpy(req->params, params, sizeof params);
            req->nparams = nparams;
            req->route = r;
            return r;
        }
        if (!strstr(allow, r->method) && alen + strlen(r->method) + 3 < allow_size)
            alen += (size_t)snprintf(allow + alen, allow_size - alen, "%s%s", alen ? ", " : "",
                                     r->method);
    }
    if (alen) {
        if (strstr(allow, "GET") && alen + 7 < allow_size)
            snprintf(allow + alen, allow_size - alen, ", HEAD");
        /* the method's routes one segment or more below this one (POST /v1/layers/x, which
         * forgot its /forward): named, so that the client sees where the method goes */
        char below[160] = "";
        size_t blen = 0, plen = strlen(matched->pattern);
        int nb = 0;
        for (const srv_route *r = routes; r->method; r++)
            if (!strcmp(r->method, m) && !strncmp(r->pattern, matched->pattern, plen) &&
                r->pattern[plen] == '/' && blen < sizeof below)
                blen += (size_t)snprintf(below + blen, sizeof below - blen, "%s%s",
                                         nb++ ? ", " : "", r->pattern + plen);
        srv_error_set(err, SRV_E_METHOD, "", "%s is not allowed on %s; allowed: %s%s%s%s%s",
                      method, path, allow, nb ? ". " : "", nb ? method : "",
                      nb ? " goes to its subpaths: " : "", below);
    } else {
        srv_error_set(err, SRV_E_NOT_FOUND, "", "no such path: %s", path);
    }
    return NULL;
}

const char *srv_request_param(const srv_request *req, const char *name)
{
    if (!req->route)
        return NULL;
    /* walk the pattern's placeholders in order */
    int idx = 0;
    size_t nlen = strlen(name);
    for (const char *p = req->route->pattern; (p = strchr(p, '{')) != NULL; idx++) {
        const char *q = strchr(p, '}');
        if (!q)
            break;
        if ((size_t)(q - p - 1) == nlen && !strncmp(p + 1, name, nlen))
            return idx < req->nparams ? req->params[idx] : NULL;
        p = q;
    }
    return NULL;
}
