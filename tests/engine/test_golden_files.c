/*
 * test_golden_files.c - the golden loader (tests/support/golden.c) and the golden files themselves:
 * base64 decoding, and for every case in tests/golden/ and tests/golden_variants/ that its tensors
 * are shaped as its config says (head_dim and num_kv_heads included), its parameters are torch's
 * state_dict for that config (on those shapes), its trace is self-consistent (softmax
 * rows sum to 1, fully masked rows have weights 0 and head outputs 0; a case may have no trace at all),
 * and its JSON texts are kept.
 * Needs nothing of lib/ but mha.h's types; test_golden.c runs the cases through the engine.
 *
 *   test_golden_files [DIR]      DIR defaults to tests/golden and tests/golden_variants
 */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "golden.h"

static void test_base64(void)
{
    uint8_t out[16];
    CHECK(golden_base64_decode(out, sizeof out, "", 0) == 0, "empty base64");
    CHECK(golden_base64_decode(out, sizeof out, "Zg==", 4) == 1 && out[0] == 'f', "Zg==");
    CHECK(golden_base64_decode(out, sizeof out, "Zm8=", 4) == 2 && memcmp(out, "fo", 2) == 0, "Zm8=");
    CHECK(golden_base64_decode(out, sizeof out, "Zm9v", 4) == 3 && memcmp(out, "foo", 3) == 0, "Zm9v");
    CHECK(golden_base64_decode(out, sizeof out, "Zm9vYg", 6) == 4 && memcmp(out, "foob", 4) == 0,
          "unpadded Zm9vYg");
    CHECK(golden_base64_decode(out, sizeof out, "+/+/", 4) == 3 && out[0] == 0xfb && out[1] == 0xff &&
              out[2] == 0xbf,
          "+ and /");
    CHECK(golden_base64_decode(out, sizeof out, "Zm9v!A==", 8) == -1, "bad character refused");
    CHECK(golden_base64_decode(out, sizeof out, "Zm9vY", 5) == -1, "length 4k+1 refused");
    CHECK(golden_base64_decode(out, 2, "Zm9v", 4) == -1, "no room refused");
    /* 1.0f little-endian = 00 00 80 3f */
    CHECK(golden_base64_decode(out, sizeof out, "AACAPw==", 8) == 4 && out[2] == 0x80 && out[3] == 0x3f,
          "float 1.0");
}

static bool shape_is(const golden_tensor *t, int ndim, int64_t a, int64_t b, int64_t c, int64_t d)
{
    int64_t want[4] = {a, b, c, d};
    if (!t->present || t->ndim != ndim)
        return false;
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] != want[i])
            return false;
    return true;
}

/* head_dim and num_kv_heads of a config, their defaults resolved (E/H, H). */
static int64_t head_dim_of(const mha_config *k)
{
    return k->head_dim ? k->head_dim : k->embed_dim / k->num_heads;
}

static int64_t kv_heads_of(const mha_config *k)
{
    return k->num_kv_heads ? k->num_kv_heads : k->num_heads;
}

/* torch's state_dict for this config: the names (in order) and shapes. */
static void check_weights(const golden_case *c)
{
    const mha_config *k = &c->config;
    const int64_t E = k->embed_dim, hd = head_dim_of(k);
    const int64_t Dq = k->num_heads * hd, Dkv = kv_heads_of(k) * hd;
    bool packed = k->kdim == E && k->vdim == E;
    struct {
        const char *name;
        int ndim;
        int64_t s0, s1, s2;
    } want[MHA_MAX_PARAMS];
    int n = 0;
#define WANT(nm, nd, a, b, cc) want[n].name = nm, want[n].ndim = nd, want[n].s0 = a, want[n].s1 = b, \
                               want[n].s2 = cc, n++
    if (packed) {
        WANT("in_proj_weight", 2, Dq + 2 * Dkv, E, 0);
    } else {
        WANT("q_proj_weight", 2, Dq, E, 0);
        WANT("k_proj_weight", 2, Dkv, k->kdim, 0);
        WANT("v_proj_weight", 2, Dkv, k->vdim, 0);
    }
    if (k->bias)
        WANT("in_proj_bias", 1, Dq + 2 * Dkv, 0, 0);
    if (k->add_bias_kv) {
        WANT("bias_k", 3, 1, 1, Dkv);
        WANT("bias_v", 3, 1, 1, Dkv);
    }
    WANT("out_proj.weight", 2, E, Dq, 0);
    if (k->bias)
        WANT("out_proj.bias", 1, E, 0, 0);
#undef WANT
    bool ok = c->n_weights == n;
    for (int i = 0; ok && i < n; i++)
        ok = strcmp(c->weights[i].name, want[i].name) == 0 &&
             shape_is(&c->weights[i].t, want[i].ndim, want[i].s0, want[i].s1, want[i].s2, 0);
    CHECK(ok, "%s: weights are not torch's state_dict for this config", c->name);
}

