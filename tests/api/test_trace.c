/*
 * test_trace.c - the trace says its layouts out loud and answers only what is asked.
 *
 * For a batch-first layer, a batch_first false layer and an unbatched query, with the weights
 * averaged and per head, with and without masks:
 *   - every stage has "axes", one letter of the legend N L S E H D per dimension of its shape;
 *   - output and attn_weights are forward's answer to the same request, shape and numbers (bit for
 *     bit: the same pass computes them);
 *   - the stages fit together as their axes say: q_heads is q_proj cut into heads, concat is the
 *     heads' outputs side by side, attn_weights is the softmax of scores (averaged over H when
 *     asked), k_proj/v_proj match k_heads/v_heads - read by axis name, so a stage laid out other
 *     than its axes say fails here;
 * and "stages": only those, in pipeline order, the same numbers as in a whole trace; the size limit
 * counting only them; an unknown name a 400 listing the known ones.
 */
#include "check.h"
#include "http_client.h"
#include "tensor_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mha.h"

typedef struct stage {
    char name[32];
    char axes[8];
    tj_tensor t;
} stage;

typedef struct trace {
    int n;
    stage s[MHA_TRACE_NSTAGES];
} trace;

static void trace_free(trace *tr)
{
    for (int i = 0; i < tr->n; i++)
        tj_free(&tr->s[i].t);
    tr->n = 0;
}

static const stage *find(const trace *tr, const char *name)
{
    for (int i = 0; i < tr->n; i++)
        if (!strcmp(tr->s[i].name, name))
            return &tr->s[i];
    return NULL;
}

/* The element of st at the coordinates named by axis letter (coords['N'], coords['L'], ...). */
static float at(const stage *st, const int64_t *coords)
{
    int64_t idx = 0;
    for (int d = 0; d < st->t.ndim; d++)
        idx = idx * st->t.shape[d] + coords[(unsigned char)st->axes[d]];
    return st->t.data[idx];
}

/* Size of axis a in st (0 when st has no such axis). */
static int64_t size_of(const stage *st, char a)
{
    const char *p = strchr(st->axes, a);
    return p ? st->t.shape[p - st->axes] : 0;
}

/* Parses a trace reply; records checks on its form (axes). */
static bool read_trace(const char *what, const hc_response *r, trace *tr)
{
    memset(tr, 0, sizeof *tr);
    json_t *doc = hc_json(r);
    json_t *stages = json_object_get(doc, "stages");
    bool ok = CHECK(r->status == 200 && json_is_array(stages), "%s: trace 200: %ld %.300s", what,
                    r->status, r->body);
    size_t i;
    json_t *st;
    json_array_foreach(stages, i, st) {
        if (tr->n >= MHA_TRACE_NSTAGES)
            break;
        stage *s = &tr->s[tr->n];
        snprintf(s->name, sizeof s->name, "%s", json_string_value(json_object_get(st, "name")));
        json_t *axes = json_object_get(st, "axes"), *shape = json_object_get(st, "shape");
        size_t k;
        json_t *a;
        bool legend = json_is_array(axes) && json_array_size(axes) < sizeof s->axes;
        json_array_foreach(axes, k, a) {
            const char *l = json_string_value(a);
            legend = legend && l && strlen(l) == 1 && strchr("NLSEHD", l[0]) && !strchr(s->axes, l[0]);
            if (legend)
                s->axes[k] = l[0];
        }
        CHECK(legend, "%s: %s names its axes from the legend N L S E H D, each once", what, s->name);
        CHECK(json_array_size(axes) == json_array_size(shape), "%s: %s: len(axes) %zu == len(shape) %zu",
              what, s->name, json_array_size(axes), json_array_size(shape));
        bool read = tj_read(&s->t, json_object_get(st, "tensor")) == 0;
        ok &= CHECK(read, "%s: %s's tensor reads", what, s->name);
        if (!read)
            continue;
        bool same = s->t.ndim == (int)json_array_size(shape);
        for (int d = 0; same && d < s->t.ndim; d++)
            same = s->t.shape[d] == json_integer_value(json_array_get(shape, (size_t)d));
        CHECK(same, "%s: %s: the tensor has the shape given", what, s->name);
        tr->n++;
    }
    json_decref(doc);
    return ok;
}

