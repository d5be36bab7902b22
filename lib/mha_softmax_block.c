/*
 * mha_softmax_block.c - the online softmax over one block of keys, and the exp it runs on.
 *
 * The attention core walks the keys in blocks (mha_forward.c). For each query row it keeps the
 * running maximum m and the running sum l of exp(score - m); a block whose scores raise the maximum
 * rescales what came before by alpha = exp(m_old - m_new). At the end, the row's weights are
 * exp(score - m) / l and its output Σ weights·v, as torch's softmax gives them, without ever holding
 * a whole row of scores.
 *
 * exp here only ever sees x = score - max <= 0, or -inf (a masked key), with fewer instructions
 * than a general expf needs (13 vector instructions, where Cephes' expf takes 19):
 *   - n = round(x·log2 e) from one FMA with 1.5·2^23 + 127 (the "magic number" rounding), whose low
 *     bits then hold n + 127, the result's exponent bits, for one shift;
 *   - r = x - n·ln 2 in two FMAs (ln 2's high part exact in n·LN2_HI; one step with a rounded ln 2
 *     was 4.5 ulp off at x = -86);
 *   - e^r on [-ln2/2, ln2/2] by a polynomial of degree 6 in Horner's form, 1 + r(1 + r(c2 + ...)):
 *     six FMAs. Its coefficients are a minimax fit of e^r's relative error (Lawson's iteration on
 *     20001 Chebyshev points, in double, then rounded to float): 3.6e-9 with the rounded ones,
 *     under a tenth of an ulp. Against exp in double over every float x in [-87.3, 0] (all
 *     normal results) this exp is at most 0.88 ulp off, 0.065 on average; Cephes' degree-7
 *     polynomial in its 1 + r + r²·p form, which this replaced, 1.26 and 0.076 (two instructions
 *     more);
 *   - no upper clamp, and the lower clamp at -87.8, where n = -127 makes the exponent bits zero,
 *     gives exactly 0 for -inf and every x below about -87.69 (e^-87.69 is 8e-39, under FLT_MIN)
 *     without a compare and mask; a NaN (from an input that overflowed to inf) stays NaN, so the
 *     pass's output shows it.
 * The block's exps run four vectors side by side (exp_le0_*_n): one exp is a chain of dependent
 * instructions. With the shorter exp and the four, a 64 x 256 block's softmax went from 0.95 to
 * 0.82 core cycles a score on Zen 4 (AVX-512), 1.23 to 1.09 on its AVX2 path; XL's core 1.6% less
 * time on one thread, L = S = 8192's 1.1% on two. Every ISA computes the same operations in the
 * same order for the exps and the maxima, so the AVX2, AVX-512 and portable code give the same bits
 * there; a row's sum is taken in each ISA's vector lanes (in another order on each, the same bits
 * for a row alone as among others: test_engine_softmax_block).
 */
#include "mha_kernels.h"
#include "mha_softmax_block.h"

#include <math.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86_KERNELS 1
#endif

#define EXP_FLUSH -87.8f   /* x below this gives exactly 0 (n = -127: exponent bits 0)       */
#define MAGIC 12583039.0f  /* 1.5 · 2^23 + 127: adding it rounds to an integer; its bits hold n + 127 */
#define LOG2E 1.44269504088896341f
#define LN2_HI 0.693359375f
#define LN2_LO -2.12194440e-4f
#define C2 4.9999994040e-01f
#define C3 1.6666521132e-01f
#define C4 4.1668388993e-02f
#define C5 8.3687454462e-03f
#define C6 1.3814540580e-03f

