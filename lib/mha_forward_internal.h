/*
 * mha_forward_internal.h - private to lib/: what mha_plan.c and mha_forward.c share.
 */
#ifndef ATTND_MHA_FORWARD_INTERNAL_H
#define ATTND_MHA_FORWARD_INTERNAL_H

#include "mha_internal.h"

/* Query rows per attention task: each thread holds one [rows, S] block of scores at a time. */
int64_t mha_row_block(const mha_plan *plan);

#endif