static bool same_numbers(const tj_tensor *a, const tj_tensor *b)
{
    if (a->ndim != b->ndim || a->count != b->count)
        return false;
    for (int d = 0; d < a->ndim; d++)
        if (a->shape[d] != b->shape[d])
            return false;
    return memcmp(a->data, b->data, (size_t)a->count * sizeof(float)) == 0;
}

/* A deterministic query of n*l (or l, unbatched) rows of e features, in the layer's layout. */
static char *make_query(bool batched, int64_t n, int64_t l, int64_t e, unsigned seed)
{
    size_t cap = (size_t)(n * l * e) * 16 + 64, o = 0;
    char *q = malloc(cap);
    o += (size_t)snprintf(q + o, cap - o, "%s", batched ? "[" : "");
    for (int64_t a = 0; a < (batched ? n : 1); a++) {
        o += (size_t)snprintf(q + o, cap - o, "%s[", a ? "," : "");
        for (int64_t b = 0; b < l; b++) {
            o += (size_t)snprintf(q + o, cap - o, "%s[", b ? "," : "");
            for (int64_t k = 0; k < e; k++) {
                seed = seed * 1103515245u + 12345u;
                o += (size_t)snprintf(q + o, cap - o, "%s%.4f", k ? "," : "",
                                      ((double)(seed >> 8 & 0xffff) / 65536.0 - 0.5) * 2);
            }
            o += (size_t)snprintf(q + o, cap - o, "]");
        }
        o += (size_t)snprintf(q + o, cap - o, "]");
    }
    o += (size_t)snprintf(q + o, cap - o, "%s", batched ? "]" : "");
    return q;
}

typedef struct layout {
    const char *what;
    bool batch_first, batched;
} layout;

