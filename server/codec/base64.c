/*
 * base64.c - standard base64 (RFC 4648 §4: A-Z a-z 0-9 + /, '=' padding required, no line breaks)
 * for the base64 tensor form, both directions.
 *
 * Hand-written because it is a hot path for large tensors: the base64 form exists to be fast (an L
 * forward request carries 16.8 MB of base64 in and out, and issue 3 allows it 1.3x the engine's
 * ~78 ms), and the libraries at hand (jansson, libmicrohttpd) do not offer it. Three kernels, chosen
 * once at start-up from what the processor has (srv_base64_set_path overrides it for tests):
 *
 *   AVX-512 VBMI  64 characters <-> 48 bytes a step: vpermb / vpermi2b do the byte arrangement and
 *                 the alphabet lookup, vpmultishiftqb picks the 6-bit fields (Muła & Lemire, "Base64
 *                 encoding and decoding at almost the speed of a memory copy", 2019).
 *   AVX2          32 characters <-> 24 bytes a step: the same authors' AVX2 algorithms (nibble-table
 *                 classification, pshufb arithmetic on ranges, multiply-add packing).
 *   scalar        table-driven, a quartet at a time with one table per position (dec0-dec3); the
 *                 fallback, and the code for every tail and for any block that holds a byte outside
 *                 the alphabet.
 *
 * The SIMD kernels only ever see whole blocks of full quartets (never the last quartet, which may be
 * padded). A block with any byte outside the alphabet ('=' included) stops the kernel and the scalar
 * code decodes from that block on, so every accept/reject decision is the scalar code's. Loads never
 * read past the input and stores never write past the output's 3n bytes (a block whose full-width
 * store would reach past them is stored with a mask or in parts), so two threads can work on
 * neighbouring runs and ASan sees no stray access.
 *
 * Texts and byte runs of SRV_BASE64_SPLIT_MIN or more are split in two on a block boundary, one half
 * done by a second thread; the result is byte for byte that of one pass.
 *
 * srv_base64_decode_f32 also reports whether any decoded 32-bit word has all exponent bits set (a
 * float32 inf or NaN), tested while each block is still in registers, so the tensor parser needs no
 * second pass over 12 MB to know that all is finite.
 */
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "base/sysinfo.h"
#include "base64.h"

static const char b64_alphabet[65] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/* 0-63 for alphabet bytes, 0xFF for everything else. */
static const uint8_t b64_value[256] = {
#define X 0xFF
#define X16 X, X, X, X, X, X, X, X, X, X, X, X, X, X, X, X
    X16, X16,
    X, X, X, X, X, X, X, X, X, X, X, 62, X, X, X, 63,               /* '+' 0x2B, '/' 0x2F */
    52, 53, 54, 55, 56, 57, 58, 59, 60, 61, X, X, X, X, X, X,       /* '0'-'9'            */
    X, 0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,            /* 'A'-'O'            */
    15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, X, X, X, X, X,      /* 'P'-'Z'            */
    X, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40,  /* 'a'-'o'            */
    41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, X, X, X, X, X,      /* 'p'-'z'            */
    X16, X16, X16, X16, X16, X16, X16, X16,
#undef X16
#undef X
};

/* Decoding tables for the full quartets: dec<i>[c] holds character c's six bits where they land, as
 * quartet position i, in the three output bytes read as a little-endian word; DEC_BAD (a bit of the
 * unused fourth byte) for a byte outside the alphabet. A quartet is then four loads, three ORs and
 * one test. */
#define B64V(c)                                                                                    \
    ((c) >= 'A' && (c) <= 'Z'   ? (c) - 'A'                                                        \
     : (c) >= 'a' && (c) <= 'z' ? (c) - 'a' + 26                                                   \
     : (c) >= '0' && (c) <= '9' ? (c) - '0' + 52                                                   \
     : (c) == '+'               ? 62                                                               \
     : (c) == '/'               ? 63                                                               \
                                : -1)