/* The same arithmetic one float at a time (fused multiply-adds where the vector code has them). */
static float exp_le0_portable(float x)
{
    x = x < EXP_FLUSH ? EXP_FLUSH : x; /* -inf too; NaN stays NaN */
    const float t = fmaf(x, LOG2E, MAGIC);
    const float n = t - MAGIC;
    float r = fmaf(-n, LN2_HI, x);
    r = fmaf(-n, LN2_LO, r);
    float p = fmaf(C6, r, C5);
    p = fmaf(p, r, C4);
    p = fmaf(p, r, C3);
    p = fmaf(p, r, C2);
    p = fmaf(p, r, 1.0f);
    p = fmaf(p, r, 1.0f);
    uint32_t tb;
    memcpy(&tb, &t, sizeof tb);
    const uint32_t eb = tb << 23;
    float e;
    memcpy(&e, &eb, sizeof e);
    return p * e;
}

/* alpha[r] = exp(m_old[r] - m_new[r]), 1 where m_new is -inf (the row has seen no key yet). */
static void alphas_portable(float *alpha, const float *m_old, const float *m_new, int64_t rows)
{
    for (int64_t r = 0; r < rows; r++)
        alpha[r] = m_new[r] == -INFINITY ? 1.0f : exp_le0_portable(m_old[r] - m_new[r]);
}

/* The phases of a block (mha_softmax_block_max_isa, then _exp_isa): MAXIMA writes m_new (and the
 * block's own maxima to bmax when it is not NULL), EXPS the exps, sums and alphas from m_new. */
enum { MAXIMA = 1, EXPS = 2 };

static void block_portable(float *sc, int64_t ld, int64_t rows, int64_t n, const float *m,
                           float *sums, float *alpha, float *m_new, float *bmax, int phases)
{
    for (int64_t r = 0; r < rows && (phases & MAXIMA); r++) {
        const float *row = sc + r * ld;
        float mx = m[r], bx = -INFINITY;
        for (int64_t j = 0; j < n; j++) {
            mx = row[j] > mx ? row[j] : mx;
            bx = row[j] > bx ? row[j] : bx;
        }
        m_new[r] = mx;
        if (bmax)
            bmax[r] = bx;
    }
    if (!(phases & EXPS))
        return;
    for (int64_t r = 0; r < rows; r++) {
        float *row = sc + r * ld;
        const float mx = m_new[r];
        if (mx == -INFINITY) {
            memset(row, 0, (size_t)n * sizeof(float));
            continue;
        }
        float sum = 0.0f;
        for (int64_t j = 0; j < n; j++) {
            row[j] = exp_le0_portable(row[j] - mx);
            sum += row[j];
        }
        sums[r] = sum;
    }
    alphas_portable(alpha, m, m_new, rows);
}

#ifdef HAVE_X86_KERNELS
/* exp of N vectors in place, step by step across them: one exp is a chain of ~15 dependent
 * instructions, and with one or two in a loop body Zen 3's floating-point scheduler fills with
 * waiting links before the next iteration's can start (1.7 cycles per element for a 64 x 128
 * block; four side by side keep both FMA pipes busy). Each vector gets the same operations
 * whatever N: the same bits. */
#define EXP_MAX_N 4
#define EACH(stmt) _Pragma("GCC unroll 4") for (int i = 0; i < N; i++) { stmt; }
/* One definition for both vector widths (V the vector type, P the intrinsics' prefix, W the width
 * in bits), so that both run the same operations in the same order. */
