/*
 * float_format.c - srv_format_float / srv_format_floats: the shortest decimal that reads back as
 * the same float32, for one number or a whole row.
 *
 * The hottest path of the daemon (every number of every response goes through it; an S response
 * has 6144, a trace writes millions), so it is hand-written rather than snprintf("%.9g") plus
 * trial parsing, which is ~20x slower and not shortest. The algorithm is Schubfach (R. Giulietti,
 * "The Schubfach way to render doubles", 2020), done for binary32: the rounding interval of
 * v = c·2^q is scaled by 10^-k, with k chosen so the interval holds at most one decimal of the
 * shorter length, using one 64-bit approximation g of 10^-k and "round to odd" products that keep
 * a sticky bit, so every comparison is exact. Of the shortest decimals in the interval it picks
 * the one closest to v (ties to even digit).
 *
 * Written for speed (measured with bench/bench_float_format.c and llvm-mca; see the commit log):
 *   - no data-dependent branch per number: the shorter/longer choice, rounding, digit count and
 *     trailing zeros are masks, tables and bit counts (numbers come in random order of length and
 *     exponent, and a mispredicted branch costs as much as the rest); the exponent parameters of
 *     Schubfach come from a table by the float's top 9 bits;
 *   - the digits: s moved to 9 digits by s·10^(9-n), then 8 at once in the bytes of a word (SWAR:
 *     multiply-shift division per lane, as in the integer-to-text literature);
 *   - the text with stores of fixed size, so the writer needs slack past the end of the text
 *     (SRV_FORMAT_FLOATS_ROOM in tensor.h; srv_format_float goes through a local buffer);
 *   - srv_format_floats, with AVX-512 (checked at start-up), computes the decimals of 8 floats at
 *     once, the same arithmetic lane by lane: ~3.5x the speed of a call per number. Little-endian
 *     only (the digit words are stored as bytes).
 *
 * Output style (documented in docs/api.md, JSON-valid, consistent):
 *   - plain notation when the decimal exponent e of the first digit is in [-4, 9):
 *       1 -> "1", 0.1 -> "0.1", 123.5 -> "123.5", 0.0001 -> "0.0001", 100000000 -> "100000000"
 *   - otherwise d[.ddd]e<exp> with no '+' and no leading zeros in the exponent:
 *       1e-7 -> "1e-7", 3.4028235e38 -> "3.4028235e38", 1e9 -> "1e9"
 *   - zero is "0", negative zero "-0". No ".0" on integers (JSON readers make them floats anyway).
 * At most 15 characters and a NUL (e.g. "-0.000123456789" or "-1.1754944e-38").
 *
 * Correctness is checked exhaustively over all 2^32 patterns by bench/check_float_all.c (round
 * trip through strtof, digit count minimal, and byte for byte the text of the previous, simpler
 * implementation kept in bench/float_format_ref.h, for srv_format_float and srv_format_floats) and
 * on random samples in tests/codec/test_float_format.c.
 */
#include <stdint.h>
#include <string.h>

#include "float_format.h"

#if __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "float_format.c stores digit words as bytes: little-endian only"
#endif

/* g[e + 31] = floor(10^e · 2^(63 - floor(log2 10^e))) + 1 for e in [-31, 45]: 10^e as a 64-bit
 * significand rounded up (Schubfach's g). Generated with exact rational arithmetic (Python's
 * fractions.Fraction): for e: r = floor(e·log2(10)) - 63; g = floor(10^e / 2^r) + 1. */
