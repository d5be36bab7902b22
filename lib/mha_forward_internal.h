/*
 * mha_forward_internal.h - private to lib/: what mha_plan.c and mha_forward.c share.
 */
#ifndef ATTND_MHA_FORWARD_INTERNAL_H
#define ATTND_MHA_FORWARD_INTERNAL_H

#include "mha_internal.h"

/* Query rows per attention task: each thread holds one [rows, S] block of scores at a time. */
int64_t mha_row_block(const mha_plan *plan);

/* Floats of one thread's attention scratch: the [rb,S] score block, then rb row inverses (each
 * part rounded up to 16 floats). For a plan that passed mha_plan_forward's size checks. */
int64_t mha_slot_floats(const mha_plan *plan);

/* Floats of keys packed for the AVX-512 attention kernels, per (batch, head) and in all (0 when the
 * kernels are not used: mha_attn_avx512_usable(hd) false). */
int64_t mha_kpack_head_floats(const mha_plan *plan);
int64_t mha_kpack_floats(const mha_plan *plan);

#endif
