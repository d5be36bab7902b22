/*
 * v2_schema.c - Triton's schema notation read as written, and bodies checked against it (see
 * v2_schema.h).
 */
#include "v2_schema.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_SCHEMAS 32

typedef struct text {
    char *p;
    size_t len, cap;
} text;

static void put(text *t, const char *s, size_t n)
{
    if (t->len + n + 1 > t->cap) {
        t->cap = (t->len + n + 1) * 2;
        t->p = realloc(t->p, t->cap);
    }
    memcpy(t->p + t->len, s, n);
    t->len += n;
    t->p[t->len] = '\0';
}

/* Drops every comma that only comes before a closing '}' or ']' (left by an ellipsis, or written
 * so in the document), outside strings. */
static void drop_dangling_commas(text *t)
{
    size_t w = 0;
    bool in_str = false;
    for (size_t r = 0; r < t->len; r++) {
        char c = t->p[r];
        if (in_str) {
            if (c == '\\' && r + 1 < t->len)
                t->p[w++] = t->p[r++];
            else if (c == '"')
                in_str = false;
        } else if (c == '"') {
            in_str = true;
        } else if (c == ',') {
            size_t k = r + 1;
            while (k < t->len && isspace((unsigned char)t->p[k]))
                k++;
            if (k < t->len && (t->p[k] == '}' || t->p[k] == ']'))
                continue;
        }
        t->p[w++] = t->p[r];
    }
    t->len = w;
    if (t->p)
        t->p[w] = '\0';
}

json_t *v2_schema_parse(const char *s, char name[64])
{
    while (isspace((unsigned char)*s))
        s++;
    if (*s != '$')
        return NULL;
    size_t n = 1;
    while (isalnum((unsigned char)s[n]) || s[n] == '_')
        n++;
    if (n >= 64)
        return NULL;
    memcpy(name, s, n);
    name[n] = '\0';
    s += n;
    while (isspace((unsigned char)*s))
        s++;
    if (*s++ != '=')
        return NULL;

    text t = {0};
    size_t last_string_end = (size_t)-1, last_key_end = (size_t)-1;
    put(&t, "", 0);
    while (*s) {
        if (*s == '"') { /* a string: copied as it is */
            const char *e = s + 1;
            while (*e && *e != '"')
                e += e[0] == '\\' && e[1] ? 2 : 1;
            if (!*e)
                break;
            put(&t, s, (size_t)(e - s + 1));
            last_string_end = t.len - 1;
            s = e + 1;
        } else if (*s == ':') {
            last_key_end = last_string_end;
            put(&t, s++, 1);
        } else if (*s == '$') { /* a placeholder: as a string */
            size_t k = 1;
            while (isalnum((unsigned char)s[k]) || s[k] == '_')
                k++;
            put(&t, "\"", 1);
            put(&t, s, k);
            put(&t, "\"", 1);
            last_string_end = t.len - 1;
            s += k;
        } else if (*s == '#') { /* "#optional": the last key may be left out */
            size_t k = 1;
            while (isalpha((unsigned char)s[k]))
                k++;
            if (k == 9 && strncmp(s, "#optional", 9) == 0 && last_key_end != (size_t)-1) {
                put(&t, " ", 1); /* room for the '?' */
                memmove(t.p + last_key_end + 1, t.p + last_key_end, t.len - 1 - last_key_end);
                t.p[last_key_end] = '?';
            }
            s += k;
        } else if (strncmp(s, "...", 3) == 0) {
            s += 3;
        } else if (strncmp(s, "\xE2\x80\xA6", 3) == 0) { /* … */
            s += 3;
        } else {
            put(&t, s++, 1);
        }
    }
    drop_dangling_commas(&t);
    json_error_t je;
    json_t *j = json_loads(t.p, JSON_DECODE_ANY, &je);
    free(t.p);
    return j;
}

typedef struct ctx {
    char names[MAX_SCHEMAS][64];
    json_t *schemas[MAX_SCHEMAS];
    int n;
    bool example; /* lenient about fields the template does not name */
    char *why;
    size_t size;
    int depth;
} ctx;

static bool fail(ctx *c, const char *path, const char *fmt, ...)
{
    char msg[256];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(c->why, c->size, "%s: %s", path[0] ? path : "(body)", msg);
    return false;
}

static const char *type_name(const json_t *j)
{
    switch (json_typeof(j)) {
    case JSON_OBJECT:
        return "an object";
    case JSON_ARRAY:
        return "an array";
    case JSON_STRING:
        return "a string";
    case JSON_INTEGER:
    case JSON_REAL:
        return "a number";
    case JSON_TRUE:
    case JSON_FALSE:
        return "a boolean";
    default:
        return "null";
    }
}

static bool check(ctx *c, const json_t *tmpl, const json_t *body, const char *path);