#define POW10_MIN_EXP (-31)
static const uint64_t pow10_g[77] = {
    0x81CEB32C4B43FCF5, 0xA2425FF75E14FC32, 0xCAD2F7F5359A3B3F, 0xFD87B5F28300CA0E,
    0x9E74D1B791E07E49, 0xC612062576589DDB, 0xF79687AED3EEC552, 0x9ABE14CD44753B53,
    0xC16D9A0095928A28, 0xF1C90080BAF72CB2, 0x971DA05074DA7BEF, 0xBCE5086492111AEB,
    0xEC1E4A7DB69561A6, 0x9392EE8E921D5D08, 0xB877AA3236A4B44A, 0xE69594BEC44DE15C,
    0x901D7CF73AB0ACDA, 0xB424DC35095CD810, 0xE12E13424BB40E14, 0x8CBCCC096F5088CC,
    0xAFEBFF0BCB24AAFF, 0xDBE6FECEBDEDD5BF, 0x89705F4136B4A598, 0xABCC77118461CEFD,
    0xD6BF94D5E57A42BD, 0x8637BD05AF6C69B6, 0xA7C5AC471B478424, 0xD1B71758E219652C,
    0x83126E978D4FDF3C, 0xA3D70A3D70A3D70B, 0xCCCCCCCCCCCCCCCD, 0x8000000000000001,
    0xA000000000000001, 0xC800000000000001, 0xFA00000000000001, 0x9C40000000000001,
    0xC350000000000001, 0xF424000000000001, 0x9896800000000001, 0xBEBC200000000001,
    0xEE6B280000000001, 0x9502F90000000001, 0xBA43B74000000001, 0xE8D4A51000000001,
    0x9184E72A00000001, 0xB5E620F480000001, 0xE35FA931A0000001, 0x8E1BC9BF04000001,
    0xB1A2BC2EC5000001, 0xDE0B6B3A76400001, 0x8AC7230489E80001, 0xAD78EBC5AC620001,
    0xD8D726B7177A8001, 0x878678326EAC9001, 0xA968163F0A57B401, 0xD3C21BCECCEDA101,
    0x84595161401484A1, 0xA56FA5B99019A5C9, 0xCECB8F27F4200F3B, 0x813F3978F8940985,
    0xA18F07D736B90BE6, 0xC9F2C9CD04674EDF, 0xFC6F7C4045812297, 0x9DC5ADA82B70B59E,
    0xC5371912364CE306, 0xF684DF56C3E01BC7, 0x9A130B963A6C115D, 0xC097CE7BC90715B4,
    0xF0BDC21ABB48DB21, 0x96769950B50D88F5, 0xBC143FA4E250EB32, 0xEB194F8E1AE525FE,
    0x92EFD1B8D0CF37BF, 0xB7ABC627050305AE, 0xE596B7B0C643C71A, 0x8F7E32CE7BEA5C70,
    0xB35DBF821AE4F38C,
};

/* floor(log10(2^q)), floor(log10(3/4 · 2^q)) and floor(log2(10^e)) for the exponent ranges of
 * binary32 (checked against exact arithmetic for |q|, |e| < 200). */
static inline int flog10_pow2(int q, int three_quarters) { return (q * 1262611 - (three_quarters ? 524031 : 0)) >> 22; }
static inline int flog2_pow10(int e) { return (e * 1741647) >> 19; }

/* What Schubfach needs of a float's exponent: for v = c·2^q, k = floor(log10(2^q)) (of 3/4·2^q
 * when irregular: c = 2^23, the interval below half as wide), g = pow10_g for 10^-k, and the
 * shift h2 = h + 2 that scales 4c·2^q·10^-k to 2 fraction bits, with the bounds' offsets from
 * 4c·2^h (-(2 or 1)·2^h, +2·2^h) and c's implicit bit. scales[] by the top 9 bits (sign and
 * exponent field: no masking) for the regular intervals; irregular[] by the exponent field for a
 * fraction field of 0. Tables rather than the formulas: fewer instructions per number, and the
 * formulas sit at the start of a long dependency chain. Filled from the formulas before main. */
typedef struct scale {
    uint64_t g;
    int32_t k;
    uint32_t implicit;
    uint32_t h2, below, above, pad;
} scale;
static scale scales[512], irregular_scales[256];

static scale scale_of(int bexp, int irregular)
{
    int q = bexp ? bexp - 150 : -149;
    int k = flog10_pow2(q, irregular);
    int h = q + flog2_pow10(-k) + 1; /* in [1, 4] */
    scale sc = {pow10_g[-k - POW10_MIN_EXP], k, bexp ? 0x800000 : 0, (uint32_t)h + 2,
                (2u - (uint32_t)irregular) << h, 2u << h, 0};
    return sc;
}

