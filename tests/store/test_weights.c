/*
 * test_weights.c - hand-written torch layers (tests/golden_datadir/, made by gen_safetensors.py:
 * a torch nn.MultiheadAttention's state_dict saved as safetensors + config.json) read through the
 * data dir give torch's numbers; a layer's weights -> safetensors -> layer is exact; files that do
 * not fit the config are refused naming the parameter.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "store/datadir.h"
#include "store/weights.h"

/* The config fields the golden layers use, read the way torch names them. */
static void config_of(mha_config *cfg, const json_t *c)
{
    mha_config_init(cfg, json_integer_value(json_object_get(c, "embed_dim")),
                    json_integer_value(json_object_get(c, "num_heads")));
    if (json_object_get(c, "kdim"))
        cfg->kdim = json_integer_value(json_object_get(c, "kdim"));
    if (json_object_get(c, "vdim"))
        cfg->vdim = json_integer_value(json_object_get(c, "vdim"));
    if (json_object_get(c, "add_bias_kv"))
        cfg->add_bias_kv = json_is_true(json_object_get(c, "add_bias_kv"));
    if (json_object_get(c, "batch_first"))
        cfg->batch_first = json_is_true(json_object_get(c, "batch_first"));
}

static float *floats_of(const json_t *t, mha_tensor *mt)
{
    json_t *shape = json_object_get(t, "shape"), *data = json_object_get(t, "data");
    size_t n = json_array_size(data);
    float *f = malloc((n ? n : 1) * sizeof *f);
    for (size_t i = 0; i < n; i++)
        f[i] = (float)json_number_value(json_array_get(data, i));
    if (mt) {
        mt->data = f;
        mt->ndim = (int)json_array_size(shape);
        for (int d = 0; d < mt->ndim; d++)
            mt->shape[d] = json_integer_value(json_array_get(shape, (size_t)d));
    }
    return f;
}

static void test_torch_layers(void)
{
    size_t len;
    char *text = check_read_file("tests/golden_datadir/expected.json", &len);
    json_t *expected = text ? json_loadb(text, len, 0, NULL) : NULL;
    free(text);
    if (!CHECK(expected, "read tests/golden_datadir/expected.json"))
        return;
    srv_error err = {0};
    /* read-only: the test never writes into tests/ */
    srv_datadir *dd = srv_datadir_open("tests/golden_datadir", true, &err);
    if (!CHECK(dd, "open golden data dir: %s", err.message)) {
        json_decref(expected);
        return;
    }
    const char *name;
    json_t *want;
    int layers = 0;
    json_object_foreach(expected, name, want) {
        srv_dd_layer l;
        if (!CHECK(srv_datadir_read(dd, name, 1 << 20, &l, &err, NULL) == 0, "%s reads: %s", name,
                   err.message))
            continue;
        mha_config cfg;
        config_of(&cfg, l.config);
        mha_error me = {0};
        mha_layer *layer = mha_layer_create(&cfg, NULL, &me);
        if (CHECK(layer, "%s: layer: %s", name, me.message) &&
            CHECK(srv_weights_from_st(layer, &l.weights, "weights", &err) == 0,
                  "%s: torch state_dict fills the layer: %s", name, err.message)) {
            mha_inputs in = {0};
            float *q = floats_of(json_object_get(want, "query"), &in.query);
            float *k = floats_of(json_object_get(want, "key"), &in.key);
            float *v = floats_of(json_object_get(want, "value"), &in.value);
            float *wo = floats_of(json_object_get(want, "output"), NULL);
            float *ww = floats_of(json_object_get(want, "attn_weights"), NULL);
            in.need_weights = true;
            in.average_attn_weights = true;
            mha_plan plan;
            if (CHECK(mha_plan_forward(layer, &in, NULL, &plan, &me) == MHA_OK, "%s plan: %s",
                      name, me.message)) {
                float *out = malloc((size_t)plan.out_count * sizeof *out);
                float *w = malloc((size_t)plan.weights_count * sizeof *w);
                if (CHECK(mha_forward(layer, &in, &plan, out, w, NULL, NULL, &me) == MHA_OK,
                          "%s forward: %s", name, me.message)) {
                    CHECK(plan.out_count ==
                              (int64_t)json_array_size(json_object_get(
                                  json_object_get(want, "output"), "data")),
                          "%s: output size", name);
                    CHECK_CLOSE_ARRAY(name, out, wo, plan.out_count);
                    CHECK_CLOSE_ARRAY(name, w, ww, plan.weights_count);
                }
                free(out);
                free(w);
            }
            free(q), free(k), free(v), free(wo), free(ww);
            layers++;

            /* the layer's weights -> safetensors -> the same floats */
            srv_buf b;
            srv_buf_init(&b);
            srv_st st;
            CHECK(srv_weights_to_safetensors(&b, layer, &err) == 0 &&
                      srv_st_parse(&st, (const uint8_t *)b.data, b.len, 1 << 20, "rt", &err) == 0,
                  "%s: weights to safetensors and back", name);
            bool same = st.n == mha_layer_param_count(layer);
            for (int p = 0; same && p < st.n; p++) {
                const mha_param_info *pi = mha_layer_param_info(layer, p);
                const srv_st_tensor *t = srv_st_find(&st, pi->name);
                same = t && t->count == pi->count &&
                       memcmp(t->data, mha_layer_param_data(layer, p),
                              (size_t)pi->count * sizeof(float)) == 0;
            }
            CHECK(same, "%s: weights read back bit for bit", name);
            srv_st_free(&st);
            srv_buf_free(&b);
        }
        mha_layer_free(layer);
        srv_dd_layer_free(&l);
    }
    CHECK(layers == 2, "both torch layers checked (%d)", layers);
    srv_datadir_free(dd);
    json_decref(expected);
}