#define DEC_BAD 0x01000000u
#define DEC(c, expr) (B64V(c) < 0 ? DEC_BAD : (uint32_t)(expr))
#define U(c) ((uint32_t)B64V(c)) /* unsigned, so the unused branch shifts no negative value */
#define D0(c) DEC(c, U(c) << 2)                                     /* byte 0, bits 7-2         */
#define D1(c) DEC(c, U(c) >> 4 | (U(c) & 0x0F) << 12)               /* byte 0 bits 1-0, byte 1  */
#define D2(c) DEC(c, (U(c) >> 2) << 8 | (U(c) & 0x03) << 22)        /* byte 1 bits 3-0, byte 2  */
#define D3(c) DEC(c, U(c) << 16)                                    /* byte 2, bits 5-0         */
#define T4(F, i) F(i), F(i + 1), F(i + 2), F(i + 3)
#define T16(F, i) T4(F, i), T4(F, i + 4), T4(F, i + 8), T4(F, i + 12)
#define T64(F, i) T16(F, i), T16(F, i + 16), T16(F, i + 32), T16(F, i + 48)
#define T256(F) T64(F, 0), T64(F, 64), T64(F, 128), T64(F, 192)
static const uint32_t dec0[256] = {T256(D0)};
static const uint32_t dec1[256] = {T256(D1)};
static const uint32_t dec2[256] = {T256(D2)};
static const uint32_t dec3[256] = {T256(D3)};

_Static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "the decoding tables are little-endian");

/* Decodes n padding-free quartets into exactly 3n bytes at d (nothing past them, so two threads can
 * decode neighbouring runs): 0, or -1 when any byte is outside the alphabet ('=' included). */
static int decode_quartets(uint8_t *d, const unsigned char *s, size_t n)
{
    if (n == 0)
        return 0;
    /* Each quartet but the last stores four bytes, the fourth overwritten by the next quartet. */
    for (size_t i = 0; i + 1 < n; i++, s += 4) {
        uint32_t v = dec0[s[0]] | dec1[s[1]] | dec2[s[2]] | dec3[s[3]];
        if (v & DEC_BAD)
            return -1;
        memcpy(d, &v, 4);
        d += 3;
    }
    uint32_t v = dec0[s[0]] | dec1[s[1]] | dec2[s[2]] | dec3[s[3]];
    if (v & DEC_BAD)
        return -1;
    memcpy(d, &v, 3);
    return 0;
}

/* Whether any complete 32-bit word of the len bytes at p (read at offsets 0, 4, 8, ...) has all
 * exponent bits set: a float32 inf or NaN. Branch-free; for what no SIMD kernel decoded. */
static bool any_special(const uint8_t *p, size_t len)
{
    uint32_t special = 0;
    for (size_t i = 0; i + 4 <= len; i += 4) {
        uint32_t u;
        memcpy(&u, p + i, 4);
        special |= (u & 0x7F800000u) == 0x7F800000u;
    }
    return special != 0;
}

/* The kernel in use (SRV_BASE64_PATH_SCALAR, _AVX2 or _AVX512VBMI, tensor.h), set at start-up to
 * the best the processor has (b64_best). */
static int b64_path = SRV_BASE64_PATH_SCALAR;
static int b64_best = SRV_BASE64_PATH_SCALAR;

#if defined(__GNUC__) && defined(__x86_64__)
#include <immintrin.h>
#define B64_X86 1
#define AVX2 __attribute__((target("avx2")))
#define VBMI __attribute__((target("avx512f,avx512bw,avx512vbmi")))

__attribute__((constructor)) static void b64_init(void)
{
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx2"))
        b64_best = SRV_BASE64_PATH_AVX2;
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vbmi"))
        b64_best = SRV_BASE64_PATH_AVX512VBMI;
    b64_path = b64_best;
}

#define EXP_BITS 0x7F800000 /* a float32's exponent field; all ones: inf or NaN */

