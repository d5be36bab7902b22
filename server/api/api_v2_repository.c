/*
 * api_v2_repository.c - Triton's model repository extension: POST /v2/repository/index,
 * POST /v2/repository/models/{name}/load and .../unload (see api_v2.h).
 *
 * The repository is the data dir (or, without one, the layers in memory); a model is a layer. The
 * index lists every layer the daemon knows of: served (READY), unloaded (UNAVAILABLE, "unloaded"),
 * damaged in the data dir (UNAVAILABLE, and why: the reason /readyz gives, which describes the
 * problem without quoting the file or naming server paths), and in the data dir but not read yet
 * (UNAVAILABLE, "not loaded": written there after start, without --watch). Load and unload go
 * through the store (store/persist.h, srv_persist_load and srv_persist_unload), which say what each
 * does with files, memory and --watch.
 *
 * Bodies are small JSON objects, or empty (Triton's Python client sends "" to the index and {} to
 * load). Load refuses Triton's "config" and "file:..." overrides: a layer comes from the data dir
 * or from PUT /v1/layers/{name}.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_v2.h"
#include "app/app.h"
#include "store/datadir.h"

/* Repository requests are a few parameters: anything bigger is not one. */
#define REPO_BODY_MAX 65536

/* The body as a JSON object (new reference; NULL with *err set, or NULL and no error for an empty
 * body). */
static json_t *repo_body(const srv_request *req, const char *what, srv_error *err)
{
    size_t n = req->body_len;
    const char *b = req->body;
    while (n && (*b == ' ' || *b == '\t' || *b == '\r' || *b == '\n'))
        b++, n--;
    if (n == 0)
        return NULL;
    if (req->body_len > REPO_BODY_MAX) {
        srv_error_set(err, SRV_E_TOO_LARGE, "", "a %s request of %zu bytes; it takes at most %d",
                      what, req->body_len, REPO_BODY_MAX);
        return NULL;
    }
    json_error_t je;
    json_t *j = json_loadb(req->body, req->body_len, JSON_REJECT_DUPLICATES, &je);
    if (!j)
        srv_error_set(err, SRV_E_BAD_JSON, "", "the %s request is not valid JSON: %s (line %d)",
                      what, je.text, je.line);
    else if (!json_is_object(j))
        srv_error_set(err, SRV_E_BAD_REQUEST, "", "the %s request must be a JSON object", what);
    if (err->code != SRV_OK) {
        json_decref(j);
        return NULL;
    }
    return j;
}

/* Checks that body has only the members of allowed (a space-separated list). */
static int only_members(const json_t *body, const char *allowed, const char *what, srv_error *err)
{
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)body, k, v)
    {
        char word[80];
        snprintf(word, sizeof word, " %.64s ", k);
        if (!strstr(allowed, word))
            return srv_error_set(err, SRV_E_UNKNOWN_FIELD, k,
                                 "unknown member '%.64s' in the %s "
                                 "request; it takes:%s",
                                 k, what, allowed);
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* Index                                                                                          */

enum { READY, UNLOADED, DAMAGED, NOT_LOADED }; /* by precedence: a name shows its first state */

typedef struct repo_entry {
    char name[256];
    int state;
    uint64_t version; /* 0: none to show */
    char reason[sizeof((srv_error *)0)->message];
} repo_entry;

typedef struct repo_list {
    repo_entry *e;
    int n, cap;
    bool failed;
} repo_list;

static repo_entry *add(repo_list *l, const char *name, int state, uint64_t version,
                       const char *reason)
{
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 32;
        repo_entry *g = realloc(l->e, (size_t)cap * sizeof *g);
        if (!g) {
            l->failed = true;
            return NULL;
        }
        l->e = g;
        l->cap = cap;
    }
    repo_entry *e = &l->e[l->n++];
    snprintf(e->name, sizeof e->name, "%s", name);
    e->state = state;
    e->version = version;
    snprintf(e->reason, sizeof e->reason, "%s", reason);
    return e;
}

static int by_name_then_state(const void *a, const void *b)
{
    const repo_entry *x = a, *y = b;
    int c = strcmp(x->name, y->name);
    return c ? c : x->state - y->state;
}

/* Every layer the daemon knows of, one entry per name (its first state), sorted by name. */
static int collect(srv_app *app, repo_list *l)
{
    srv_layer **served;
    int n = srv_registry_list(app->registry, &served);
    for (int i = 0; i < n; i++)
        add(l, served[i]->name, READY, served[i]->version, "");
    srv_registry_list_free(served, n);
    l->failed |= n < 0;

    srv_unloaded *unloaded;
    n = srv_registry_unloaded(app->registry, &unloaded);
    for (int i = 0; i < n; i++)
        add(l, unloaded[i].name, UNLOADED, unloaded[i].version, "unloaded");
    srv_unloaded_free(unloaded, n);
    l->failed |= n < 0;

    srv_damaged *damaged;
    n = srv_persist_damaged_list(app->persist, &damaged);
    for (int i = 0; i < n; i++)
        add(l, damaged[i].name, DAMAGED, 0, damaged[i].reason);
    free(damaged);
    l->failed |= n < 0;

    if (app->persist->dd) {
        srv_dd_entry *disk = NULL;
        srv_error e = {0};
        n = srv_datadir_list(app->persist->dd, &disk, &e);
        for (int i = 0; i < n; i++)
            add(l, disk[i].name, NOT_LOADED, 0,
                "not loaded: in the data dir, not read since it was written there (load it)");
        free(disk);
    }
    if (l->failed)
        return -1;
    if (l->n)
        qsort(l->e, (size_t)l->n, sizeof *l->e, by_name_then_state);
    /* one per name: the first state; a damaged file's reason wins over the default one (a layer
     * still served, or unloaded, whose files changed and cannot be read says so) */
    int w = 0;
    for (int r = 0; r < l->n; r++) {
        if (w > 0 && !strcmp(l->e[w - 1].name, l->e[r].name)) {
            if (l->e[r].state == DAMAGED)
                memcpy(l->e[w - 1].reason, l->e[r].reason, sizeof l->e[r].reason);
            continue;
        }
        l->e[w++] = l->e[r];
    }
    l->n = w;
    return 0;
}

