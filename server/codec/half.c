/*
 * half.c - float32 to float16 / bfloat16 and back (see half.h).
 *
 * Integer arithmetic on the bits, so the result does not depend on the FPU's rounding mode or the
 * compiler: the conversions are the IEEE ones (round to nearest, ties to even) that torch's CPU
 * kernels implement. tests/codec/test_half.c checks them against torch's own outputs.
 */
#include "half.h"

#include <string.h>

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

static float float_of(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

int srv_wire_dtype_parse(const char *s, srv_wire_dtype *out)
{
    if (!s)
        return -1;
    if (strcmp(s, "float32") == 0)
        *out = SRV_WIRE_F32;
    else if (strcmp(s, "float16") == 0)
        *out = SRV_WIRE_F16;
    else if (strcmp(s, "bfloat16") == 0)
        *out = SRV_WIRE_BF16;
    else
        return -1;
    return 0;
}

const char *srv_wire_dtype_name(srv_wire_dtype d)
{
    return d == SRV_WIRE_F16 ? "float16" : d == SRV_WIRE_BF16 ? "bfloat16" : "float32";
}

const char *srv_wire_dtype_v2_name(srv_wire_dtype d)
{
    return d == SRV_WIRE_F16 ? "FP16" : d == SRV_WIRE_BF16 ? "BF16" : "FP32";
}

int srv_wire_dtype_size(srv_wire_dtype d)
{
    return d == SRV_WIRE_F32 ? 4 : 2;
}

uint16_t srv_f32_to_f16(float f)
{
    const uint32_t x = bits_of(f);
    const uint16_t sign = (uint16_t)((x >> 16) & 0x8000u);
    const uint32_t ax = x & 0x7FFFFFFFu;
    if (ax > 0x7F800000u) /* NaN */
        return sign | 0x7E00u;
    if (ax >= 0x477FF000u) /* 65520 and up (ties to even go up to 2^16): inf */
        return sign | 0x7C00u;
    if (ax >= 0x38800000u) { /* 2^-14 and up: a normal float16 */
        /* rebias the exponent (127 -> 15), then round the 13 dropped bits to nearest even */
        const uint32_t r = ax - (uint32_t)(112u << 23);
        return sign | (uint16_t)((r + 0x0FFFu + ((r >> 13) & 1u)) >> 13);
    }
    /* below 2^-14: a multiple of 2^-24 (subnormal or zero, possibly rounding up to 2^-14). The
     * mantissa with its implicit bit, shifted right by (113 - exponent) + 13, rounded to even. */
    const uint32_t e = ax >> 23;
    if (e < 102) /* below 2^-25: rounds to zero (2^-25 itself is a tie, to even: 0) */
        return sign;
    const uint32_t m = (ax & 0x007FFFFFu) | 0x00800000u;
    const uint32_t shift = 126u - e; /* 14 .. 24 */
    const uint32_t half_bit = 1u << (shift - 1), rest = m & ((half_bit << 1) - 1);
    uint32_t q = m >> shift;
    if (rest > half_bit || (rest == half_bit && (q & 1u)))
        q++;
    return sign | (uint16_t)q;
}

uint16_t srv_f32_to_bf16(float f)
{
    const uint32_t x = bits_of(f);
    if ((x & 0x7FFFFFFFu) > 0x7F800000u) /* NaN */
        return (uint16_t)(((x >> 16) & 0x8000u) | 0x7FC0u);
    return (uint16_t)((x + 0x7FFFu + ((x >> 16) & 1u)) >> 16);
}

float srv_f16_to_f32(uint16_t h)
{
    const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    const uint32_t e = (h >> 10) & 0x1Fu, m = h & 0x3FFu;
    if (e == 0x1F)
        return float_of(sign | 0x7F800000u | (m << 13));
    if (e != 0)
        return float_of(sign | ((e + 112u) << 23) | (m << 13));
    /* zero or subnormal: m · 2^-24, exact in float32 */
    return float_of(sign) + (sign ? -1.0f : 1.0f) * (float)m * float_of(0x33800000u);
}

float srv_bf16_to_f32(uint16_t h)
{
    return float_of((uint32_t)h << 16);
}

void srv_f32_to_half_array(uint16_t *dst, const float *src, size_t n, srv_wire_dtype d)
{
    if (d == SRV_WIRE_BF16)
        for (size_t i = 0; i < n; i++)
            dst[i] = srv_f32_to_bf16(src[i]);
    else
        for (size_t i = 0; i < n; i++)
            dst[i] = srv_f32_to_f16(src[i]);
}

void srv_f32_round_array(float *dst, const float *src, size_t n, srv_wire_dtype d)
{
    if (d == SRV_WIRE_F16)
        for (size_t i = 0; i < n; i++)
            dst[i] = srv_f16_to_f32(srv_f32_to_f16(src[i]));
    else if (d == SRV_WIRE_BF16)
        for (size_t i = 0; i < n; i++)
            dst[i] = srv_bf16_to_f32(srv_f32_to_bf16(src[i]));
    else if (dst != src)
        memmove(dst, src, n * sizeof *dst);
}