/* Rows of the trace's attn_weights: sum 1, or all 0 (with head outputs 0) where scores are all -inf. */
static void check_rows(const golden_case *c, int64_t rows, int64_t S, int64_t hd)
{
    const float *sc = c->trace[MHA_TRACE_SCORES].data;
    const float *w = c->trace[MHA_TRACE_ATTN_WEIGHTS].data;
    const float *ho = c->trace[MHA_TRACE_HEAD_OUTPUTS].data;
    int dead_rows = 0;
    bool ok = true;
    for (int64_t r = 0; r < rows && ok; r++) {
        bool dead = true;
        double sum = 0;
        for (int64_t j = 0; j < S; j++) {
            dead = dead && isinf(sc[r * S + j]) && sc[r * S + j] < 0;
            sum += w[r * S + j];
            ok = ok && !isnan(sc[r * S + j]) && !(isinf(sc[r * S + j]) && sc[r * S + j] > 0);
        }
        if (dead) {
            dead_rows++;
            for (int64_t j = 0; j < S; j++)
                ok = ok && w[r * S + j] == 0;
            for (int64_t j = 0; j < hd; j++)
                ok = ok && ho[r * hd + j] == 0;
        } else {
            ok = ok && fabs(sum - 1.0) < 1e-5;
        }
    }
    CHECK(ok, "%s: a softmax row neither sums to 1 nor is a zero fully-masked row", c->name);
    CHECK((dead_rows > 0) == c->fully_masked_rows, "%s: fully_masked_rows is %s, the trace has %d",
          c->name, c->fully_masked_rows ? "true" : "false", dead_rows);
}

static void check_case(const golden_case *c)
{
    const mha_config *k = &c->config;
    int64_t E = k->embed_dim, H = k->num_heads, Hkv = kv_heads_of(k);
    if (!CHECK(E > 0 && H > 0 && (k->head_dim > 0 || E % H == 0) && Hkv > 0 && H % Hkv == 0 &&
                   k->kdim > 0 && k->vdim > 0,
               "%s: bad config", c->name))
        return;
    const int64_t hd = head_dim_of(k), Dq = H * hd, Dkv = Hkv * hd;
    bool batched = c->query.ndim == 3;
    if (!CHECK(batched || c->query.ndim == 2, "%s: query has %d dims", c->name, c->query.ndim))
        return;
    int64_t N = 1, L, S0;
    if (batched) {
        N = k->batch_first ? c->query.shape[0] : c->query.shape[1];
        L = k->batch_first ? c->query.shape[1] : c->query.shape[0];
    } else {
        L = c->query.shape[0];
    }
    const golden_tensor *key = c->key.present ? &c->key : &c->query;
    S0 = batched ? (k->batch_first ? key->shape[1] : key->shape[0]) : key->shape[0];
    int64_t S = S0 + k->add_bias_kv + k->add_zero_attn;
    CHECK(c->query.shape[c->query.ndim - 1] == E, "%s: query features", c->name);
    CHECK(!c->key.present || c->key.shape[c->key.ndim - 1] == k->kdim, "%s: key features", c->name);
    CHECK(!c->value.present || c->value.shape[c->value.ndim - 1] == k->vdim, "%s: value features",
          c->name);
    CHECK(!c->value.present || c->key.present, "%s: value without key", c->name);
    CHECK(c->inputs_json && strstr(c->inputs_json, "\"query\"") && c->weights_json &&
              c->weights_json[0] == '{' && c->config_json && strstr(c->config_json, "\"embed_dim\""),
          "%s: JSON texts kept", c->name);
    check_weights(c);

    /* expected: torch's shapes */
    bool out_ok = batched ? (k->batch_first ? shape_is(&c->output, 3, N, L, E, 0)
                                            : shape_is(&c->output, 3, L, N, E, 0))
                          : shape_is(&c->output, 2, L, E, 0, 0);
    CHECK(out_ok, "%s: expected output shape", c->name);
    if (c->need_weights) {
        bool w_ok = c->average_attn_weights
                        ? (batched ? shape_is(&c->attn_weights, 3, N, L, S, 0)
                                   : shape_is(&c->attn_weights, 2, L, S, 0, 0))
                        : (batched ? shape_is(&c->attn_weights, 4, N, H, L, S)
                                   : shape_is(&c->attn_weights, 3, H, L, S, 0));
        CHECK(w_ok, "%s: expected attn_weights shape", c->name);
    }

    /* trace: always batch-major; the biggest cases have none (to keep the repository small) */
    bool any_stage = false;
    for (int s = 0; s < MHA_TRACE_NSTAGES; s++)
        any_stage = any_stage || c->trace[s].present;
    if (!any_stage)
        return;
    int64_t want[MHA_TRACE_NSTAGES][5] = {
        {3, N, L, Dq},       {3, N, S0, Dkv},    {3, N, S0, Dkv},    {4, N, H, L, hd},
        {4, N, Hkv, S, hd},  {4, N, Hkv, S, hd}, {4, N, H, L, S},    {4, N, H, L, S},
        {4, N, H, L, hd},    {3, N, L, Dq},      {3, N, L, E},
    };
    bool trace_ok = true;
    for (int s = 0; s < MHA_TRACE_NSTAGES; s++)
        trace_ok = trace_ok && shape_is(&c->trace[s], (int)want[s][0], want[s][1], want[s][2],
                                        want[s][3], want[s][4]);
    if (!CHECK(trace_ok, "%s: trace stage shapes", c->name))
        return;
    check_rows(c, N * H * L, S, hd);
    /* the trace's output is the expected output, batch-major */
    const float *to = c->trace[MHA_TRACE_OUTPUT].data;
    bool same = true;
    for (int64_t b = 0; b < N; b++)
        for (int64_t l = 0; l < L; l++)
            for (int64_t e = 0; e < E; e++) {
                int64_t i = batched && !k->batch_first ? (l * N + b) * E + e : (b * L + l) * E + e;
                same = same && check_close(to[(b * L + l) * E + e], c->output.data[i]);
            }
    CHECK(same, "%s: trace output and expected output differ", c->name);
}