static void check_layout(srv_daemon *d, const layout *lay, bool average, bool masks)
{
    const int64_t E = 8, H = 2, D = E / H, N = 3, L = 4, S = 5;
    char what[160];
    snprintf(what, sizeof what, "%s, %s%s", lay->what, average ? "averaged" : "per head",
             masks ? ", masked" : "");
    char put[256];
    snprintf(put, sizeof put,
             "{\"config\": {\"embed_dim\": %lld, \"num_heads\": %lld, \"batch_first\": %s, "
             "\"add_bias_kv\": true}, \"init\": {\"seed\": 3}}",
             (long long)E, (long long)H, lay->batch_first ? "true" : "false");
    hc_response r;
    hc_request(d, "PUT", "/v1/layers/t", NULL, put, -1, NULL, &r);
    hc_response_free(&r);
    /* query and key in the layer's layout: batch-first [N,L,E], else [L,N,E]; unbatched [L,E] */
    char *q = lay->batch_first || !lay->batched ? make_query(lay->batched, N, L, E, 1)
                                                : make_query(true, L, N, E, 1);
    char *k = lay->batch_first || !lay->batched ? make_query(lay->batched, N, S, E, 2)
                                                : make_query(true, S, N, E, 2);
    char extra[256] = "";
    if (masks) /* a padded key in every batch, causal on top */
        snprintf(extra, sizeof extra, ", \"key_padding_mask\": %s, \"is_causal\": true",
                 lay->batched ? "[[false,false,false,false,true],[false,false,false,true,false],"
                                "[false,false,false,false,true]]"
                              : "[false,false,false,true,false]");
    size_t cap = strlen(q) + strlen(k) + 512;
    char *body = malloc(cap);
    snprintf(body, cap, "{\"query\": %s, \"key\": %s, \"average_attn_weights\": %s%s%s}", q, k,
             average ? "true" : "false", extra, ", \"need_weights\": true");
    char *tbody = malloc(cap);
    snprintf(tbody, cap, "{\"query\": %s, \"key\": %s, \"average_attn_weights\": %s%s}", q, k,
             average ? "true" : "false", extra);

    hc_request(d, "POST", "/v1/layers/t/forward", NULL, body, -1, NULL, &r);
    json_t *fwd = hc_json(&r);
    tj_tensor out = {0}, w = {0};
    bool fok = CHECK(r.status == 200 && tj_read(&out, json_object_get(fwd, "output")) == 0 &&
                         tj_read(&w, json_object_get(fwd, "attn_weights")) == 0,
                     "%s: forward: %ld %.200s", what, r.status, r.body);
    json_decref(fwd);
    hc_response_free(&r);

    trace tr;
    hc_request(d, "POST", "/v1/layers/t/trace", NULL, tbody, -1, NULL, &r);
    bool tok = read_trace(what, &r, &tr);
    hc_response_free(&r);
    if (!fok || !tok || !CHECK(tr.n == MHA_TRACE_NSTAGES, "%s: every stage (%d)", what, tr.n))
        goto done;

    const stage *o = find(&tr, "output"), *aw = find(&tr, "attn_weights");
    CHECK(o && same_numbers(&o->t, &out), "%s: the output stage is forward's output, shape and numbers",
          what);
    CHECK(aw && same_numbers(&aw->t, &w), "%s: the attn_weights stage is forward's attn_weights",
          what);
    const char *want_out = !lay->batched ? "LE" : lay->batch_first ? "NLE" : "LNE";
    const char *want_w = average ? (lay->batched ? "NLS" : "LS") : (lay->batched ? "NHLS" : "HLS");
    CHECK(o && !strcmp(o->axes, want_out), "%s: output's axes %s (want %s)", what, o ? o->axes : "",
          want_out);
    CHECK(aw && !strcmp(aw->axes, want_w), "%s: attn_weights' axes %s (want %s)", what,
          aw ? aw->axes : "", want_w);
    static const struct {
        const char *name, *bf, *sf, *unb;
    } layouts[] = {
        {"q_proj", "NLE", "LNE", "LE"},       {"k_proj", "NSE", "SNE", "SE"},
        {"v_proj", "NSE", "SNE", "SE"},       {"q_heads", "NHLD", "NHLD", "HLD"},
        {"k_heads", "NHSD", "NHSD", "HSD"},   {"v_heads", "NHSD", "NHSD", "HSD"},
        {"scores", "NHLS", "NHLS", "HLS"},    {"head_outputs", "NHLD", "NHLD", "HLD"},
        {"concat", "NLE", "LNE", "LE"},
    };
    for (size_t i = 0; i < sizeof layouts / sizeof *layouts; i++) {
        const stage *st = find(&tr, layouts[i].name);
        const char *want = !lay->batched ? layouts[i].unb : lay->batch_first ? layouts[i].bf : layouts[i].sf;
        CHECK(st && !strcmp(st->axes, want), "%s: %s's axes %s (want %s)", what, layouts[i].name,
              st ? st->axes : "-", want);
    }
    static const char *const order[] = {"q_proj", "k_proj", "v_proj", "q_heads", "k_heads", "v_heads",
                                        "scores", "attn_weights", "head_outputs", "concat", "output"};
    bool in_order = true;
    for (int i = 0; i < tr.n; i++)
        in_order &= !strcmp(tr.s[i].name, order[i]);
    CHECK(in_order, "%s: stages in pipeline order", what);

    /* the stages fit together as their axes say */
    const stage *qp = find(&tr, "q_proj"), *qh = find(&tr, "q_heads"), *kp = find(&tr, "k_proj"),
                *kh = find(&tr, "k_heads"), *vp = find(&tr, "v_proj"), *vh = find(&tr, "v_heads"),
                *sc = find(&tr, "scores"), *ho = find(&tr, "head_outputs"),
                *cc = find(&tr, "concat");
    int64_t n_max = lay->batched ? N : 1, Sk = size_of(kh, 'S');
    CHECK(size_of(kp, 'S') == S && Sk == S + 1, "%s: k_proj has the S=%lld keys given, k_heads the "
          "bias_k key too (%lld)", what, (long long)size_of(kp, 'S'), (long long)Sk);
    int64_t c[256] = {0};
    int bad_split = 0, bad_concat = 0, bad_kv = 0, bad_softmax = 0;
    for (int64_t n = 0; n < n_max; n++)
        for (int64_t h = 0; h < H; h++)
            for (int64_t dd = 0; dd < D; dd++) {
                c['N'] = n, c['H'] = h, c['D'] = dd;
                for (int64_t l = 0; l < L; l++) {
                    c['L'] = l;
                    int64_t e = h * D + dd;
                    c['E'] = e;
                    bad_split += at(qh, c) != at(qp, c);
                    bad_concat += at(ho, c) != at(cc, c);
                }
                for (int64_t s = 0; s < S; s++) {
                    c['S'] = s;
                    c['E'] = h * D + dd;
                    bad_kv += at(kh, c) != at(kp, c) || at(vh, c) != at(vp, c);
                }
            }
    for (int64_t n = 0; n < n_max; n++)
        for (int64_t l = 0; l < L; l++) {
            c['N'] = n, c['L'] = l;
            double mean[16] = {0};
            for (int64_t h = 0; h < H; h++) {
                c['H'] = h;
                double mx = -INFINITY, sum = 0;
                for (int64_t s = 0; s < Sk; s++) {
                    c['S'] = s;
                    mx = fmax(mx, at(sc, c));
                }
                for (int64_t s = 0; s < Sk; s++) {
                    c['S'] = s;
                    sum += exp(at(sc, c) - mx);
                }
                for (int64_t s = 0; s < Sk; s++) {
                    c['S'] = s;
                    double p = exp(at(sc, c) - mx) / sum;
                    mean[s] += p / (double)H;
                    if (!average)
                        bad_softmax += !check_close(at(aw, c), (float)p);
                }
            }
            for (int64_t s = 0; s < Sk && average; s++) {
                c['S'] = s;
                bad_softmax += !check_close(at(aw, c), (float)mean[s]);
            }
        }
    CHECK(bad_split == 0, "%s: q_heads is q_proj cut into heads, read by axes (%d differ)", what,
          bad_split);
    CHECK(bad_kv == 0, "%s: k_heads/v_heads are k_proj/v_proj cut into heads (%d differ)", what,
          bad_kv);
    CHECK(bad_concat == 0, "%s: concat holds head_outputs side by side (%d differ)", what, bad_concat);
    CHECK(bad_softmax == 0, "%s: attn_weights is the softmax of scores%s (%d differ)", what,
          average ? ", averaged over H" : "", bad_softmax);

    /* "stages": only those, in pipeline order, the same numbers */
    snprintf(tbody + strlen(tbody) - 1, 96, ", \"stages\": [\"attn_weights\", \"q_proj\", \"scores\", \"q_proj\"]}");
    trace sel;
    hc_request(d, "POST", "/v1/layers/t/trace", NULL, tbody, -1, NULL, &r);
    if (read_trace(what, &r, &sel)) {
        CHECK(sel.n == 3 && !strcmp(sel.s[0].name, "q_proj") && !strcmp(sel.s[1].name, "scores") &&
                  !strcmp(sel.s[2].name, "attn_weights"),
              "%s: stages [attn_weights, q_proj, scores, q_proj] answer q_proj, scores, attn_weights",
              what);
        for (int i = 0; i < sel.n; i++) {
            const stage *full = find(&tr, sel.s[i].name);
            CHECK(full && same_numbers(&full->t, &sel.s[i].t) && !strcmp(full->axes, sel.s[i].axes),
                  "%s: selected %s is the whole trace's", what, sel.s[i].name);
        }
    }
    trace_free(&sel);
    hc_response_free(&r);
done:
    trace_free(&tr);
    tj_free(&out);
    tj_free(&w);
    free(q);
    free(k);
    free(body);
    free(tbody);
}

