/*
 * accept.c - an Accept header's quality for one media type (see accept.h).
 */
#include "accept.h"

#include <stdbool.h>
#include <string.h>
#include <strings.h>

/* RFC 9110 5.6.2 tchar */
static bool is_tchar(char c)
{
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
           (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

static const char *skip_ows(const char *p)
{
    while (*p == ' ' || *p == '\t')
        p++;
    return p;
}

static const char *skip_token(const char *p)
{
    while (is_tchar(*p))
        p++;
    return p;
}

/* A quoted-string at p (RFC 9110 5.6.4): returns the byte after its closing quote, or NULL. */
static const char *skip_quoted(const char *p)
{
    for (p++; *p && *p != '"'; p++)
        if (*p == '\\' && !*++p)
            return NULL;
    return *p == '"' ? p + 1 : NULL;
}

/* A qvalue "0[.ddd]" or "1[.000]" in [p, end): its thousandths, or -1. */
static int qvalue(const char *p, const char *end)
{
    if (p == end || (*p != '0' && *p != '1'))
        return -1;
    int q = (*p - '0') * 1000, scale = 100;
    if (++p == end)
        return q;
    if (*p++ != '.' || end - p > 3)
        return -1;
    for (; p < end; p++, scale /= 10) {
        if (*p < '0' || *p > '9' || (q == 1000 && *p != '0'))
            return -1;
        q += (*p - '0') * scale;
    }
    return q;
}

/* One member at *s: whether it is well-formed; *type / *tlen its media range, *q its weight.
 * *s moves to the comma that ends it (or the end), well-formed or not. */
static bool member(const char **s, const char **type, size_t *tlen, int *q)
{
    const char *p = *s;
    bool ok = true;
    *q = 1000;
    *type = p;
    p = skip_token(p);
    if (p == *type || *p != '/')
        ok = false;
    else {
        const char *sub = ++p;
        p = skip_token(p);
        ok = p > sub;
    }
    *tlen = (size_t)(p - *type);
    while (ok) {
        p = skip_ows(p);
        if (*p != ';')
            break;
        p = skip_ows(p + 1);
        if (*p == ';' || *p == ',' || !*p)
            continue; /* an empty parameter */
        const char *name = p;
        p = skip_token(p);
        size_t nlen = (size_t)(p - name);
        if (nlen == 0 || *p != '=') {
            ok = false;
            break;
        }
        const char *val = ++p;
        p = *p == '"' ? skip_quoted(p) : skip_token(p);
        if (!p || p == val) {
            ok = false;
            p = p ? p : val;
            break;
        }
        if (nlen == 1 && (*name == 'q' || *name == 'Q') && (*q = qvalue(val, p)) < 0)
            ok = false;
    }
    p = skip_ows(p);
    if (*p && *p != ',')
        ok = false;
    /* to the end of the member: a comma outside quotes */
    while (*p && *p != ',') {
        const char *e = *p == '"' ? skip_quoted(p) : NULL;
        p = e ? e : p + 1;
    }
    *s = p;
    return ok;
}

int srv_accept_quality(const char *accept, const char *type, int *pos)
{
    size_t want = strlen(type);
    const char *s = accept ? accept : "";
    for (int i = 0;;) {
        while (*s == ',' || *s == ' ' || *s == '\t')
            s++; /* blanks and empty members */
        if (!*s)
            return -1;
        const char *t;
        size_t tlen;
        int q;
        bool ok = member(&s, &t, &tlen, &q);
        if (ok && tlen == want && strncasecmp(t, type, want) == 0) {
            if (pos)
                *pos = i;
            return q;
        }
        i++;
    }
}