__attribute__((constructor)) static void scales_init(void)
{
    for (int i = 0; i < 512; i++)
        scales[i] = scale_of(i & 0xFF, 0);
    for (int i = 0; i < 256; i++)
        irregular_scales[i] = scale_of(i, i > 1);
}

/* The decimal digit count of x in [2^i, 2^(i+1)): digits0[i], plus one when x >= above[i]. */
static const uint8_t digits0[32] = {1, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 4, 5, 5,
                                    5, 6, 6, 6, 7, 7, 7, 7, 8, 8, 8, 9, 9, 9, 10, 10};
static const uint32_t above[32] = {10,        10,        10,        10,        100,
                                   100,       100,       1000,      1000,      1000,
                                   10000,     10000,     10000,     10000,     100000,
                                   100000,    100000,    1000000,   1000000,   1000000,
                                   10000000,  10000000,  10000000,  10000000,  100000000,
                                   100000000, 100000000, 1000000000, 1000000000, 1000000000,
                                   0xFFFFFFFF, 0xFFFFFFFF};

static const uint32_t pow10_u32[10] = {1,      10,      100,      1000,      10000,
                                       100000, 1000000, 10000000, 100000000, 1000000000};

/* floor(g · cp / 2^64) with the lowest bit or-ed with "the rest is not zero" (round to odd): the
 * bit records whether the true product was exact, which keeps the interval tests exact. Only
 * bits 32 and up of the product count (g is exact to 2^-64 relative at best). */
static inline uint32_t round_to_odd(uint64_t g, uint32_t cp)
{
    unsigned __int128 p = (unsigned __int128)g * cp;
    return (uint32_t)(p >> 64) | ((uint64_t)p >> 33 != 0); /* bits 32..63 > 1 */
}

/* The index of the highest set bit of x (x > 0). On x86 the bsr instruction itself: gcc's
 * 31 - __builtin_clz(x) becomes bsr, xor 31, and a subtraction. */
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#include <x86intrin.h>
static inline int bit_index(uint32_t x) { return _bit_scan_reverse((int)x); }
static inline int bit_index64(uint64_t x) { return (int)__bsrq((long long)x); }
#else
static inline int bit_index(uint32_t x) { return 31 - __builtin_clz(x); }
static inline int bit_index64(uint64_t x) { return 63 - __builtin_clzll(x); }
#endif

/* "e<x>" for the decimal exponents x in [-45, 38] of nonzero floats (4 bytes each, no NUL). */
#define EXP_MIN (-45)
static const char exp_text[84][4] = {
    "e-45", "e-44", "e-43", "e-42", "e-41", "e-40", "e-39", "e-38", "e-37", "e-36", "e-35", "e-34",
    "e-33", "e-32", "e-31", "e-30", "e-29", "e-28", "e-27", "e-26", "e-25", "e-24", "e-23", "e-22",
    "e-21", "e-20", "e-19", "e-18", "e-17", "e-16", "e-15", "e-14", "e-13", "e-12", "e-11", "e-10",
    "e-9", "e-8", "e-7", "e-6", "e-5", "e-4", "e-3", "e-2", "e-1", "e0", "e1", "e2", "e3", "e4",
    "e5", "e6", "e7", "e8", "e9", "e10", "e11", "e12", "e13", "e14", "e15", "e16", "e17", "e18",
    "e19", "e20", "e21", "e22", "e23", "e24", "e25", "e26", "e27", "e28", "e29", "e30", "e31",
    "e32", "e33", "e34", "e35", "e36", "e37", "e38",
};

/* The shortest decimal of a float as the text needs it: the first digit (ASCII), the digits after
 * it (ASCII, byte 0 first, '0's after the last significant one), the count of significant digits
 * m (1..9) and the decimal exponent e of the first digit: 0.0123 is '1', "23000000", 3, -2. */
typedef struct decimal {
    uint64_t rest;
    int64_t first, m, e; /* (64-bit: they index memory, and widening costs instructions) */
} decimal;