/* Encoding, both kernels. Output 32-bit lane k (characters 4k..4k+3) encodes the bytes b0 b1 b2 of
 * the k-th 3-byte group. A byte shuffle first gives the lane the bytes [b1, b0, b2, b1], i.e. the
 * little-endian word
 *     w = b1 | b0 << 8 | b2 << 16 | b1 << 24.
 * The group's 24 bits are v = b0 << 16 | b1 << 8 | b2, and its characters' six bits are
 *     c0 = v >> 18       = b0 >> 2                  = w bits 10..15
 *     c1 = v >> 12 & 63  = (b0 & 3) << 4 | b1 >> 4  = w bits  4..9   (b1's bits 4-7, b0's bits 0-1)
 *     c2 = v >> 6 & 63   = (b1 & 15) << 2 | b2 >> 6 = w bits 22..27  (b2's bits 6-7, b1's copy 0-3)
 *     c3 = v & 63        = b2 & 63                  = w bits 16..21
 * ENC_SRC(j): the group byte that lane byte j takes, [b1, b0, b2, b1][j % 4]. */
#define ENC_SRC(j) ((j) % 4 == 1 ? 0 : (j) % 4 == 2 ? 2 : 1)

/* Decoding, both kernels. Each 32-bit lane holds one quartet's values a b c d (0..63, one a byte).
 * Multiply-adds pack them: pmaddubsw with bytes [0x40, 0x01] gives each 16-bit lane a * 64 + b and
 * c * 64 + d (12 bits each); pmaddwd with words [0x1000, 0x0001] gives each 32-bit lane
 * (a * 64 + b) * 4096 + (c * 64 + d) = the quartet's 24 bits v. Its little-endian bytes are
 * [v & 0xFF, v >> 8 & 0xFF, v >> 16, 0] = the output's bytes 2, 1, 0 of the group.
 * DEC_SRC(j): the lane byte that output byte j (of its group of 3) takes. */
#define MERGE_PAIRS 0x01400140 /* bytes 0x40, 0x01, 0x40, 0x01 */
#define MERGE_QUADS 0x00011000 /* words 0x1000, 0x0001 */
#define DEC_SRC(j) (2 - (j) % 3)

/* ---- AVX-512 VBMI: 48 bytes <-> 64 characters ------------------------------------------------- */

/* vpermb index for encoding: lane byte j of group j / 4 (groups at 3k of the 48 input bytes). */
#define VE(j) (3 * ((j) / 4) + ENC_SRC(j))
static const uint8_t vbmi_enc_gather[64] __attribute__((aligned(64))) = {T64(VE, 0)};
#undef VE
/* vpermb index for decoding: output byte j from lane j / 3's byte 2 - j % 3, for j < 48. Bytes
 * 48..63 (never stored) repeat bytes 0..15, so that the words the exponent test sees in lanes 12..15
 * are real ones (words 0..3). */
#define VD(j) (4 * ((j) % 48 / 3) + DEC_SRC((j) % 48))
static const uint8_t vbmi_dec_pack[64] __attribute__((aligned(64))) = {T64(VD, 0)};
#undef VD
/* Decoding table for vpermi2b, indexed by a character's low 7 bits: its six bits, or 0x80 (a top
 * bit, which no six-bit value has) for a character outside the alphabet. A character >= 0x80 is
 * looked up by its low 7 bits and caught by its own top bit instead. */
#define VB(c) (B64V(c) < 0 ? 0x80 : B64V(c))
static const uint8_t vbmi_dec_lut[128] __attribute__((aligned(64))) = {T64(VB, 0), T64(VB, 64)};
#undef VB

/* Encodes the 48-byte blocks of src [len] while a whole one remains: 64 characters each at o.
 * Returns the number of bytes encoded (a multiple of 48). */
VBMI static size_t encode_vbmi(char *o, const uint8_t *src, size_t len)
{
    const __m512i gather = _mm512_load_si512(vbmi_enc_gather);
    /* vpmultishiftqb bit offsets, one per byte of each 64-bit lane (two 32-bit lanes): c0..c3 of
     * the low word at 10, 4, 22, 16 and of the high word at 42, 36, 54, 48. Each field lands in the
     * low six bits of its byte; the top two bits are a neighbour's, which the alphabet vpermb
     * ignores (it reads an index's low 6 bits only). */
    const __m512i shifts = _mm512_set1_epi64(0x3036242A1016040A);
    const __m512i alphabet = _mm512_loadu_si512(b64_alphabet); /* 64 characters (+ NUL) */
    size_t i = 0;
    for (; i + 48 <= len; i += 48, o += 64) {
        /* a full 64-byte load while it stays inside src, else a masked one of the 48 bytes */
        __m512i in = i + 64 <= len ? _mm512_loadu_si512(src + i)
                                   : _mm512_maskz_loadu_epi8(0xFFFFFFFFFFFFull, src + i);
        __m512i w = _mm512_permutexvar_epi8(gather, in);
        __m512i six = _mm512_multishift_epi64_epi8(shifts, w);
        _mm512_storeu_si512(o, _mm512_permutexvar_epi8(six, alphabet));
    }
    return i;
}

