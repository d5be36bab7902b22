/*
 * mha_select_keys.c - a row's order keys and the keys up to a threshold, for a top-k that holds
 * the whole row (mha_topk_row, mha_select_topk.c): each float as an unsigned integer whose order is
 * the values' descending order (mha_order_key), and the positions of those at or under a bound,
 * packed to the front in key order. Memory-bound loops: the AVX2 kernels serve the AVX-512 kernel
 * set too (AVX-512's compress store, the one-instruction pack, is microcoded and slow on Zen 4),
 * but for the two in one pass, which packs with the compress into a register and a full store;
 * the portable loops are the reference (tests/engine/test_select_runs.c checks both on every ISA).
 */
#include "mha_select.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define HAVE_X86_KERNELS 1
#endif

static void order_keys_portable(uint32_t *key, const float *x, int64_t n, uint32_t *lo,
                                uint32_t *hi)
{
    uint32_t l = UINT32_MAX, h = 0;
    for (int64_t j = 0; j < n; j++) {
        const uint32_t d = mha_order_key(x[j]);
        key[j] = d;
        l = d < l ? d : l;
        h = d > h ? d : h;
    }
    *lo = l;
    *hi = h;
}

static int64_t keys_upto_portable(int32_t *idx, uint32_t *kout, const uint32_t *key, int64_t n,
                                  uint32_t thr)
{
    int64_t c = 0;
    for (int64_t j = 0; j < n; j++)
        if (key[j] <= thr) {
            idx[c] = (int32_t)j;
            kout[c++] = key[j];
        }
    return c;
}

#ifdef HAVE_X86_KERNELS
/* order_keys_avx2 and keys_upto_avx2 in one pass, 16 keys at a time: the keys at or under thr
 * packed to the front in registers (the compress to a register, then a full store: the compress
 * straight to memory is the slow one on Zen 4), every key stored for a row the bound does not
 * serve. Stores stay within the first n places (c <= j). */
__attribute__((target("avx512f"))) static int64_t
order_keys_upto_avx512(uint32_t *key, int32_t *idx, uint32_t *kout, const float *x, int64_t n,
                       uint32_t thr, uint32_t *lo, uint32_t *hi)
{
    const __m512i low31 = _mm512_set1_epi32(0x7FFFFFFF), vt = _mm512_set1_epi32((int)thr);
    const __m512i sixteen = _mm512_set1_epi32(16);
    __m512i pos = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m512i vlo = _mm512_set1_epi32(-1), vhi = _mm512_setzero_si512();
    int64_t c = 0, j = 0;
    for (; j + 16 <= n; j += 16) {
        const __m512 v = _mm512_add_ps(_mm512_loadu_ps(x + j), _mm512_setzero_ps());
        const __m512i b = _mm512_castps_si512(v);
        __m512i d = _mm512_xor_si512(b, _mm512_andnot_si512(_mm512_srai_epi32(b, 31), low31));
        d = _mm512_mask_mov_epi32(d, _mm512_cmp_ps_mask(v, v, _CMP_UNORD_Q), _mm512_set1_epi32(-1));
        _mm512_storeu_si512(key + j, d);
        vlo = _mm512_min_epu32(vlo, d);
        vhi = _mm512_max_epu32(vhi, d);
        const __mmask16 keep = _mm512_cmple_epu32_mask(d, vt);
        _mm512_storeu_si512(idx + c, _mm512_maskz_compress_epi32(keep, pos));
        _mm512_storeu_si512(kout + c, _mm512_maskz_compress_epi32(keep, d));
        c += __builtin_popcount(keep);
        pos = _mm512_add_epi32(pos, sixteen);
    }
    uint32_t l = (uint32_t)_mm512_reduce_min_epu32(vlo), h = (uint32_t)_mm512_reduce_max_epu32(vhi);
    _mm256_zeroupper(); /* scalar code follows (check_vector_exits.sh) */
    for (; j < n; j++) {
        const uint32_t d = mha_order_key(x[j]);
        key[j] = d;
        l = d < l ? d : l;
        h = d > h ? d : h;
        if (d <= thr) {
            idx[c] = (int32_t)j;
            kout[c++] = d;
        }
    }
    *lo = l;
    *hi = h;
    return c;
}

/* mha_order_key, 8 at a time: -0 + 0 is +0; the sign spread over the word chooses between the bits
 * and their complement below the sign; an unordered compare makes NaN all ones. */