/* The decimal of the nonzero finite float with bits `bits` (the sign bit is ignored). Without a
 * branch: numbers come in random order of length and exponent, and a mispredicted branch would
 * cost as much as the rest. */
static inline __attribute__((always_inline)) decimal to_decimal(uint32_t bits)
{
    uint32_t frac = bits & 0x7FFFFF;
    const scale *sc = &scales[bits >> 23];
    if (__builtin_expect(frac == 0, 0)) /* a power of two (rare in data, and then predictable) */
        sc = &irregular_scales[(bits >> 23) & 0xFF];
    uint32_t c = frac | sc->implicit;
    int64_t k = sc->k;
    uint64_t g = sc->g;

    /* Schubfach, the candidates compared without branches */
    uint32_t odd = c & 1; /* the bounds are in the interval only when c is even */
    uint32_t cb = c << sc->h2;
    uint32_t vb = round_to_odd(g, cb);
    uint32_t lower = round_to_odd(g, cb - sc->below) + odd;
    uint32_t upper = round_to_odd(g, cb + sc->above) - odd;
    uint32_t s = vb >> 2; /* floor(v·10^-k) */
    /* One digit fewer: the interval (< 10^(k+1) wide) holds at most one multiple of 10^(k+1),
     * and if so it is the largest one below the upper bound (in quarter units: of 40). Only when
     * s has two digits or more: else that multiple is no shorter than s. */
    uint32_t sp = upper / 40;
    int shorter = (40 * sp >= lower) & (vb >= 40);
    /* Else s or s+1: s+1 when s is outside, s when s+1 is, else the closer (ties to even); one
     * of them is always inside, as the interval is at least 10^k wide. */
    uint32_t s_out = lower > (vb & ~3u);  /* 4s below the interval */
    uint32_t w_in = (vb | 3) < upper;      /* 4s + 4 inside */
    uint32_t up = (0xC8 >> (vb & 7)) & 1; /* vb/4 - s > 1/2, or = 1/2 and s odd: 3, 6, 7 */
    uint32_t s_long = s + (s_out | (w_in & up));
    /* (masks, not ?:, which gcc turns into a branch that mispredicts half the time) */
    s = s_long + ((sp - s_long) & -(uint32_t)shorter);
    k += shorter;

    /* The n digits of s (s < 10^9), moved to the left of 9 by s·10^(9-n): the first digit, then
     * 8 made at once in the bytes of a word (halves of 4 digits, each half in pairs, each pair in
     * digits: a multiply-shift division per lane); byte 0 is the first of them. */
    uint64_t lg = (uint64_t)bit_index(s);
    int64_t n = digits0[lg] + (s >= above[lg]);
    uint32_t s9 = s * pow10_u32[9 - n];
    uint32_t hi = s9 / 100000000;
    uint32_t lo = s9 - hi * 100000000;
    uint64_t v = (uint64_t)(lo / 10000) | (uint64_t)(lo % 10000) << 32;
    uint64_t d = ((v * 10486) >> 20) & 0x0000007F0000007FULL; /* /100 of each 32-bit lane < 10^4 */
    v = (v << 16) - d * (100 * 65536 - 1); /* = d | (v - 100·d) << 16: lanes of 2 digits */
    d = ((v * 103) >> 10) & 0x000F000F000F000FULL; /* /10 of each 16-bit lane < 100 */
    v = (v << 8) - d * (10 * 256 - 1);     /* = d | (v - 10·d) << 8: bytes of 1 digit */
    decimal r;
    /* significant digits: 9 less the trailing zeros (the zero bytes at the top of v) */
    r.m = 2 + (bit_index64(v | 1) >> 3) - (v == 0); /* 9 - (63 - bit_index + (v == 0)) / 8 */
    r.e = k + n - 1; /* s·10^k = d.ddd·10^e */
    r.rest = v | 0x3030303030303030ULL; /* and '0's after: 12000 is "12" and "000" */
    r.first = '0' + hi;
    return r;
}

