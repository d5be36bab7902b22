/*
 * half.h - float32 to float16 / bfloat16 and back (the weights a client asks for in half the bytes:
 * weights_select.dtype on /v1, FP16 / BF16 outputs on /v2).
 *
 * Rounding is to nearest, ties to even, as torch's Tensor.half() and Tensor.bfloat16() do on the
 * CPU, bit for bit: float16 keeps subnormals (down to 2^-24) and overflows to ±inf from 65520 on;
 * bfloat16 keeps float32's exponent range, so only values past the largest bfloat16 (about 3.39e38)
 * become ±inf. Infinities stay infinities; a NaN becomes the quiet NaN 0x7E00 (float16) / 0x7FC0
 * (bfloat16) with its sign (torch gives a NaN too; the weights never hold one).
 */
#ifndef ATTND_HALF_H
#define ATTND_HALF_H

#include <stddef.h>
#include <stdint.h>

/* The precision a tensor of weights travels in. */
typedef enum srv_wire_dtype {
    SRV_WIRE_F32 = 0,
    SRV_WIRE_F16,
    SRV_WIRE_BF16,
} srv_wire_dtype;

/* "float32" | "float16" | "bfloat16" (/v1's names) -> *out; -1 for anything else. */
int srv_wire_dtype_parse(const char *s, srv_wire_dtype *out);
/* /v1's name ("float32", ...) and the Open Inference Protocol's ("FP32", "FP16", "BF16"). */
const char *srv_wire_dtype_name(srv_wire_dtype d);
const char *srv_wire_dtype_v2_name(srv_wire_dtype d);
/* Bytes one value takes on the wire: 4 or 2. */
int srv_wire_dtype_size(srv_wire_dtype d);

uint16_t srv_f32_to_f16(float f);
uint16_t srv_f32_to_bf16(float f);
float srv_f16_to_f32(uint16_t h);  /* exact */
float srv_bf16_to_f32(uint16_t h); /* exact */

/* dst[i] = the float16 / bfloat16 bits of src[i] (d F16 or BF16) for i < n. */
void srv_f32_to_half_array(uint16_t *dst, const float *src, size_t n, srv_wire_dtype d);

/* dst[i] = src[i] rounded to d and back to float32 (the value the client gets), for i < n; dst may
 * be src. d F32 copies. */
void srv_f32_round_array(float *dst, const float *src, size_t n, srv_wire_dtype d);

#endif