/* decode_vbmi's constants, and its two steps on a 64-character block: the characters' values (top
 * bit set for one outside the alphabet, which the caller tests together with the input's top bits:
 * vpermi2b ignores index bit 7), and from valid values the 48 bytes (+ 16, see vbmi_dec_pack). */
typedef struct vbmi_dec {
    __m512i lut_lo, lut_hi, pack, pairs, quads;
} vbmi_dec;

VBMI static inline __m512i vbmi_values(const vbmi_dec *k, __m512i in)
{
    return _mm512_permutex2var_epi8(k->lut_lo, in, k->lut_hi); /* index bit 6 chooses lut_hi */
}

VBMI static inline __m512i vbmi_pack(const vbmi_dec *k, __m512i v)
{
    __m512i w = _mm512_madd_epi16(_mm512_maddubs_epi16(v, k->pairs), k->quads);
    return _mm512_permutexvar_epi8(k->pack, w);
}

/* Decodes the 16-quartet (64-character) blocks of s [n quartets] while a whole one remains, 48
 * bytes each at d, never writing past d + 3n; stops at a block (or, in the main loop, a pair of
 * blocks) holding a byte outside the alphabet. *special |= whether a decoded 32-bit word (at
 * d + 4k) has all exponent bits set. Returns the number of quartets decoded (a multiple of 16). */
VBMI static size_t decode_vbmi(uint8_t *d, const unsigned char *s, size_t n, bool *special)
{
    const vbmi_dec k = {_mm512_load_si512(vbmi_dec_lut), _mm512_load_si512(vbmi_dec_lut + 64),
                        _mm512_load_si512(vbmi_dec_pack), _mm512_set1_epi32(MERGE_PAIRS),
                        _mm512_set1_epi32(MERGE_QUADS)};
    const __m512i exp = _mm512_set1_epi32(EXP_BITS);
    /* per lane, the least of ~word & EXP_BITS seen: 0 once a word had all exponent bits set */
    __m512i least = exp;
    size_t i = 0;
    /* two blocks a step, full 64-byte stores, while the second's has room (3 (n - i) >= 96 + 16) */
    for (; n - i >= 38; i += 32, s += 128, d += 96) {
        __m512i in0 = _mm512_loadu_si512(s), in1 = _mm512_loadu_si512(s + 64);
        __m512i v0 = vbmi_values(&k, in0), v1 = vbmi_values(&k, in1);
        __m512i top = _mm512_ternarylogic_epi32(v0, in0, v1, 0xFE); /* v0 | in0 | v1 */
        if (_mm512_movepi8_mask(_mm512_or_si512(top, in1)) != 0)
            break;
        __m512i w0 = vbmi_pack(&k, v0), w1 = vbmi_pack(&k, v1);
        least = _mm512_min_epu32(least, _mm512_andnot_si512(w0, exp));
        least = _mm512_min_epu32(least, _mm512_andnot_si512(w1, exp));
        _mm512_storeu_si512(d, w0);
        _mm512_storeu_si512(d + 48, w1);
    }
    for (; n - i >= 16; i += 16, s += 64, d += 48) {
        __m512i in = _mm512_loadu_si512(s);
        __m512i v = vbmi_values(&k, in);
        if (_mm512_movepi8_mask(_mm512_or_si512(v, in)) != 0)
            break;
        __m512i w = vbmi_pack(&k, v);
        least = _mm512_min_epu32(least, _mm512_andnot_si512(w, exp));
        /* 48 bytes: a full 64-byte store while 64 bytes of room remain (3 (n - i) >= 64) */
        if (n - i >= 22)
            _mm512_storeu_si512(d, w);
        else
            _mm512_mask_storeu_epi8(d, 0xFFFFFFFFFFFFull, w);
    }
    *special |= _mm512_testn_epi32_mask(least, least) != 0;
    return i;
}