/* Writes the text of d at p and returns its length: plain when -4 <= e < 9, else with an
 * exponent. Unconditional stores of fixed size: it writes up to 19 bytes at p whatever the
 * length (ddddddddd. and 8 more when e = 8), within SRV_FORMAT_FLOATS_ROOM's 16 per number and 16. */
static inline __attribute__((always_inline)) int64_t write_decimal(char *p, decimal d)
{
    int64_t e = d.e, m = d.m, len;
    if ((uint64_t)(e + 4) >= 13) { /* d.ddde-x */
        p[0] = (char)d.first;
        p[1] = '.';
        memcpy(p + 2, &d.rest, 8);
        len = m > 1 ? m + 1 : 1;
        memcpy(p + len, exp_text[e - EXP_MIN], 4);
        len += 2 + (e < 0) + (e >= 10 || e <= -10);
    } else if (e < 0) { /* 0.000ddd */
        memcpy(p, "0.000000", 8);
        char *q = p + 1 - e;
        q[0] = (char)d.first;
        memcpy(q + 1, &d.rest, 8);
        len = 1 - e + m;
    } else { /* ddd.ddd, ddd, ddd00: the first e+1 digits, '.', the rest (past the end if none) */
        int64_t point = e + 1;
        p[0] = (char)d.first;
        memcpy(p + 1, &d.rest, 8);
        p[point] = '.';
        uint64_t tail = d.rest >> ((8 * e) & 63); /* digits from index point; e = 8 has none */
        memcpy(p + point + 1, &tail, 8);
        len = m > point ? m + 1 : point;
    }
    return len;
}

int srv_format_float(char *buf, float f)
{
    uint32_t bits;
    memcpy(&bits, &f, 4);
    int neg = (int)(bits >> 31);
    buf[0] = '-';
    if ((bits & 0x7FFFFFFF) == 0) {
        buf[neg] = '0';
        buf[neg + 1] = '\0';
        return neg + 1;
    }
    char tmp[32];
    int n = (int)write_decimal(tmp, to_decimal(bits));
    memcpy(buf + neg, tmp, 15); /* at most 15 chars with the sign: buf's 16 bytes are enough */
    buf[neg + n] = '\0';
    return neg + n;
}

/* Zero, inf or nan (bits) at p, where a '-' was written and p moved past it when negative;
 * returns the end. inf and nan as the strings JSON can carry (over the '-'). */
static inline char *write_special(char *p, uint32_t bits)
{
    if ((bits & 0x7FFFFFFF) == 0) {
        *p++ = '0';
        return p;
    }
    p -= bits >> 31;
    const char *s = (bits & 0x7FFFFF) ? "\"nan\"\0\0\0" : bits >> 31 ? "\"-inf\"\0\0" : "\"inf\"\0\0\0";
    memcpy(p, s, 8);
    return p + ((bits & 0x7FFFFF) ? 5 : 5 + (bits >> 31));
}

#if defined(__GNUC__) && defined(__x86_64__)
/* to_decimal for 8 floats at once with AVX-512 (F, DQ, CD), when the processor has it (checked at
 * start-up; valgrind's CPUID does not report it): the same arithmetic, lane by lane, in 64-bit
 * lanes; a table lookup becomes a gather or a permute, a comparison a mask, a select a masked
 * operation. Per number it costs about a quarter of the scalar code; the results go to a struct
 * of vectors that the scalar text writer reads. */
#include <immintrin.h>
#define SIMD __attribute__((target("avx512f,avx512dq,avx512cd")))
typedef uint64_t u64x8 __attribute__((vector_size(64)));
typedef int64_t i64x8 __attribute__((vector_size(64)));

static int have_avx512;

__attribute__((constructor)) static void simd_init(void)
{
    __builtin_cpu_init();
    have_avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq") &&
                  __builtin_cpu_supports("avx512cd");
}

/* the low 32 bits of each lane of a times those of b, as 64 bits */
SIMD static inline u64x8 mul32(u64x8 a, u64x8 b)
{
    return (u64x8)_mm512_mul_epu32((__m512i)a, (__m512i)b);
}

