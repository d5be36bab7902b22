/*
 * test_engine_init.c - a layer's random initialisation is the same, value for value, on any number
 * of threads, and the same as it always was.
 *
 * The reference below is the initialiser as attnd first wrote it: one xoshiro256** stream seeded
 * through splitmix64, drawn in order, parameter after parameter in state_dict order (xavier_uniform
 * in-projections, kaiming-uniform out_proj.weight, zero biases, Box-Muller xavier_normal
 * bias_k/bias_v). mha_layer_init and mha_layer_init_pool on pools of 1 to 4 threads must give its
 * values bit for bit, for layers small (drawn in order) and large (cut into chunks whose first
 * states are found by jumps), packed and not, with odd sizes and bias_k/bias_v. The jumps
 * themselves: a jump of 2^k steps is k squarings of the step matrix, checked against stepping.
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "mha.h"
#include "mha_internal.h"

/* ---- the reference: the original initialiser, written out again ---- */

static uint64_t ref_splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static uint64_t ref_rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

static uint64_t ref_next(uint64_t *s)
{
    uint64_t result = ref_rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = ref_rotl(s[3], 45);
    return result;
}

static double ref_unit(uint64_t *s)
{
    return (double)(ref_next(s) >> 11) * 0x1.0p-53;
}

/* The reference values of every parameter of layer's config, in its parameter order. */
static float *ref_init(const mha_layer *layer, uint64_t seed, int64_t *total)
{
    uint64_t s[4];
    for (int i = 0; i < 4; i++)
        s[i] = ref_splitmix(&seed);
    int np = mha_layer_param_count(layer);
    int64_t n = 0;
    for (int i = 0; i < np; i++)
        n += mha_layer_param_info(layer, i)->count;
    float *out = calloc((size_t)n, sizeof *out), *o = out;
    for (int i = 0; i < np; i++) {
        const mha_param_info *p = mha_layer_param_info(layer, i);
        if (p->ndim == 1) {
            o += p->count; /* zero */
            continue;
        }
        double receptive = p->ndim > 2 ? (double)p->shape[2] : 1;
        double fan_in = (double)p->shape[1] * receptive, fan_out = (double)p->shape[0] * receptive;
        if (!strcmp(p->name, "bias_k") || !strcmp(p->name, "bias_v")) {
            double std = sqrt(2.0 / (fan_in + fan_out));
            for (int64_t k = 0; k < p->count; k += 2) {
                double u1 = ref_unit(s), u2 = ref_unit(s);
                double rad = sqrt(-2.0 * log(1.0 - u1));
                o[k] = (float)(std * rad * cos(2.0 * M_PI * u2));
                if (k + 1 < p->count)
                    o[k + 1] = (float)(std * rad * sin(2.0 * M_PI * u2));
            }
        } else {
            double bound = !strcmp(p->name, "out_proj.weight") ? 1.0 / sqrt(fan_in)
                                                               : sqrt(6.0 / (fan_in + fan_out));
            for (int64_t k = 0; k < p->count; k++)
                o[k] = (float)((2.0 * ref_unit(s) - 1.0) * bound);
        }
        o += p->count;
    }
    *total = n;
    return out;
}

/* True when every parameter of layer equals want bit for bit (the first difference printed). */
static bool same_bits(const mha_layer *layer, const float *want)
{
    for (int i = 0; i < mha_layer_param_count(layer); i++) {
        const mha_param_info *p = mha_layer_param_info(layer, i);
        const float *got = mha_layer_param_data(layer, i);
        if (memcmp(got, want, (size_t)p->count * sizeof(float)) != 0) {
            for (int64_t k = 0; k < p->count; k++)
                if (memcmp(&got[k], &want[k], sizeof(float)) != 0) {
                    printf("  %s[%lld]: %.9g, want %.9g\n", p->name, (long long)k, got[k],
                           want[k]);
                    break;
                }
            return false;
        }
        want += p->count;
    }
    return true;
}