/* ---- AVX2: 24 bytes <-> 32 characters --------------------------------------------------------- */

/* pshufb works within each 128-bit lane, so each lane is loaded with its own 12 bytes (two 16-byte
 * loads at src and src + 12) and the encoding shuffle is the same in both lanes: lane byte j takes
 * group j / 4's byte at 3 * (j / 4) + ENC_SRC(j). */
#define AE(j) (3 * ((j) % 16 / 4) + ENC_SRC((j) % 16))
static const uint8_t avx2_enc_gather[32] __attribute__((aligned(32))) = {T16(AE, 0), T16(AE, 16)};
#undef AE
/* Decoding: pshufb packs each lane's 4 words into its first 12 bytes (lane byte j < 12 from word
 * j / 3's byte 2 - j % 3; bytes 12..15 are zeroed by a top bit), then vpermd joins the two lanes'
 * 12 bytes: words 0, 1, 2, 4, 5, 6 — and 0, 0 again for the unstored words 6 and 7, so the
 * exponent test sees only real words there. */
#define AD(j) ((j) % 16 < 12 ? 4 * ((j) % 16 / 3) + DEC_SRC((j) % 16) : 0x80)
static const uint8_t avx2_dec_pack[32] __attribute__((aligned(32))) = {T16(AD, 0), T16(AD, 16)};
#undef AD
/* Classification by nibbles: a character c = 16 h + l is in the alphabet iff
 * avx2_dec_lo[l] & avx2_dec_hi[h] == 0. Each high nibble gets a bit, shared by nibbles whose valid
 * low nibbles are the same:
 *   h = 2: '+' (l = B), '/' (l = F)             bit 0x01
 *   h = 3: '0'-'9' (l = 0..9)                   bit 0x02
 *   h = 4, 6: 'A'-'O', 'a'-'o' (l = 1..F)       bit 0x04
 *   h = 5, 7: 'P'-'Z', 'p'-'z' (l = 0..A)       bit 0x08
 *   h = 0, 1, 8..F: nothing valid               bit 0x10
 * and avx2_dec_lo[l] has the bits of the high nibbles for which l is NOT valid:
 *   l = 0: 0x10 | 0x01 | 0x04 = 0x15   l = 1..9: 0x10 | 0x01 = 0x11   l = A: 0x10 | 0x01 | 0x02 = 0x13
 *   l = B, F: 0x10 | 0x02 | 0x08 = 0x1A                             l = C..E: 0x1B */
static const uint8_t avx2_dec_lo[16] = {0x15, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11, 0x11,
                                        0x11, 0x11, 0x13, 0x1A, 0x1B, 0x1B, 0x1B, 0x1A};
static const uint8_t avx2_dec_hi[16] = {0x10, 0x10, 0x01, 0x02, 0x04, 0x08, 0x04, 0x08,
                                        0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10, 0x10};
/* A valid character's value is c + avx2_dec_roll[h + (c == '/' ? -1 : 0)]:
 *   '/' -> 63 - 0x2F = 16 at index 1;  '+' -> 62 - 0x2B = 19 at 2;  '0'-'9' -> 52 - 0x30 = 4 at 3;
 *   'A'-'Z' -> 0 - 0x41 = -65 at 4, 5;  'a'-'z' -> 26 - 0x61 = -71 at 6, 7. */
static const int8_t avx2_dec_roll[16] = {0, 16, 19, 4, -65, -65, -71, -71, 0, 0, 0, 0, 0, 0, 0, 0};
/* Encoding's six bits -> character as x + avx2_enc_shift[k], with k from the range of x:
 *   k = sat(x - 51) | (x < 26 ? 13 : 0): 0..25 -> 13, 26..51 -> 0, 52..61 -> 1..10, 62 -> 11, 63 -> 12
 *   x < 26: 'A' - 0 = 65;  26..51: 'a' - 26 = 71;  52..61: '0' - 52 = -4;  62: '+' - 62 = -19;
 *   63: '/' - 63 = -16. */