int srv_v2_repository_index(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    srv_app *app = ctx;
    json_t *body = repo_body(req, "index", err);
    if (!body && err->code != SRV_OK)
        return -1;
    bool ready_only = false;
    if (body) {
        const json_t *ready = json_object_get(body, "ready");
        int rc = only_members(body, " ready ", "index", err);
        if (rc == 0 && ready && !json_is_boolean(ready))
            rc = srv_error_set(err, SRV_E_BAD_REQUEST, "ready", "\"ready\" must be true or false");
        ready_only = json_is_true(ready);
        json_decref(body);
        if (rc < 0)
            return -1;
    }
    repo_list l = {0};
    if (collect(app, &l) < 0) {
        free(l.e);
        return srv_error_set(err, SRV_E_NOMEM, "", "out of memory listing the repository");
    }
    srv_buf *b = &resp->body;
    srv_buf_putc(b, '[');
    bool first = true;
    for (int i = 0; i < l.n; i++) {
        const repo_entry *e = &l.e[i];
        if (ready_only && e->state != READY)
            continue;
        srv_buf_puts(b, first ? "{\"name\":" : ",{\"name\":");
        first = false;
        srv_buf_json_string(b, e->name);
        if (e->version)
            srv_buf_printf(b, ",\"version\":\"%" PRIu64 "\"", e->version);
        srv_buf_printf(
            b, ",\"state\":\"%s\",\"reason\":", e->state == READY ? "READY" : "UNAVAILABLE");
        srv_buf_json_string(b, e->reason);
        srv_buf_putc(b, '}');
    }
    srv_buf_putc(b, ']');
    free(l.e);
    return b->failed ? srv_error_set(err, SRV_E_NOMEM, "", "out of memory writing the index") : 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* Load and unload                                                                                */

/* Reads the body of a load or unload: nothing, {} or {"parameters": {...}} with only the
 * parameters attnd takes. */
static int control_body(const srv_request *req, bool load, srv_error *err)
{
    const char *what = load ? "load" : "unload";
    json_t *body = repo_body(req, what, err);
    if (!body)
        return err->code != SRV_OK ? -1 : 0;
    int rc = only_members(body, " parameters ", what, err);
    const json_t *params = json_object_get(body, "parameters");
    if (rc == 0 && params && !json_is_object(params))
        rc =
            srv_error_set(err, SRV_E_BAD_REQUEST, "parameters", "\"parameters\" must be an object");
    const char *k;
    const json_t *v;
    json_object_foreach((json_t *)params, k, v)
    {
        if (rc < 0)
            break;
        if (load && (!strcmp(k, "config") || !strncmp(k, "file:", 5)))
            rc = srv_error_set(err, SRV_E_BAD_REQUEST, k,
                               "attnd loads a layer from its data dir and takes no '%.64s' "
                               "override; to create or replace a layer from a config and weights, "
                               "PUT /v1/layers/{name}",
                               k);
        else if (!load && !strcmp(k, "unload_dependents"))
            rc = json_is_boolean(v) ? 0 /* attnd's models have no dependents */
                                    : srv_error_set(err, SRV_E_BAD_REQUEST, k,
                                                    "unload_dependents must be true or false");
        else
            rc = srv_error_set(err, SRV_E_UNKNOWN_FIELD, k,
                               "unknown parameter '%.64s' for %s; it takes %s", k, what,
                               load ? "none" : "unload_dependents");
    }
    json_decref(body);
    return rc;
}

int srv_v2_repository_load(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    srv_app *app = ctx;
    const char *name = srv_request_param(req, "name");
    if (!srv_layer_name_valid(name, err) || control_body(req, true, err) < 0)
        return -1;
    srv_error e = {0};
    if (srv_persist_load(app->persist, app->registry, name, &app->limits, &e) < 0) {
        /* the protocol's load failure is a 400, whatever the file's problem; only running out of
         * memory, or a busy disk, is worth a retry */
        srv_code code =
            e.code == SRV_E_NOMEM || e.code == SRV_E_UNAVAILABLE ? e.code : SRV_E_BAD_REQUEST;
        return srv_error_set(err, code, "name", "failed to load '%s': %s", name, e.message);
    }
    srv_buf_puts(&resp->body, "{}");
    return 0;
}

int srv_v2_repository_unload(void *ctx, const srv_request *req, srv_response *resp, srv_error *err)
{
    srv_app *app = ctx;
    const char *name = srv_request_param(req, "name");
    if (!srv_layer_name_valid(name, err) || control_body(req, false, err) < 0)
        return -1;
    /* a model that is not loaded (unknown, damaged, unloaded already): nothing to do, as Triton */
    if (srv_persist_unload(app->persist, app->registry, name) < 0)
        return srv_error_set(err, SRV_E_NOMEM, "", "out of memory unloading '%s'", name);
    srv_buf_puts(&resp->body, "{}");
    return 0;
}