/* Every case of dir checked; with coverage true, the counts of what the committed cases cross. */
static void check_dir(const char *dir, bool coverage, bool variants)
{
    golden_case c;
    char msg[512];
    char **paths = NULL;
    int n = golden_list(&paths, dir);
    CHECK(n >= (!coverage ? 1 : variants ? 120 : 150), "%d golden cases in %s", n, dir);
    int n_full = 0, n_unbatched = 0, n_sf = 0, n_causal = 0, n_kvdim = 0, n_self = 0;
    int n_hd = 0, n_gqa = 0, n_rope = 0, n_alibi = 0, n_window = 0, n_pos = 0, n_kpos = 0;
    int n_decode = 0, n_heads = 0, n_avg = 0, n_bkv = 0, n_za = 0, n_nobias = 0, n_masks = 0;
    for (int i = 0; i < n; i++) {
        CHECK(i == 0 || strcmp(paths[i - 1], paths[i]) < 0, "listing sorted");
        if (!CHECK(golden_load(&c, paths[i], msg, sizeof msg) == 0, "%s", msg))
            continue;
        check_case(&c);
        n_full += c.fully_masked_rows;
        n_unbatched += c.query.ndim == 2;
        n_sf += c.query.ndim == 3 && !c.config.batch_first;
        n_causal += c.is_causal;
        n_kvdim += c.config.kdim != c.config.embed_dim || c.config.vdim != c.config.embed_dim;
        n_self += !c.key.present;
        n_hd += c.config.head_dim * c.config.num_heads != c.config.embed_dim;
        n_gqa += kv_heads_of(&c.config) < c.config.num_heads;
        n_rope += c.config.rope;
        n_alibi += c.config.alibi;
        n_window += c.config.window > 0;
        n_pos += c.positions.present;
        n_kpos += c.key_positions.present;
        const int l_axis = c.query.ndim == 3 && c.config.batch_first ? 1 : 0;
        n_decode += c.positions.present && c.query.shape[l_axis] == 1; /* one query */
        n_heads += c.need_weights && !c.average_attn_weights;
        n_avg += c.need_weights && c.average_attn_weights;
        n_bkv += c.config.add_bias_kv;
        n_za += c.config.add_zero_attn;
        n_nobias += !c.config.bias;
        n_masks += c.key_padding_mask.present || c.attn_mask.present;
        golden_free(&c);
    }
    if (coverage)
        CHECK(n_full >= (variants ? 3 : 10) && n_unbatched >= 10 && n_sf >= 10 && n_causal >= 10 && n_kvdim >= 10 &&
                  n_self >= 10,
              "coverage: %d fully masked, %d unbatched, %d seq-first, %d causal, %d kdim/vdim, %d self",
              n_full, n_unbatched, n_sf, n_causal, n_kvdim, n_self);
    if (coverage && variants)
        CHECK(n_hd >= 10 && n_gqa >= 10 && n_rope >= 10 && n_alibi >= 10 && n_window >= 10 &&
                  n_pos >= 10 && n_kpos >= 3 && n_decode >= 10 && n_heads >= 10 && n_avg >= 10 &&
                  n_bkv >= 5 && n_za >= 5 && n_nobias >= 3 && n_masks >= 10,
              "variant coverage: head_dim %d, GQA %d, rope %d, alibi %d, window %d, positions %d, "
              "key_positions %d, decode steps %d, per-head %d, averaged %d, bias_kv %d, zero_attn %d, "
              "no bias %d, masks %d",
              n_hd, n_gqa, n_rope, n_alibi, n_window, n_pos, n_kpos, n_decode, n_heads, n_avg, n_bkv,
              n_za, n_nobias, n_masks);
    golden_list_free(paths, n);
}

int main(int argc, char **argv)
{
    test_base64();
    golden_case c;
    char msg[512];
    CHECK(golden_load(&c, "tests/golden/README.md", msg, sizeof msg) == -1 && strstr(msg, "README"),
          "a file that is not JSON is refused with its name");
    golden_free(&c);
    golden_free(NULL);
    if (argc > 1) {
        check_dir(argv[1], false, false);
    } else {
        check_dir("tests/golden", true, false);
        check_dir("tests/golden_variants", true, true);
    }
    return check_report();
}