static void test_layer(const char *what, int64_t E, int64_t H, int64_t kdim, int64_t vdim,
                       bool bias, bool bias_kv, int64_t kv_heads, mha_pool *pools[], int npools)
{
    mha_config cfg;
    mha_config_init(&cfg, E, H);
    cfg.num_kv_heads = kv_heads;
    cfg.kdim = kdim;
    cfg.vdim = vdim;
    cfg.bias = bias;
    cfg.add_bias_kv = bias_kv;
    mha_limits lim;
    mha_limits_default(&lim);
    lim.max_elements = (int64_t)1 << 30;
    mha_error err = {0};
    mha_layer *layer = mha_layer_create(&cfg, &lim, &err);
    if (!CHECK(layer, "%s: create: %s", what, err.message))
        return;
    uint64_t seed = (uint64_t)E * 7919 + (uint64_t)kdim;
    int64_t n;
    float *want = ref_init(layer, seed, &n);
    CHECK(mha_layer_init(layer, "xavier_uniform", seed, &err) == MHA_OK && same_bits(layer, want),
          "%s (%lld parameters): mha_layer_init gives the reference's values", what, (long long)n);
    for (int p = 0; p < npools; p++) {
        ((float *)mha_layer_param_data(layer, 0))[0] = 12345.0f; /* it must be written again */
        CHECK(mha_layer_init_pool(layer, "xavier_uniform", seed, pools[p], &err) == MHA_OK &&
                  same_bits(layer, want),
              "%s: the same on %d threads", what, mha_pool_threads(pools[p]));
    }
    /* zeros, on threads too */
    CHECK(mha_layer_init_pool(layer, "zeros", 0, pools[npools - 1], &err) == MHA_OK, "zeros");
    bool all_zero = true;
    for (int i = 0; i < mha_layer_param_count(layer); i++) {
        const float *d = mha_layer_param_data(layer, i);
        for (int64_t k = 0; k < mha_layer_param_info(layer, i)->count; k++)
            all_zero &= d[k] == 0.0f;
    }
    CHECK(all_zero, "%s: zeros are zeros", what);
    free(want);
    mha_layer_free(layer);
}

static void test_jumps(void)
{
    mha_rng_jump *j = malloc(sizeof *j);
    for (int k = 0; k <= 12; k += 3) {
        mha_rng a, b;
        mha_rng_seed(&a, 42 + (uint64_t)k);
        b = a;
        mha_rng_jump_make(j, k);
        mha_rng_jump_apply(j, &a);
        mha_rng_advance(&b, (uint64_t)1 << k);
        CHECK(memcmp(&a, &b, sizeof a) == 0 && mha_rng_next(&a) == mha_rng_next(&b),
              "a jump of 2^%d steps is 2^%d steps", k, k);
    }
    free(j);
}

int main(void)
{
    test_jumps();
    mha_error err = {0};
    mha_pool *pools[4];
    int npools = 0;
    for (int t = 1; t <= 4; t++)
        if ((pools[npools] = mha_pool_create(t, &err)) != NULL)
            npools++;
    if (!CHECK(npools == 4, "pools of 1..4 threads: %s", err.message))
        return check_report();
    /* small: drawn in order */
    test_layer("E=8 H=2", 8, 2, 0, 0, true, false, 0, pools, npools);
    test_layer("E=6 H=3 kdim=5 vdim=7 bias_kv", 6, 3, 5, 7, true, true, 0, pools, npools);
    /* large (over 2^20 parameters): in chunks, on threads */
    test_layer("E=512 H=8", 512, 8, 0, 0, true, false, 0, pools, npools);
    test_layer("E=513 H=3 bias_kv", 513, 3, 0, 0, true, true, 0, pools, npools);
    test_layer("E=600 H=4 kdim=301 vdim=777 bias_kv no bias", 600, 4, 301, 777, false, true, 0,
               pools, npools);
    test_layer("E=1024 H=16 num_kv_heads=4 (GQA)", 1024, 16, 0, 0, true, false, 4, pools, npools);
    for (int p = 0; p < npools; p++)
        mha_pool_free(pools[p]);
    return check_report();
}