static const int8_t avx2_enc_shift[16] = {71, -4, -4, -4,  -4,  -4, -4, -4,
                                          -4, -4, -4, -19, -16, 65, 0,  0};

static inline AVX2 __m256i broadcast16(const void *p)
{
    return _mm256_broadcastsi128_si256(_mm_loadu_si128(p));
}

/* encode_vbmi's contract with 24-byte blocks (each needs 28 readable bytes: two 16-byte loads). */
AVX2 static size_t encode_avx2(char *o, const uint8_t *src, size_t len)
{
    const __m256i gather = _mm256_load_si256((const __m256i *)avx2_enc_gather);
    const __m256i shift_lut = broadcast16(avx2_enc_shift);
    size_t i = 0;
    for (; i + 28 <= len; i += 24, o += 32) {
        __m256i in = _mm256_loadu2_m128i((const __m128i *)(src + i + 12), (const __m128i *)(src + i));
        __m256i w = _mm256_shuffle_epi8(in, gather);
        /* c0 (w bits 10..15) and c2 (bits 22..27, i.e. 6..11 of the upper 16-bit half) move to bits
         * 0..5 of their half by a high multiply: x * 2^6 >> 16 and x * 2^10 >> 16. c1 (bits 4..9)
         * and c3 (bits 16..21) move to bits 8..13 of their half by a low multiply: x * 2^4, x * 2^8. */
        __m256i c02 = _mm256_mulhi_epu16(_mm256_and_si256(w, _mm256_set1_epi32(0x0FC0FC00)),
                                         _mm256_set1_epi32(0x04000040));
        __m256i c13 = _mm256_mullo_epi16(_mm256_and_si256(w, _mm256_set1_epi32(0x003F03F0)),
                                         _mm256_set1_epi32(0x01000010));
        __m256i x = _mm256_or_si256(c02, c13);
        __m256i k = _mm256_subs_epu8(x, _mm256_set1_epi8(51));
        k = _mm256_or_si256(k, _mm256_and_si256(_mm256_cmpgt_epi8(_mm256_set1_epi8(26), x),
                                                _mm256_set1_epi8(13)));
        _mm256_storeu_si256((__m256i *)o, _mm256_add_epi8(x, _mm256_shuffle_epi8(shift_lut, k)));
    }
    return i;
}

/* decode_vbmi's contract with 8-quartet (32-character) blocks of 24 bytes. */
AVX2 static size_t decode_avx2(uint8_t *d, const unsigned char *s, size_t n, bool *special)
{
    const __m256i lut_lo = broadcast16(avx2_dec_lo), lut_hi = broadcast16(avx2_dec_hi);
    const __m256i roll = broadcast16(avx2_dec_roll);
    const __m256i pack = _mm256_load_si256((const __m256i *)avx2_dec_pack);
    const __m256i join = _mm256_setr_epi32(0, 1, 2, 4, 5, 6, 0, 0);
    const __m256i pairs = _mm256_set1_epi32(MERGE_PAIRS), quads = _mm256_set1_epi32(MERGE_QUADS);
    const __m256i exp = _mm256_set1_epi32(EXP_BITS), nib = _mm256_set1_epi8(0x0F);
    __m256i sp = _mm256_setzero_si256();
    size_t i = 0;
    for (; i + 8 <= n; i += 8, s += 32, d += 24) {
        __m256i in = _mm256_loadu_si256((const __m256i *)s);
        __m256i hi = _mm256_and_si256(_mm256_srli_epi32(in, 4), nib);
        __m256i lo = _mm256_and_si256(in, nib);
        __m256i bad = _mm256_and_si256(_mm256_shuffle_epi8(lut_lo, lo), _mm256_shuffle_epi8(lut_hi, hi));
        if (!_mm256_testz_si256(bad, bad))
            break;
        __m256i slash = _mm256_cmpeq_epi8(in, _mm256_set1_epi8('/'));
        __m256i v = _mm256_add_epi8(in, _mm256_shuffle_epi8(roll, _mm256_add_epi8(hi, slash)));
        __m256i w = _mm256_madd_epi16(_mm256_maddubs_epi16(v, pairs), quads);
        w = _mm256_permutevar8x32_epi32(_mm256_shuffle_epi8(w, pack), join);
        sp = _mm256_or_si256(sp, _mm256_cmpeq_epi32(_mm256_and_si256(w, exp), exp));
        if (n - i >= 11) { /* 3 (n - i) >= 32: room for a full store */
            _mm256_storeu_si256((__m256i *)d, w);
        } else {
            _mm_storeu_si128((__m128i *)d, _mm256_castsi256_si128(w));
            _mm_storel_epi64((__m128i *)(d + 16), _mm256_extracti128_si256(w, 1));
        }
    }
    *special |= !_mm256_testz_si256(sp, sp);
    return i;
}
#endif /* x86-64 */