SIMD static inline u64x8 round_to_odd8(u64x8 g, u64x8 cp) /* as round_to_odd, per lane */
{
    u64x8 y = mul32(g >> 32, cp) + (mul32(g, cp) >> 32); /* the product's bits 32..95 */
    __mmask8 sticky = _mm512_test_epi64_mask((__m512i)y, _mm512_set1_epi64(0xFFFFFFFE));
    return (u64x8)_mm512_mask_or_epi64((__m512i)(y >> 32), sticky, (__m512i)(y >> 32),
                                       _mm512_set1_epi64(1));
}

typedef struct decimals8 {
    u64x8 rest, first, m;
    i64x8 e;
} decimals8;

/* (the comparisons as AVX-512 masks, the selects and conditional increments masked operations) */
SIMD static void to_decimals8(decimals8 *out, const float *x)
{
    const __m512i one = _mm512_set1_epi64(1);
    u64x8 bits = (u64x8)_mm512_cvtepu32_epi64(_mm256_loadu_si256((const __m256i *)x));
    u64x8 frac = bits & 0x7FFFFF;
    u64x8 bexp = (bits >> 23) & 0xFF;
    __mmask8 sub = _mm512_cmpeq_epi64_mask((__m512i)bexp, _mm512_setzero_si512());
    __mmask8 irregular = _mm512_cmpeq_epi64_mask((__m512i)frac, _mm512_setzero_si512()) &
                         _mm512_cmpgt_epu64_mask((__m512i)bexp, one);
    u64x8 c = (u64x8)_mm512_mask_or_epi64((__m512i)frac, (__mmask8)~sub, (__m512i)frac,
                                          _mm512_set1_epi64(0x800000));
    i64x8 q = (i64x8)_mm512_mask_add_epi64((__m512i)((i64x8)bexp - 150), sub,
                                           (__m512i)((i64x8)bexp - 150), one); /* -149: subnormal */
    i64x8 kq = (i64x8)_mm512_mul_epi32((__m512i)q, _mm512_set1_epi64(1262611));
    kq = (i64x8)_mm512_mask_sub_epi64((__m512i)kq, irregular, (__m512i)kq, _mm512_set1_epi64(524031));
    i64x8 k = kq >> 22;
    i64x8 hk = (i64x8)_mm512_mul_epi32((__m512i)-k, _mm512_set1_epi64(1741647)) >> 19;
    u64x8 h = (u64x8)(q + hk + 1);
    u64x8 g = (u64x8)_mm512_i64gather_epi64((__m512i)(-k - POW10_MIN_EXP), pow10_g, 8);
    u64x8 c4 = c << 2;
    u64x8 vb = round_to_odd8(g, c4 << h);
    u64x8 odd = c & 1;
    u64x8 cl = (u64x8)_mm512_mask_add_epi64((__m512i)(c4 - 2), irregular, (__m512i)(c4 - 2), one);
    u64x8 lower = round_to_odd8(g, cl << h) + odd;
    u64x8 upper = round_to_odd8(g, (c4 + 2) << h) - odd;
    u64x8 s = vb >> 2;
    u64x8 sp = mul32(upper, (u64x8)_mm512_set1_epi64(0xCCCCCCCD)) >> 37; /* upper / 40 */
    __mmask8 shorter = _mm512_cmpge_epu64_mask((__m512i)((sp << 5) + (sp << 3)), (__m512i)lower) &
                       _mm512_cmpge_epu64_mask((__m512i)vb, _mm512_set1_epi64(40));
    __mmask8 s_out = _mm512_cmpgt_epu64_mask((__m512i)lower, (__m512i)(vb & ~3ULL));
    __mmask8 w_in = _mm512_cmplt_epu64_mask((__m512i)(vb | 3), (__m512i)upper);
    __mmask8 up = _mm512_test_epi64_mask(
        _mm512_srlv_epi64(_mm512_set1_epi64(0xC8), (__m512i)(vb & 7)), one);
    s = (u64x8)_mm512_mask_add_epi64((__m512i)s, s_out | (w_in & up), (__m512i)s, one);
    s = (u64x8)_mm512_mask_blend_epi64(shorter, (__m512i)s, (__m512i)sp);
    k = (i64x8)_mm512_mask_add_epi64((__m512i)k, shorter, (__m512i)k, one);

    /* n = t + (s >= 10^t), t = bit length · 1233 / 4096 (as in the scalar code's table) */
    __m512i p10lo = _mm512_setr_epi64(1, 10, 100, 1000, 10000, 100000, 1000000, 10000000);
    __m512i p10hi = _mm512_set1_epi64(100000000);
    u64x8 t = mul32(64 - (u64x8)_mm512_lzcnt_epi64((__m512i)s), (u64x8)_mm512_set1_epi64(1233)) >> 12;
    __mmask8 more = _mm512_cmpge_epu64_mask((__m512i)s, _mm512_permutex2var_epi64(p10lo, (__m512i)t, p10hi));
    i64x8 n = (i64x8)_mm512_mask_add_epi64((__m512i)t, more, (__m512i)t, one);
    u64x8 s9 = mul32(s, (u64x8)_mm512_permutex2var_epi64(p10lo, (__m512i)(9 - n), p10hi));
    u64x8 hi = mul32(s9, (u64x8)_mm512_set1_epi64(0x55E63B89)) >> 57; /* s9 / 10^8 */
    u64x8 lo = s9 - mul32(hi, (u64x8)_mm512_set1_epi64(100000000));
    u64x8 q4 = mul32(lo, (u64x8)_mm512_set1_epi64(0xD1B71759)) >> 45; /* lo / 10^4 */
    u64x8 v = q4 | (lo - mul32(q4, (u64x8)_mm512_set1_epi64(10000))) << 32;
    u64x8 d = ((v * 10486) >> 20) & 0x0000007F0000007FULL;
    v = (v << 16) - d * (100 * 65536 - 1);
    d = ((v * 103) >> 10) & 0x000F000F000F000FULL;
    v = (v << 8) - d * (10 * 256 - 1);
    out->m = 9 - ((u64x8)_mm512_lzcnt_epi64((__m512i)v) >> 3); /* lzcnt(0) = 64: m = 1 */
    out->e = k + n - 1;
    out->rest = v | 0x3030303030303030ULL;
    out->first = hi + '0';
}