__attribute__((target("avx2"))) static void order_keys_avx2(uint32_t *key, const float *x,
                                                            int64_t n, uint32_t *lo, uint32_t *hi)
{
    const __m256i low31 = _mm256_set1_epi32(0x7FFFFFFF);
    __m256i vlo = _mm256_set1_epi32(-1), vhi = _mm256_setzero_si256();
    int64_t j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256 v = _mm256_add_ps(_mm256_loadu_ps(x + j), _mm256_setzero_ps());
        const __m256i b = _mm256_castps_si256(v);
        __m256i d = _mm256_xor_si256(b, _mm256_andnot_si256(_mm256_srai_epi32(b, 31), low31));
        d = _mm256_or_si256(d, _mm256_castps_si256(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)));
        _mm256_storeu_si256((__m256i *)(key + j), d);
        vlo = _mm256_min_epu32(vlo, d);
        vhi = _mm256_max_epu32(vhi, d);
    }
    uint32_t ls[8], hs[8];
    _mm256_storeu_si256((__m256i *)ls, vlo);
    _mm256_storeu_si256((__m256i *)hs, vhi);
    _mm256_zeroupper(); /* scalar code follows (check_vector_exits.sh) */
    uint32_t l = ls[0], h = hs[0];
    for (int i = 1; i < 8; i++) {
        l = ls[i] < l ? ls[i] : l;
        h = hs[i] > h ? hs[i] : h;
    }
    for (; j < n; j++) {
        const uint32_t d = mha_order_key(x[j]);
        key[j] = d;
        l = d < l ? d : l;
        h = d > h ? d : h;
    }
    *lo = l;
    *hi = h;
}

/* For each 8-bit mask, the positions of its set bits in order, 4 bits each from the lowest: the
 * lanes keys_upto_avx2 packs to the front. */
static const uint32_t packed_lanes[256] = {
    0x00000000, 0x00000000, 0x00000001, 0x00000010, 0x00000002, 0x00000020, 0x00000021, 0x00000210,
    0x00000003, 0x00000030, 0x00000031, 0x00000310, 0x00000032, 0x00000320, 0x00000321, 0x00003210,
    0x00000004, 0x00000040, 0x00000041, 0x00000410, 0x00000042, 0x00000420, 0x00000421, 0x00004210,
    0x00000043, 0x00000430, 0x00000431, 0x00004310, 0x00000432, 0x00004320, 0x00004321, 0x00043210,
    0x00000005, 0x00000050, 0x00000051, 0x00000510, 0x00000052, 0x00000520, 0x00000521, 0x00005210,
    0x00000053, 0x00000530, 0x00000531, 0x00005310, 0x00000532, 0x00005320, 0x00005321, 0x00053210,
    0x00000054, 0x00000540, 0x00000541, 0x00005410, 0x00000542, 0x00005420, 0x00005421, 0x00054210,
    0x00000543, 0x00005430, 0x00005431, 0x00054310, 0x00005432, 0x00054320, 0x00054321, 0x00543210,
    0x00000006, 0x00000060, 0x00000061, 0x00000610, 0x00000062, 0x00000620, 0x00000621, 0x00006210,
    0x00000063, 0x00000630, 0x00000631, 0x00006310, 0x00000632, 0x00006320, 0x00006321, 0x00063210,
    0x00000064, 0x00000640, 0x00000641, 0x00006410, 0x00000642, 0x00006420, 0x00006421, 0x00064210,
    0x00000643, 0x00006430, 0x00006431, 0x00064310, 0x00006432, 0x00064320, 0x00064321, 0x00643210,
    0x00000065, 0x00000650, 0x00000651, 0x00006510, 0x00000652, 0x00006520, 0x00006521, 0x00065210,
    0x00000653, 0x00006530, 0x00006531, 0x00065310, 0x00006532, 0x00065320, 0x00065321, 0x00653210,
    0x00000654, 0x00006540, 0x00006541, 0x00065410, 0x00006542, 0x00065420, 0x00065421, 0x00654210,
    0x00006543, 0x00065430, 0x00065431, 0x00654310, 0x00065432, 0x00654320, 0x00654321, 0x06543210,
    0x00000007, 0x00000070, 0x00000071, 0x00000710, 0x00000072, 0x00000720, 0x00000721, 0x00007210,
    0x00000073, 0x00000730, 0x00000731, 0x00007310, 0x00000732, 0x00007320, 0x00007321, 0x00073210,
    0x00000074, 0x00000740, 0x00000741, 0x00007410, 0x00000742, 0x00007420, 0x00007421, 0x00074210,
    0x00000743, 0x00007430, 0x00007431, 0x00074310, 0x00007432, 0x00074320, 0x00074321, 0x00743210,
    0x00000075, 0x00000750, 0x00000751, 0x00007510, 0x00000752, 0x00007520, 0x00007521, 0x00075210,
    0x00000753, 0x00007530, 0x00007531, 0x00075310, 0x00007532, 0x00075320, 0x00075321, 0x00753210,
    0x00000754, 0x00007540, 0x00007541, 0x00075410, 0x00007542, 0x00075420, 0x00075421, 0x00754210,
    0x00007543, 0x00075430, 0x00075431, 0x00754310, 0x00075432, 0x00754320, 0x00754321, 0x07543210,
    0x00000076, 0x00000760, 0x00000761, 0x00007610, 0x00000762, 0x00007620, 0x00007621, 0x00076210,
    0x00000763, 0x00007630, 0x00007631, 0x00076310, 0x00007632, 0x00076320, 0x00076321, 0x00763210,
    0x00000764, 0x00007640, 0x00007641, 0x00076410, 0x00007642, 0x00076420, 0x00076421, 0x00764210,
    0x00007643, 0x00076430, 0x00076431, 0x00764310, 0x00076432, 0x00764320, 0x00764321, 0x07643210,
    0x00000765, 0x00007650, 0x00007651, 0x00076510, 0x00007652, 0x00076520, 0x00076521, 0x00765210,
    0x00007653, 0x00076530, 0x00076531, 0x00765310, 0x00076532, 0x00765320, 0x00765321, 0x07653210,
    0x00007654, 0x00076540, 0x00076541, 0x00765410, 0x00076542, 0x00765420, 0x00765421, 0x07654210,
    0x00076543, 0x00765430, 0x00765431, 0x07654310, 0x00765432, 0x07654320, 0x07654321, 0x76543210,
};