static void test_layouts(void)
{
    srv_daemon *d = hc_start(NULL);
    if (!CHECK(d != NULL, "daemon starts"))
        return;
    static const layout lays[] = {{"batch-first", true, true},
                                  {"batch_first false", false, true},
                                  {"unbatched", true, false},
                                  {"unbatched, batch_first false", false, false}};
    for (size_t i = 0; i < sizeof lays / sizeof *lays; i++)
        for (int avg = 0; avg < 2; avg++)
            for (int masks = 0; masks < 2; masks++)
                check_layout(d, &lays[i], avg, masks);
    hc_stop(d);
}

/* The limit counts what is returned; bad selections are 400s naming "stages". */
static void test_selection_limits(void)
{
    /* E=8, H=2, D=4, N=2, L=S=16 (self-attention): scores 1024 numbers, averaged weights 512 (per
     * head 1024), the nine others 256 each: all together 3840 */
    srv_options opt;
    hc_options(&opt);
    opt.max_trace_elements = 1024;
    srv_daemon *d = hc_start(&opt);
    if (!CHECK(d != NULL, "daemon starts"))
        return;
    hc_response r;
    hc_request(d, "PUT", "/v1/layers/t", NULL, "{\"config\": {\"embed_dim\": 8, \"num_heads\": 2}}",
               -1, NULL, &r);
    hc_response_free(&r);
    char *q = make_query(true, 2, 16, 8, 9);
    static const struct {
        const char *extra;
        long status;
        const char *says;
    } cases[] = {
        {"", 413, "3840 numbers"},
        {", \"stages\": [\"scores\"]", 200, NULL},
        {", \"stages\": [\"scores\", \"output\"]", 413, "1280 numbers"},
        {", \"stages\": [\"attn_weights\", \"q_proj\", \"output\"]", 200, NULL}, /* 512+256+256 */
        {", \"stages\": [\"attn_weights\", \"q_proj\", \"output\"], \"average_attn_weights\": false",
         413, "1536 numbers"},
        {", \"stages\": [\"outputs\"]", 400,
         "unknown stage 'outputs' in stages; the stages are: q_proj, k_proj, v_proj, q_heads, "
         "k_heads, v_heads, scores, attn_weights, head_outputs, concat, output"},
        {", \"stages\": []", 400, "non-empty array"},
        {", \"stages\": \"scores\"", 400, "non-empty array"},
        {", \"stages\": [1]", 400, "stages[0] is not a string"},
        {", \"stages\": [\"scores\", null]", 400, "stages[1] is not a string"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char *body = malloc(strlen(q) + 256);
        sprintf(body, "{\"query\": %s%s}", q, cases[i].extra);
        hc_request(d, "POST", "/v1/layers/t/trace", NULL, body, -1, NULL, &r);
        char field[64] = "";
        hc_error_field(&r, field, sizeof field);
        CHECK(r.status == cases[i].status && (!cases[i].says || strstr(r.body, cases[i].says)),
              "trace%s: %ld (want %ld%s%s): %.300s", cases[i].extra, r.status, cases[i].status,
              cases[i].says ? ", saying " : "", cases[i].says ? cases[i].says : "", r.body);
        if (cases[i].status == 400)
            CHECK(!strcmp(field, "stages"), "trace%s: the error names stages ('%s')", cases[i].extra,
                  field);
        hc_response_free(&r);
        free(body);
    }
    /* a forward pass has no stages to choose */
    char *body = malloc(strlen(q) + 64);
    sprintf(body, "{\"query\": %s, \"stages\": [\"scores\"]}", q);
    hc_request(d, "POST", "/v1/layers/t/forward", NULL, body, -1, NULL, &r);
    HC_CHECK_ERROR(r, 400, "unknown_field", "stages");
    hc_response_free(&r);
    free(body);
    free(q);
    hc_stop(d);
}

int main(void)
{
    test_layouts();
    test_selection_limits();
    return check_report();
}