/* srv_format_floats' loop over x [n], n a multiple of 8 (and > 0), with to_decimals8 */
SIMD static char *format_floats8(char *p, const float *x, size_t n, char sep)
{
    decimals8 dec;
    for (size_t i = 0; i < n; i += 8) {
        to_decimals8(&dec, x + i);
        for (int j = 0; j < 8; j++) {
            uint32_t bits;
            memcpy(&bits, &x[i + (size_t)j], 4);
            *p = '-';
            p += bits >> 31;
            if (bits * 2 - 2 < 0xFEFFFFFE) { /* finite and not zero */
                decimal d = {dec.rest[j], (int64_t)dec.first[j], (int64_t)dec.m[j], dec.e[j]};
                p += write_decimal(p, d);
            } else {
                p = write_special(p, bits);
            }
            *p++ = sep;
        }
    }
    return p - 1; /* without the last separator */
}
#endif

size_t srv_format_floats(char *out, const float *x, size_t n, char sep)
{
    char *p = out;
    size_t i = 0;
#if defined(__GNUC__) && defined(__x86_64__)
    if (have_avx512 && n >= 8) {
        i = n & ~(size_t)7;
        p = format_floats8(p, x, i, sep);
    }
#endif
    for (; i < n; i++) {
        *p = sep; /* the separator, overwritten when first */
        p += i > 0;
        uint32_t bits;
        memcpy(&bits, &x[i], 4);
        *p = '-';
        p += bits >> 31;
        if (bits * 2 - 2 < 0xFEFFFFFE) /* finite and not zero */
            p += write_decimal(p, to_decimal(bits));
        else
            p = write_special(p, bits);
    }
    return (size_t)(p - out);
}
