/*
 * fuzz_weights_put.c - a weights PUT in safetensors, past the parser: the body becomes a layer
 * (PUT /v1/layers/{name}: srv_layer_from_safetensors, config in __metadata__["config"]) or the new
 * weights of an existing one (PUT .../weights: srv_weights_from_safetensors), as the handlers do.
 *
 * Input: one byte (bit 7: the weights of an existing layer, else a new layer; bits 0-1: which of
 * four existing layers - packed, kdim/vdim with bias_k/v, no bias with add_zero_attn, one head),
 * then the file.
 * Checks: a refused body gets a client error with a message (never internal), and nothing; an
 * accepted one is a layer whose parameters are exactly the file's tensors (every name, shape and
 * float32 value, the file's F16/BF16/F64 converted as srv_st_parse converts them), which a weights
 * PUT keeps the old layer's config for; its weights served back (srv_weights_reply_safetensors, GET
 * .../weights with Accept: application/octet-stream) parse to the same tensors; and it runs a
 * forward pass of one query row (finite weights can overflow on the way: not checked here).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api/layer_io.h"
#include "app/app.h"
#include "codec/safetensors.h"
#include "store/config.h"
#include "fuzz_fail.h"

#define MAX_EL (1 << 14)

static srv_app *app;
static srv_layer *old[4];

static void start(void)
{
    srv_options opt;
    srv_options_default(&opt);
    opt.blas_threads = 1;
    opt.log_format = SRV_LOG_OFF;
    opt.max_tensor_elements = MAX_EL;
    srv_error err = {0};
    app = srv_app_create(&opt, NULL, &err);
    if (!app)
        FAIL("app: %s", err.message);
    mha_config c[4];
    mha_config_init(&c[0], 8, 2);
    mha_config_init(&c[1], 6, 3);
    c[1].kdim = 4;
    c[1].vdim = 5;
    c[1].add_bias_kv = true;
    mha_config_init(&c[2], 4, 2);
    c[2].bias = false;
    c[2].add_zero_attn = true;
    mha_config_init(&c[3], 3, 1);
    for (int i = 0; i < 4; i++) {
        mha_error me = {0};
        mha_layer *l = mha_layer_create(&c[i], &app->limits, &me);
        if (!l || mha_layer_init(l, "xavier_uniform", (uint64_t)i, &me) != MHA_OK)
            FAIL("layer %d: %s", i, me.message);
        old[i] = srv_layer_new("old", l, srv_config_to_json(mha_layer_config(l)));
        if (!old[i])
            FAIL("layer %d: out of memory", i);
    }
}

/* The layer's parameters are exactly want's tensors (names, shapes, bits). */
static void same_tensors(const srv_st *want, const srv_st *got, const char *what)
{
    if (got->n != want->n)
        FAIL("%s: %d tensors, the body has %d", what, got->n, want->n);
    for (int i = 0; i < want->n; i++) {
        const srv_st_tensor *w = &want->tensors[i];
        const srv_st_tensor *g = srv_st_find(got, w->name);
        if (!g)
            FAIL("%s: %s is missing", what, w->name);
        if (g->count != w->count || g->ndim != w->ndim ||
            memcmp(g->shape, w->shape, sizeof(int64_t) * (size_t)w->ndim) != 0)
            FAIL("%s: %s has another shape", what, w->name);
        if (w->count && memcmp(g->data, w->data, sizeof(float) * (size_t)w->count) != 0)
            FAIL("%s: %s has other values", what, w->name);
    }
}

static void run_once(const srv_layer *l)
{
    const mha_config *c = mha_layer_config(l->layer);
    mha_error me = {0};
    float *q = calloc((size_t)c->embed_dim, sizeof *q), *o = calloc((size_t)c->embed_dim, sizeof *o);
    for (int64_t i = 0; i < c->embed_dim; i++)
        q[i] = (float)(i % 3) - 1;
    mha_inputs in = {0};
    in.query = (mha_tensor){q, 2, {1, c->embed_dim}};
    in.key = in.query;
    in.value = in.query;
    mha_plan plan;
    if (c->kdim == c->embed_dim && c->vdim == c->embed_dim) {
        if (mha_plan_forward(l->layer, &in, &app->limits, &plan, &me) != MHA_OK)
            FAIL("plan: %s", me.message);
        /* finite weights may still overflow float32 on the way: the engine refuses a row with no
         * finite score (MHA_ERR_VALUE, "the pass overflowed float32"), the forward handler a
         * non-finite output (400 bad_value, api/forward.c); any other failure is a bug */
        if (mha_forward(l->layer, &in, &plan, o, NULL, NULL, NULL, &me) != MHA_OK &&
            !(me.status == MHA_ERR_VALUE && strstr(me.message, "overflowed float32")))
            FAIL("forward: %s", me.message);
    }
    free(q);
    free(o);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!app)
        start();
    if (size < 1)
        return 0;
    bool weights = data[0] & 0x80;
    const srv_layer *base = old[data[0] & 3];
    size_t len = size - 1;
    char *body = malloc(len ? len : 1); /* exact size: ASan sees reads past the end */
    memcpy(body, data + 1, len);

    srv_error err = {0};
    srv_layer *l = weights ? srv_weights_from_safetensors(app, base, body, len, &err)
                           : srv_layer_from_safetensors(app, "x", body, len, &err);
    if (!l) {
        if (err.code == SRV_OK || err.code == SRV_E_INTERNAL || !err.message[0])
            FAIL("refused with code %d: %s", err.code, err.message);
        free(body);
        return 0;
    }
    if (weights && !json_equal(l->config, base->config))
        FAIL("a weights PUT changed the config");
    /* the body as the parser reads it: what the layer must hold */
    srv_st want;
    srv_error e2 = {0};
    if (srv_st_parse(&want, (const uint8_t *)body, len, MAX_EL, "body", &e2) != 0)
        FAIL("accepted a body srv_st_parse refuses: %s", e2.message);
    srv_response resp;
    memset(&resp, 0, sizeof resp);
    srv_buf_init(&resp.body);
    if (srv_weights_reply_safetensors(&resp, l, &e2) != 0)
        FAIL("reply: %s", e2.message);
    srv_st back;
    if (srv_st_parse(&back, (const uint8_t *)resp.body.data, resp.body.len, MAX_EL, "reply", &e2) != 0)
        FAIL("the served weights do not parse: %s", e2.message);
    same_tensors(&want, &back, "served weights");
    if (!srv_st_meta(&back, "format"))
        FAIL("the served weights have no format metadata");
    run_once(l);
    srv_st_free(&back);
    srv_st_free(&want);
    srv_buf_free(&resp.body);
    srv_layer_release(l);
    free(body);
    return 0;
}
