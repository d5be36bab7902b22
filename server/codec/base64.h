/*
 * base64.h - base64 (RFC 4648) with SIMD kernels chosen at run time (base64.c).
 */
#ifndef ATTND_BASE64_H
#define ATTND_BASE64_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "base/buf.h"

/* Standard base64 (RFC 4648, padding required, no line breaks). decode returns decoded length or
 * -1 on bad input; dst needs room for (len/4)*3 bytes. Inputs of SRV_BASE64_SPLIT_MIN bytes or more
 * (text for decode, raw bytes for encode) are processed by this thread and one more, with the same
 * result (with SIMD one thread does 15-30 GB/s; below ~4 MB a second thread, ~0.1 ms to start and
 * join, gains nothing). */
#define SRV_BASE64_SPLIT_MIN ((size_t)4 << 20)
long srv_base64_decode(uint8_t *dst, const char *src, size_t len);
int srv_base64_encode(srv_buf *b, const uint8_t *src, size_t len);
/* srv_base64_decode for float32 data: also sets *special to whether any decoded 32-bit word (at
 * dst + 0, 4, 8, ...) has all exponent bits set, i.e. is inf or NaN (false when it returns -1). */
long srv_base64_decode_f32(uint8_t *dst, bool *special, const char *src, size_t len);
/* For tests and benchmarks: the kernel the srv_base64_* functions use from now on, process-wide (do
 * not call it while they run): AUTO = the best the processor has (the default). 0, or -1 when the
 * processor lacks that kernel (nothing changes). */
#define SRV_BASE64_PATH_AUTO 0
#define SRV_BASE64_PATH_SCALAR 1
#define SRV_BASE64_PATH_AVX2 2
#define SRV_BASE64_PATH_AVX512VBMI 3
int srv_base64_set_path(int path);

#endif
