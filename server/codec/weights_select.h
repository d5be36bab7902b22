/*
 * weights_select.h - the weights a client chooses (SPEC §2, "Choosing which weights come back"), as
 * it writes them: /v1's "weights_select" object, and the flat parameters of /v2 and of describe's
 * query (weights_heads=0,5 ...). Parsing only: the ranges are checked against the pass by the
 * engine (mha_plan_forward), whose messages srv_select_engine_error names the API's way.
 *
 *   /v1  "weights_select": {"heads": [0, 5], "queries": [0, 128], "keys": [0, 4096], "top_k": 16,
 *                           "pool": [8, 8], "pool_op": "mean", "dtype": "float16"}
 *        every member optional (null = not given), no other member
 *   flat weights_heads "0,5", weights_queries "0:128", weights_keys "0:4096", weights_top_k "16",
 *        weights_pool "8x8", weights_pool_op "mean" | "max", and the precision: weights_datatype
 *        "FP32" | "FP16" | "BF16" on /v2, weights_dtype "float32" | "float16" | "bfloat16" in
 *        describe's query (each API's own names for it)
 */
#ifndef ATTND_WEIGHTS_SELECT_H
#define ATTND_WEIGHTS_SELECT_H

#include <stdbool.h>
#include <stdint.h>

#include <jansson.h>

#include "base/error.h"
#include "half.h"
#include "mha.h"

typedef struct srv_select {
    bool given;           /* a selection was asked for (any member or parameter)               */
    mha_select sel;       /* sel.heads points at heads below                                    */
    int64_t *heads;       /* owned: [sel.nheads]                                                 */
    srv_wire_dtype dtype; /* the precision of the values on the wire (float32 unless asked)     */
    bool dtype_given;     /* dtype was asked (float32 too)                                      */
} srv_select;

/* Which API's names errors use: "weights_select.heads" (/v1) or "weights_heads" (flat). */
typedef enum srv_select_style { SRV_SELECT_V1, SRV_SELECT_FLAT } srv_select_style;

void srv_select_init(srv_select *s); /* zeroed: nothing chosen, float32 */
void srv_select_free(srv_select *s); /* frees heads; accepts an initialised or zeroed one */

/* /v1: the value of "weights_select" (borrowed). 400 naming the member on a wrong type, an unknown
 * member, an empty heads list, a range that is not two integers, an unknown pool_op or dtype. */
int srv_select_from_json(srv_select *s, const json_t *v, srv_error *err);

/* One flat parameter. dtype_v2 picks the precision's name: weights_datatype (FP16) on /v2, else
 * weights_dtype (float16). Returns 1 when name is a selection parameter and its text was taken, 0
 * when name is none of them (s unchanged), -1 with a 400 naming it when the text is wrong. */
int srv_select_flat_param(srv_select *s, const char *name, const char *text, bool dtype_v2,
                          srv_error *err);

/* Turns the engine's refusal of a selection (me->field "select.<member>" or "select", mha.h) into
 * err, naming the member as style does ("weights_select.heads[1] is 9, ..." / "weights_heads[1] is
 * 9, ..."). For any other field it does what srv_error_from_mha does. Returns -1. */
int srv_select_engine_error(srv_error *err, const mha_error *me, srv_select_style style);

/* Bytes of a reply's numbers: count values in dtype, plus count int32 indices with top_k. */
int64_t srv_select_binary_bytes(int64_t count, srv_wire_dtype dtype, bool top_k);

#endif