/* Encodes len bytes into (len+2)/3*4 characters at o (no terminator) with the given kernel. */
static void encode_into(char *o, const uint8_t *src, size_t len, int path)
{
    size_t i = 0;
#ifdef B64_X86
    if (path == SRV_BASE64_PATH_AVX512VBMI)
        i = encode_vbmi(o, src, len);
    else if (path == SRV_BASE64_PATH_AVX2)
        i = encode_avx2(o, src, len);
    o += i / 3 * 4;
#endif
    for (; i + 3 <= len; i += 3) {
        uint32_t v = (uint32_t)src[i] << 16 | (uint32_t)src[i + 1] << 8 | src[i + 2];
        o[0] = b64_alphabet[v >> 18];
        o[1] = b64_alphabet[v >> 12 & 63];
        o[2] = b64_alphabet[v >> 6 & 63];
        o[3] = b64_alphabet[v & 63];
        o += 4;
    }
    if (i < len) {
        uint32_t v = (uint32_t)src[i] << 16 | (i + 1 < len ? (uint32_t)src[i + 1] << 8 : 0);
        o[0] = b64_alphabet[v >> 18];
        o[1] = b64_alphabet[v >> 12 & 63];
        o[2] = i + 1 < len ? b64_alphabet[v >> 6 & 63] : '=';
        o[3] = '=';
    }
}

/* Decodes n padding-free quartets at s into exactly 3n bytes at d with the given kernel; the SIMD
 * kernel takes the whole blocks, the scalar code the rest (and any block with a bad byte). Sets
 * *simd to the number of output bytes the kernel wrote (a multiple of 24: the words after it are
 * the caller's to test) and *special |= whether any of those holds an inf/NaN word. 0, or -1 when
 * any byte is outside the alphabet ('=' included). */
static int decode_run(uint8_t *d, const unsigned char *s, size_t n, int path, size_t *simd,
                      bool *special)
{
    size_t done = 0;
#ifdef B64_X86
    if (path == SRV_BASE64_PATH_AVX512VBMI)
        done = decode_vbmi(d, s, n, special);
    else if (path == SRV_BASE64_PATH_AVX2)
        done = decode_avx2(d, s, n, special);
#endif
    *simd = done * 3;
    return decode_quartets(d + done * 3, s + done * 4, n - done);
}

/* A split falls on a multiple of 16 quartets (64 characters, 48 bytes): whole blocks of both SIMD
 * kernels, and whole 4-byte words, so each half tests its own words for inf/NaN. */
#define SPLIT_QUARTETS 16

typedef struct decode_job {
    uint8_t *dst;
    const unsigned char *src;
    size_t n; /* quartets */
    int path;
    size_t simd; /* output bytes the SIMD kernel wrote */
    bool special;
    int rc;
} decode_job;

static void *decode_job_run(void *arg)
{
    decode_job *j = arg;
    j->rc = decode_run(j->dst, j->src, j->n, j->path, &j->simd, &j->special);
    return NULL;
}