/* Files that do not fit the config. */
static void test_mismatch(void)
{
    mha_config cfg;
    mha_config_init(&cfg, 4, 2);
    mha_layer *layer = mha_layer_create(&cfg, NULL, NULL);
    if (!CHECK(layer, "layer"))
        return;
    float zeros[64] = {0};
    int64_t s_in[2] = {12, 4}, s_bad[2] = {12, 5}, s_inb[1] = {12}, s_out[2] = {4, 4}, s_ob[1] = {4};
    struct {
        const char *what;
        srv_st_view v[5];
        int n;
        srv_code code;
        const char *msg;
    } cases[] = {
        {"missing out_proj.bias",
         {{"in_proj_weight", 2, s_in, zeros}, {"in_proj_bias", 1, s_inb, zeros},
          {"out_proj.weight", 2, s_out, zeros}},
         3, SRV_E_MISSING_FIELD, "out_proj.bias [4] is missing"},
        {"unknown bias_k",
         {{"in_proj_weight", 2, s_in, zeros}, {"in_proj_bias", 1, s_inb, zeros},
          {"out_proj.weight", 2, s_out, zeros}, {"out_proj.bias", 1, s_ob, zeros},
          {"bias_k", 1, s_ob, zeros}},
         5, SRV_E_UNKNOWN_FIELD, "no parameter \"bias_k\""},
        {"wrong shape",
         {{"in_proj_weight", 2, s_bad, zeros}, {"in_proj_bias", 1, s_inb, zeros},
          {"out_proj.weight", 2, s_out, zeros}, {"out_proj.bias", 1, s_ob, zeros}},
         4, SRV_E_SHAPE, "in_proj_weight has shape [12, 5], the layer's config needs [12, 4]"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        srv_buf b;
        srv_buf_init(&b);
        srv_st st;
        srv_error err = {0};
        CHECK(srv_st_write(&b, cases[c].v, cases[c].n, NULL, &err) == 0 &&
                  srv_st_parse(&st, (const uint8_t *)b.data, b.len, 1000, "w", &err) == 0,
              "%s: file", cases[c].what);
        memset(&err, 0, sizeof err);
        int rc = srv_weights_from_st(layer, &st, "weights", &err);
        CHECK(rc == -1 && err.code == cases[c].code && strstr(err.message, cases[c].msg),
              "%s refused: %s", cases[c].what, err.message);
        srv_st_free(&st);
        srv_buf_free(&b);
    }
    mha_layer_free(layer);
}

int main(void)
{
    test_torch_layers();
    test_mismatch();
    return check_report();
}