#define DEFINE_EXP_LE0_N(NAME, TARGET, V, P, W)                                                     \
    __attribute__((target(TARGET), always_inline)) static inline void NAME(V *x, const int N)     \
    {                                                                                              \
        V t[EXP_MAX_N], n[EXP_MAX_N], r[EXP_MAX_N], p[EXP_MAX_N];                                 \
        EACH(x[i] = P##_max_ps(P##_set1_ps(EXP_FLUSH), x[i])) /* NaN (2nd operand) stays */        \
        EACH(t[i] = P##_fmadd_ps(x[i], P##_set1_ps(LOG2E), P##_set1_ps(MAGIC)))                    \
        EACH(n[i] = P##_sub_ps(t[i], P##_set1_ps(MAGIC)))                                          \
        EACH(r[i] = P##_fnmadd_ps(n[i], P##_set1_ps(LN2_HI), x[i]))                                \
        EACH(r[i] = P##_fnmadd_ps(n[i], P##_set1_ps(LN2_LO), r[i]))                                \
        EACH(p[i] = P##_fmadd_ps(P##_set1_ps(C6), r[i], P##_set1_ps(C5)))                          \
        EACH(p[i] = P##_fmadd_ps(p[i], r[i], P##_set1_ps(C4)))                                     \
        EACH(p[i] = P##_fmadd_ps(p[i], r[i], P##_set1_ps(C3)))                                     \
        EACH(p[i] = P##_fmadd_ps(p[i], r[i], P##_set1_ps(C2)))                                     \
        EACH(p[i] = P##_fmadd_ps(p[i], r[i], P##_set1_ps(1.0f)))                                   \
        EACH(p[i] = P##_fmadd_ps(p[i], r[i], P##_set1_ps(1.0f)))                                   \
        EACH(x[i] = P##_mul_ps(p[i], P##_castsi##W##_ps(P##_slli_epi32(P##_castps_si##W(t[i]), 23)))) \
    }
DEFINE_EXP_LE0_N(exp_le0_avx2_n, "avx2,fma", __m256, _mm256, 256)
DEFINE_EXP_LE0_N(exp_le0_avx512_n, "avx512f", __m512, _mm512, 512)
#undef DEFINE_EXP_LE0_N
/* A block row's four vectors from row (LANES floats each) in place: exp(x - vm) four side by side,
 * added to the row's two running sums in the order s0, s1, s0, s1. */
#define DEFINE_EXPS4(NAME, EXP_N, TARGET, V, P, LANES)                                             \
    __attribute__((target(TARGET), always_inline)) static inline void NAME(float *row, V vm,      \
                                                                           V *s0, V *s1)          \
    {                                                                                              \
        V e[4];                                                                                    \
        _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) e[i] =                                 \
            P##_sub_ps(P##_loadu_ps(row + LANES * i), vm);                                         \
        EXP_N(e, 4);                                                                               \
        _Pragma("GCC unroll 4") for (int i = 0; i < 4; i++) P##_storeu_ps(row + LANES * i, e[i]);  \
        *s0 = P##_add_ps(*s0, e[0]);                                                               \
        *s1 = P##_add_ps(*s1, e[1]);                                                               \
        *s0 = P##_add_ps(*s0, e[2]);                                                               \
        *s1 = P##_add_ps(*s1, e[3]);                                                               \
    }
DEFINE_EXPS4(exps4_avx2, exp_le0_avx2_n, "avx2,fma", __m256, _mm256, 8)
DEFINE_EXPS4(exps4_avx512, exp_le0_avx512_n, "avx512f", __m512, _mm512, 16)
#undef DEFINE_EXPS4
#undef EACH

__attribute__((target("avx2,fma"), always_inline)) static inline __m256 exp_le0_avx2(__m256 x)
{
    exp_le0_avx2_n(&x, 1);
    return x;
}

__attribute__((target("avx512f"), always_inline)) static inline __m512 exp_le0_avx512(__m512 x)
{
    exp_le0_avx512_n(&x, 1);
    return x;
}

/* A block row's whole vectors [0, body) in place (body a multiple of LANES): exp(x - vm) four
 * vectors side by side, then two (two chains: the exp's latency overlaps), then one, added to the
 * row's two running sums in that order. The masked tail is each kernel's own. */
#define DEFINE_EXPS_BODY(NAME, EXPS4, EXP, TARGET, V, P, LANES)                                    \
    __attribute__((target(TARGET), always_inline)) static inline void NAME(                       \
        float *row, int64_t body, V vm, V *s0, V *s1)                                              \
    {                                                                                              \
        int64_t j = 0;                                                                             \
        for (; j + 4 * LANES <= body; j += 4 * LANES)                                              \
            EXPS4(row + j, vm, s0, s1);                                                            \
        for (; j + 2 * LANES <= body; j += 2 * LANES) {                                            \
            const V e0 = EXP(P##_sub_ps(P##_loadu_ps(row + j), vm));                               \
            const V e1 = EXP(P##_sub_ps(P##_loadu_ps(row + j + LANES), vm));                       \
            P##_storeu_ps(row + j, e0);                                                            \
            P##_storeu_ps(row + j + LANES, e1);                                                    \
            *s0 = P##_add_ps(*s0, e0);                                                             \
            *s1 = P##_add_ps(*s1, e1);                                                             \
        }                                                                                          \
        for (; j < body; j += LANES) {                                                             \
            const V e0 = EXP(P##_sub_ps(P##_loadu_ps(row + j), vm));                               \
            P##_storeu_ps(row + j, e0);                                                            \
            *s0 = P##_add_ps(*s0, e0);                                                             \
        }                                                                                          \
    }
DEFINE_EXPS_BODY(exps_body_avx2, exps4_avx2, exp_le0_avx2, "avx2,fma", __m256, _mm256, 8)
DEFINE_EXPS_BODY(exps_body_avx512, exps4_avx512, exp_le0_avx512, "avx512f", __m512, _mm512, 16)
#undef DEFINE_EXPS_BODY

/* Lanes [0, k) of 8 (k in 0..8) as a maskload/maskstore mask. */
__attribute__((target("avx2"))) static inline __m256i lanes8(int64_t k)
{
    return _mm256_cmpgt_epi32(_mm256_set1_epi32((int)k), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
}

__attribute__((target("avx2,fma"))) static float hsum8(__m256 v)
{
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

__attribute__((target("avx2,fma"))) static float hmax8(__m256 v)
{
    __m128 s = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_max_ps(s, _mm_movehl_ps(s, s));
    s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
    return _mm_cvtss_f32(s);
}

/* max(m, the row's n scores), and the row's own maximum to *bmax when it is not NULL (inlined
 * twice: without it, the loop does nothing more than before). Masked-off lanes read as -inf. */
__attribute__((target("avx2,fma"), always_inline)) static inline float
row_max_avx2(const float *row, int64_t body, __m256i tail, int64_t n, float m, float *bmax)
{
    const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
    __m256 vmax = _mm256_set1_ps(m), bx = neg_inf;
    for (int64_t j = 0; j < body; j += 8) {
        const __m256 x = _mm256_loadu_ps(row + j);
        vmax = _mm256_max_ps(vmax, x);
        if (bmax)
            bx = _mm256_max_ps(bx, x);
    }
    if (body < n) {
        const __m256 x = _mm256_blendv_ps(neg_inf, _mm256_maskload_ps(row + body, tail),
                                          _mm256_castsi256_ps(tail));
        vmax = _mm256_max_ps(vmax, x);
        if (bmax)
            bx = _mm256_max_ps(bx, x);
    }
    if (bmax)
        *bmax = hmax8(bx);
    return hmax8(vmax);
}

__attribute__((target("avx2,fma"))) static void block_avx2(float *sc, int64_t ld, int64_t rows,
                                                          int64_t n, const float *m, float *sums,
                                                          float *alpha, float *m_new, float *bmax,
                                                          int phases)
{
    const int64_t body = n / 8 * 8;
    const __m256i tail = lanes8(n - body);
    const __m256 neg_inf = _mm256_set1_ps(-INFINITY);
    /* every row's maximum first: the reductions do not wait on each other, nor the exps on them */
    for (int64_t r = 0; r < rows && (phases & MAXIMA); r++) {
        if (bmax)
            m_new[r] = row_max_avx2(sc + r * ld, body, tail, n, m[r], bmax + r);
        else
            m_new[r] = row_max_avx2(sc + r * ld, body, tail, n, m[r], NULL);
    }
    if (!(phases & EXPS))
        return;
    for (int64_t r = 0; r < rows; r++) {
        float *row = sc + r * ld;
        const float mx = m_new[r];
        if (mx == -INFINITY) {
            memset(row, 0, (size_t)n * sizeof(float));
            continue;
        }
        const __m256 vm = _mm256_set1_ps(mx);
        __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
        exps_body_avx2(row, body, vm, &s0, &s1);
        if (body < n) {
            const __m256 x = _mm256_blendv_ps(neg_inf, _mm256_maskload_ps(row + body, tail),
                                              _mm256_castsi256_ps(tail));
            const __m256 e = exp_le0_avx2(_mm256_sub_ps(x, vm)); /* -inf lanes give 0 */
            _mm256_maskstore_ps(row + body, tail, e);
            s1 = _mm256_add_ps(s1, e);
        }
        sums[r] = hsum8(_mm256_add_ps(s0, s1));
    }
    for (int64_t r = 0; r < rows; r += 8) { /* the last rows in a masked vector: the same bits */
        const __m256i k = lanes8(rows - r < 8 ? rows - r : 8);
        const __m256 mo = _mm256_maskload_ps(m + r, k), mn = _mm256_maskload_ps(m_new + r, k);
        const __m256 a = exp_le0_avx2(_mm256_sub_ps(mo, mn));
        const __m256 none = _mm256_cmp_ps(mn, neg_inf, _CMP_EQ_OQ); /* no key yet: alpha 1 */
        _mm256_maskstore_ps(alpha + r, k, _mm256_blendv_ps(a, _mm256_set1_ps(1.0f), none));
    }
}

/* As row_max_avx2. */
__attribute__((target("avx512f"), always_inline)) static inline float
row_max_avx512(const float *row, int64_t body, __mmask16 tail, float m, float *bmax)
{
    const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
    __m512 vmax = _mm512_set1_ps(m), bx = neg_inf;
    for (int64_t j = 0; j < body; j += 16) {
        const __m512 x = _mm512_loadu_ps(row + j);
        vmax = _mm512_max_ps(vmax, x);
        if (bmax)
            bx = _mm512_max_ps(bx, x);
    }
    if (tail) {
        const __m512 x = _mm512_mask_loadu_ps(neg_inf, tail, row + body);
        vmax = _mm512_max_ps(vmax, x);
        if (bmax)
            bx = _mm512_max_ps(bx, x);
    }
    if (bmax)
        *bmax = _mm512_reduce_max_ps(bx);
    return _mm512_reduce_max_ps(vmax);
}

/* The lane sums of 16 vectors, lane r of the result v[r]'s: each summed as _mm512_reduce_add_ps
 * sums one (the upper 8 lanes onto the lower, then 4, 2, 1; GCC's avx512fintrin.h), so with its
 * bits, but 16 rows in 15 shuffle-and-add steps and a permute where one at a time took 16 x 7
 * (on S's rows of 32 keys the reductions were a third of the block's time). */
__attribute__((target("avx512f"), always_inline)) static inline __m512
reduce_add16_avx512(const __m512 v[16])
{
    __m512 u[8], w[4];
    for (int k = 0; k < 8; k++) /* lanes 0-7: row 2k's 8 sums hi + lo, 8-15: row 2k+1's */
        u[k] = _mm512_add_ps(_mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], _MM_SHUFFLE(3, 2, 3, 2)),
                             _mm512_shuffle_f32x4(v[2 * k], v[2 * k + 1], _MM_SHUFFLE(1, 0, 1, 0)));
    for (int j = 0; j < 4; j++) /* 128-bit lane q: row 4j + q's 4 sums */
        w[j] = _mm512_add_ps(_mm512_shuffle_f32x4(u[2 * j], u[2 * j + 1], _MM_SHUFFLE(3, 1, 3, 1)),
                             _mm512_shuffle_f32x4(u[2 * j], u[2 * j + 1], _MM_SHUFFLE(2, 0, 2, 0)));
    /* lane q: rows q and 4 + q (x), 8 + q and 12 + q (y), 2 sums each: [0] + [2], [1] + [3] */
    const __m512 x = _mm512_add_ps(_mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_ps(w[0], w[1], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m512 y = _mm512_add_ps(_mm512_shuffle_ps(w[2], w[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                   _mm512_shuffle_ps(w[2], w[3], _MM_SHUFFLE(3, 2, 3, 2)));
    /* lane 4q + t: row 4t + q, its [0] + [1] */
    const __m512 z = _mm512_add_ps(_mm512_shuffle_ps(x, y, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_ps(x, y, _MM_SHUFFLE(3, 1, 3, 1)));
    const __m512i rows = _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15);
    return _mm512_permutexvar_ps(rows, z);
}

__attribute__((target("avx512f"))) static void block_avx512(float *sc, int64_t ld, int64_t rows,
                                                            int64_t n, const float *m, float *sums,
                                                            float *alpha, float *m_new,
                                                            float *bmax, int phases)
{
    const int64_t body = n / 16 * 16;
    const __mmask16 tail = (__mmask16)((1u << (n - body)) - 1);
    const __m512 neg_inf = _mm512_set1_ps(-INFINITY);
    /* every row's maximum first: the reductions do not wait on each other, nor the exps on them */
    for (int64_t r = 0; r < rows && (phases & MAXIMA); r++) {
        if (bmax)
            m_new[r] = row_max_avx512(sc + r * ld, body, tail, m[r], bmax + r);
        else
            m_new[r] = row_max_avx512(sc + r * ld, body, tail, m[r], NULL);
    }
    if (!(phases & EXPS))
        return;
    __m512 part[16]; /* rows r - r % 16 ... r's lanes to sum, 16 rows at a time */
    const int64_t batched = rows / 16 * 16;
    for (int64_t r = 0; r < rows; r++) {
        float *row = sc + r * ld;
        const float mx = m_new[r];
        __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
        if (mx == -INFINITY) { /* no key: its exps 0 (its sum is not used) */
            memset(row, 0, (size_t)n * sizeof(float));
        } else {
            const __m512 vm = _mm512_set1_ps(mx);
            exps_body_avx512(row, body, vm, &s0, &s1);
            if (tail) {
                const __m512 e = exp_le0_avx512(
                    _mm512_sub_ps(_mm512_mask_loadu_ps(neg_inf, tail, row + body), vm));
                _mm512_mask_storeu_ps(row + body, tail, e);
                s1 = _mm512_add_ps(s1, e);
            }
        }
        if (r < batched) {
            part[r % 16] = _mm512_add_ps(s0, s1);
            if (r % 16 == 15)
                _mm512_storeu_ps(sums + r - 15, reduce_add16_avx512(part));
        } else {
            sums[r] = _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
        }
    }
    for (int64_t r = 0; r < rows; r += 16) { /* the last rows in a masked vector: the same bits */
        const __mmask16 k = (__mmask16)(rows - r < 16 ? (1u << (rows - r)) - 1 : 0xffffu);
        const __m512 mo = _mm512_maskz_loadu_ps(k, m + r), mn = _mm512_maskz_loadu_ps(k, m_new + r);
        const __m512 a = exp_le0_avx512(_mm512_sub_ps(mo, mn));
        const __mmask16 none = _mm512_cmp_ps_mask(mn, neg_inf, _CMP_EQ_OQ);
        _mm512_mask_storeu_ps(alpha + r, k, _mm512_mask_mov_ps(a, none, _mm512_set1_ps(1.0f)));
    }
}
#endif

static bool block_isa(mha_isa isa, float *sc, int64_t ld, int64_t rows, int64_t n, float *m,
                      float *l, float *alpha, float *tmp, float *bmax, int phases)
{
    if (!mha_isa_usable(isa))
        return false;
    float *m_new = tmp, *sums = tmp + rows;
    switch (isa) {
#ifdef HAVE_X86_KERNELS
    case MHA_ISA_AVX512:
        block_avx512(sc, ld, rows, n, m, sums, alpha, m_new, bmax, phases);
        break;
    case MHA_ISA_AVX2:
        block_avx2(sc, ld, rows, n, m, sums, alpha, m_new, bmax, phases);
        break;
#endif
    default:
        block_portable(sc, ld, rows, n, m, sums, alpha, m_new, bmax, phases);
    }
    if (!(phases & EXPS))
        return true;
    /* l = l·alpha + the block's sum; m = the new maximum (rows that saw no key keep l = 0) */
    for (int64_t r = 0; r < rows; r++) {
        if (m_new[r] != -INFINITY)
            l[r] = l[r] * alpha[r] + sums[r];
        m[r] = m_new[r];
    }
    return true;
}

bool mha_softmax_block_isa(mha_isa isa, float *sc, int64_t ld, int64_t rows, int64_t n, float *m,
                           float *l, float *alpha, float *tmp)
{
    return block_isa(isa, sc, ld, rows, n, m, l, alpha, tmp, NULL, MAXIMA | EXPS);
}

bool mha_softmax_block_max_isa(mha_isa isa, const float *sc, int64_t ld, int64_t rows, int64_t n,
                               const float *m, float *tmp, float *bmax)
{
    /* the maxima phase reads sc and m only */
    return block_isa(isa, (float *)sc, ld, rows, n, (float *)m, NULL, NULL, tmp, bmax, MAXIMA);
}

bool mha_softmax_block_exp_isa(mha_isa isa, float *sc, int64_t ld, int64_t rows, int64_t n,
                               float *m, float *l, float *alpha, float *tmp)
{
    return block_isa(isa, sc, ld, rows, n, m, l, alpha, tmp, NULL, EXPS);
}

#ifdef HAVE_X86_KERNELS
__attribute__((target("avx512f"))) static int64_t exp_array_avx512(float *out, const float *in,
                                                                   int64_t n)
{
    int64_t j = 0;
    for (; j + 16 <= n; j += 16)
        _mm512_storeu_ps(out + j, exp_le0_avx512(_mm512_loadu_ps(in + j)));
    if (j < n) { /* the tail in one masked vector (lanes past n read as 0, never stored) */
        const __mmask16 k = (__mmask16)((1u << (n - j)) - 1);
        _mm512_mask_storeu_ps(out + j, k, exp_le0_avx512(_mm512_maskz_loadu_ps(k, in + j)));
        j = n;
    }
    return j;
}

__attribute__((target("avx2,fma"))) static int64_t exp_array_avx2(float *out, const float *in,
                                                                  int64_t n)
{
    int64_t j = 0;
    for (; j + 8 <= n; j += 8)
        _mm256_storeu_ps(out + j, exp_le0_avx2(_mm256_loadu_ps(in + j)));
    if (j < n) { /* the tail in one masked vector (lanes past n read as 0, never stored) */
        const __m256i k = lanes8(n - j);
        _mm256_maskstore_ps(out + j, k, exp_le0_avx2(_mm256_maskload_ps(in + j, k)));
        j = n;
    }
    return j;
}
#endif

bool mha_exp_le0_array_isa(mha_isa isa, float *out, const float *in, int64_t n)
{
    if (!mha_isa_usable(isa))
        return false;
    int64_t j = 0;
#ifdef HAVE_X86_KERNELS
    if (isa == MHA_ISA_AVX512)
        j = exp_array_avx512(out, in, n);
    else if (isa == MHA_ISA_AVX2)
        j = exp_array_avx2(out, in, n);
#endif
    for (; j < n; j++) /* the portable path: the same bits one at a time */
        out[j] = exp_le0_portable(in[j]);
    return true;
}