/* A placeholder: a JSON type, or the name of another schema of the document. */
static bool check_placeholder(ctx *c, const char *ph, const json_t *body, const char *path)
{
    bool ok;
    if (!strcmp(ph, "$string"))
        ok = json_is_string(body);
    else if (!strcmp(ph, "$number"))
        ok = json_is_number(body);
    else if (!strcmp(ph, "$boolean"))
        ok = json_is_boolean(body);
    else if (!strcmp(ph, "$object") || !strcmp(ph, "$parameters")) /* KServe's parameters map */
        ok = json_is_object(body);
    else if (!strcmp(ph, "$array"))
        ok = json_is_array(body);
    else {
        for (int i = 0; i < c->n; i++)
            if (!strcmp(c->names[i], ph)) {
                if (++c->depth > 16)
                    return fail(c, path, "schema %s nests too deep", ph);
                bool r = check(c, c->schemas[i], body, path);
                c->depth--;
                return r;
            }
        return fail(c, path, "the document names no schema %s", ph);
    }
    return ok ? true : fail(c, path, "is %s, the document says %s", type_name(body), ph);
}

static bool check(ctx *c, const json_t *tmpl, const json_t *body, const char *path)
{
    char sub[512];
    if (json_is_string(tmpl) && json_string_value(tmpl)[0] == '$' && !c->example)
        return check_placeholder(c, json_string_value(tmpl), body, path);
    if (json_is_object(tmpl)) {
        if (!json_is_object(body))
            return fail(c, path, "is %s, the document shows an object", type_name(body));
        const json_t *map = json_object_get(tmpl, "$string");
        if (map && json_object_size(tmpl) == 1 && !c->example) { /* { $string : $x, ... } */
            const char *k;
            const json_t *v;
            json_object_foreach((json_t *)body, k, v)
            {
                snprintf(sub, sizeof sub, "%s.%s", path, k);
                if (!check(c, map, v, sub))
                    return false;
            }
            return true;
        }
        const char *k;
        const json_t *v;
        json_object_foreach((json_t *)tmpl, k, v)
        {
            char key[128];
            snprintf(key, sizeof key, "%s", k);
            size_t kl = strlen(key);
            bool optional = kl > 0 && key[kl - 1] == '?';
            if (optional)
                key[kl - 1] = '\0';
            snprintf(sub, sizeof sub, "%s%s%s", path, path[0] ? "." : "", key);
            const json_t *got = json_object_get(body, key);
            if (!got) {
                if (optional)
                    continue;
                return fail(c, path, "missing \"%s\"", key);
            }
            if (!check(c, v, got, sub))
                return false;
        }
        if (!c->example)
            json_object_foreach((json_t *)body, k, v)
            {
                char opt[130];
                snprintf(opt, sizeof opt, "%s?", k);
                if (!json_object_get(tmpl, k) && !json_object_get(tmpl, opt))
                    return fail(c, path, "has \"%s\", which the document does not name", k);
            }
        return true;
    }
    if (json_is_array(tmpl)) {
        if (!json_is_array(body))
            return fail(c, path, "is %s, the document shows an array", type_name(body));
        const json_t *elem = json_array_get(tmpl, 0);
        if (!elem)
            return true;
        size_t i;
        const json_t *v;
        json_array_foreach((json_t *)body, i, v)
        {
            snprintf(sub, sizeof sub, "%s[%zu]", path, i);
            if (!check(c, elem, v, sub))
                return false;
        }
        return true;
    }
    /* a concrete value of an example: the same JSON type */
    bool same = json_is_number(tmpl)    ? json_is_number(body)
                : json_is_boolean(tmpl) ? json_is_boolean(body)
                                        : json_typeof(tmpl) == json_typeof(body);
    return same ? true
                : fail(c, path, "is %s, the document shows %s", type_name(body), type_name(tmpl));
}

bool v2_schema_check(const char *const *texts, int n, const char *root, const json_t *body,
                     char *why, size_t size)
{
    ctx c = {.why = why, .size = size};
    why[0] = '\0';
    bool ok = true;
    for (int i = 0; i < n && i < MAX_SCHEMAS && ok; i++) {
        c.schemas[c.n] = v2_schema_parse(texts[i], c.names[c.n]);
        if (!c.schemas[c.n]) {
            snprintf(why, size, "cannot read the schema text %.60s", texts[i]);
            ok = false;
        } else {
            c.n++;
        }
    }
    if (ok)
        ok = check_placeholder(&c, root, body, "");
    for (int i = 0; i < c.n; i++)
        json_decref(c.schemas[i]);
    return ok;
}

bool v2_example_check(const char *example, const json_t *body, char *why, size_t size)
{
    ctx c = {.why = why, .size = size, .example = true};
    why[0] = '\0';
    json_error_t je;
    json_t *tmpl = json_loads(example, JSON_DECODE_ANY, &je);
    if (!tmpl) {
        snprintf(why, size, "cannot read the example: %s (line %d)", je.text, je.line);
        return false;
    }
    bool ok = check(&c, tmpl, body, "");
    json_decref(tmpl);
    return ok;
}