/* keys_upto_portable without a branch per key: the 8 lanes' compare (unsigned, as signed after
 * flipping the sign bits) picks a permutation that packs the chosen lanes' positions and keys to
 * the front; all 8 are stored and the count moves by the chosen ones (c <= j: the stores stay
 * within the first n places). */
__attribute__((target("avx2"))) static int64_t keys_upto_avx2(int32_t *idx, uint32_t *kout,
                                                            const uint32_t *key, int64_t n,
                                                            uint32_t thr)
{
    const __m256i flip = _mm256_set1_epi32((int)0x80000000u);
    const __m256i vt = _mm256_xor_si256(_mm256_set1_epi32((int)thr), flip);
    const __m256i nibble = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const __m256i low4 = _mm256_set1_epi32(15);
    const __m256i eight = _mm256_set1_epi32(8);
    __m256i pos = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    int64_t c = 0, j = 0;
    for (; j + 8 <= n; j += 8) {
        const __m256i k = _mm256_loadu_si256((const __m256i *)(key + j));
        const __m256i over = _mm256_cmpgt_epi32(_mm256_xor_si256(k, flip), vt);
        const unsigned m = ~(unsigned)_mm256_movemask_ps(_mm256_castsi256_ps(over)) & 255u;
        const __m256i perm = _mm256_and_si256(
            _mm256_srlv_epi32(_mm256_set1_epi32((int)packed_lanes[m]), nibble), low4);
        _mm256_storeu_si256((__m256i *)(idx + c), _mm256_permutevar8x32_epi32(pos, perm));
        _mm256_storeu_si256((__m256i *)(kout + c), _mm256_permutevar8x32_epi32(k, perm));
        c += __builtin_popcount(m);
        pos = _mm256_add_epi32(pos, eight);
    }
    _mm256_zeroupper();
    for (; j < n; j++)
        if (key[j] <= thr) {
            idx[c] = (int32_t)j;
            kout[c++] = key[j];
        }
    return c;
}
#endif

int64_t mha_run_order_keys_upto(mha_isa isa, uint32_t *key, int32_t *idx, uint32_t *kout,
                                const float *x, int64_t n, uint32_t thr, uint32_t *lo, uint32_t *hi)
{
#ifdef HAVE_X86_KERNELS
    if (isa == MHA_ISA_AVX512)
        return order_keys_upto_avx512(key, idx, kout, x, n, thr, lo, hi);
#endif
    mha_run_order_keys(isa, key, x, n, lo, hi); /* elsewhere the two passes */
    return mha_run_keys_upto(isa, idx, kout, key, n, thr);
}

void mha_run_order_keys(mha_isa isa, uint32_t *key, const float *x, int64_t n, uint32_t *lo,
                        uint32_t *hi)
{
#ifdef HAVE_X86_KERNELS
    if (isa == MHA_ISA_AVX512 || isa == MHA_ISA_AVX2) {
        order_keys_avx2(key, x, n, lo, hi);
        return;
    }
#endif
    (void)isa;
    order_keys_portable(key, x, n, lo, hi);
}

int64_t mha_run_keys_upto(mha_isa isa, int32_t *idx, uint32_t *kout, const uint32_t *key,
                          int64_t n, uint32_t thr)
{
#ifdef HAVE_X86_KERNELS
    if (isa == MHA_ISA_AVX512 || isa == MHA_ISA_AVX2)
        return keys_upto_avx2(idx, kout, key, n, thr);
#endif
    (void)isa;
    return keys_upto_portable(idx, kout, key, n, thr);
}