/* srv_base64_decode, and with special non-NULL srv_base64_decode_f32. */
static long decode(uint8_t *dst, bool *special, const char *src, size_t len)
{
    if (special)
        *special = false;
    if (len % 4 != 0)
        return -1;
    if (len == 0)
        return 0;
    const unsigned char *s = (const unsigned char *)src;
    size_t full = len / 4 - 1; /* the last quartet may carry padding */
    int path = b64_path;
    /* Large texts: the first half of the full quartets on one more thread. Each half writes only its
     * own bytes, and a text is valid only if both halves are, so the result is the same either way. */
    decode_job j = {.dst = dst, .src = s, .n = full / 2 / SPLIT_QUARTETS * SPLIT_QUARTETS, .path = path};
    pthread_t t;
    bool split = len >= SRV_BASE64_SPLIT_MIN && srv_ncores() >= 2 &&
                 pthread_create(&t, NULL, decode_job_run, &j) == 0;
    size_t done = split ? j.n : 0, simd = 0;
    bool sp = false;
    int rc = decode_run(dst + done * 3, s + done * 4, full - done, path, &simd, &sp);
    if (split) {
        pthread_join(t, NULL);
        rc |= j.rc;
    }
    if (rc != 0)
        return -1;
    s += full * 4;
    uint8_t *d = dst + full * 3;
    uint32_t a = b64_value[s[0]], b = b64_value[s[1]];
    if ((a | b) & 0x80)
        return -1;
    if (s[2] == '=') {
        if (s[3] != '=' || (b & 0x0F) != 0)
            return -1;
        d[0] = (uint8_t)(a << 2 | b >> 4);
        d += 1;
    } else if (s[3] == '=') {
        uint32_t c = b64_value[s[2]];
        if ((c & 0x80) || (c & 0x03) != 0)
            return -1;
        d[0] = (uint8_t)(a << 2 | b >> 4);
        d[1] = (uint8_t)(b << 4 | c >> 2);
        d += 2;
    } else {
        uint32_t c = b64_value[s[2]], e = b64_value[s[3]];
        if ((c | e) & 0x80)
            return -1;
        uint32_t v = a << 18 | b << 12 | c << 6 | e;
        d[0] = (uint8_t)(v >> 16);
        d[1] = (uint8_t)(v >> 8);
        d[2] = (uint8_t)v;
        d += 3;
    }
    if (special) {
        /* the kernels tested their blocks; the words after them (scalar tails, the last quartet)
         * are tested here, each run's from its kernel's end (a word boundary) */
        size_t total = (size_t)(d - dst), second = done * 3 + simd;
        if (split)
            sp |= j.special || any_special(dst + j.simd, j.n * 3 - j.simd);
        *special = sp || any_special(dst + second, total - second);
    }
    return (long)(d - dst);
}

long srv_base64_decode(uint8_t *dst, const char *src, size_t len)
{
    return decode(dst, NULL, src, len);
}

long srv_base64_decode_f32(uint8_t *dst, bool *special, const char *src, size_t len)
{
    return decode(dst, special, src, len);
}

typedef struct encode_job {
    char *out;
    const uint8_t *src;
    size_t len;
    int path;
} encode_job;

static void *encode_job_run(void *arg)
{
    encode_job *j = arg;
    encode_into(j->out, j->src, j->len, j->path);
    return NULL;
}

int srv_base64_encode(srv_buf *b, const uint8_t *src, size_t len)
{
    size_t out_len = (len + 2) / 3 * 4;
    if (srv_buf_reserve(b, out_len) != 0)
        return -1;
    char *o = b->data + b->len;
    int path = b64_path;
    /* Large inputs: the first half, a whole number of 48-byte blocks, on one more thread; the two
     * halves' characters are the ones one pass would write. */
    encode_job j = {.out = o, .src = src, .len = len / 96 * 48, .path = path};
    pthread_t t;
    bool split = len >= SRV_BASE64_SPLIT_MIN && srv_ncores() >= 2 &&
                 pthread_create(&t, NULL, encode_job_run, &j) == 0;
    size_t done = split ? j.len : 0;
    encode_into(o + done / 3 * 4, src + done, len - done, path);
    if (split)
        pthread_join(t, NULL);
    b->len += out_len;
    b->data[b->len] = '\0';
    return 0;
}

int srv_base64_set_path(int path)
{
    if (path == SRV_BASE64_PATH_AUTO)
        path = b64_best;
    if (path < SRV_BASE64_PATH_SCALAR || path > b64_best)
        return -1;
    b64_path = path;
    return 0;
}
