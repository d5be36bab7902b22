#!/usr/bin/env bash
# test_grouped.sh - the engine's torch checks again with ATTND_TEST_GROUP_ROWS=1: the attention's tasks
# take their head's row blocks four together at every length (mha_attn_group), as they do by default
# only once one head's keys and values reach 2 MiB (S = 4096 at head_dim 64), longer than the golden
# files' inputs. Every config, mask, rule and selection of the goldens then runs through the grouped
# tasks (row blocks that give only their output share each key block) beside the row blocks that
# weights and selections want; ATTND_POISON_SCRATCH=1 too, so that a group's further tiles are NaN
# until written. Then test_engine once more with ATTND_TEST_GROUP_WIDE=1: groups of eight, taken by
# default from 8 MiB (S = 16384 at head_dim 64) where their tiles fit (head_dim <= 64), whose larger
# cases then run groups of five row blocks and more. Ends with the programs' sum.
set -u
cd "$(dirname "$0")/../.."
build="${BUILD:-build}/tests/engine"
exec tests/run_tests.sh ATTND_TEST_GROUP_ROWS=1 ATTND_POISON_SCRATCH=1 "$build/test_golden" \
    "$build/test_select" "$build/test_engine" "$build/test_engine_variants" \
    ATTND_TEST_GROUP_WIDE=1 "$build/test_engine"
