/*
 * mha_rng.c - the layers' random generator (xoshiro256**, seeded through splitmix64), and jumps
 * to any point of its stream, so that a layer's initialisation can run on many threads and still
 * give, value for value, what one thread drawing in order gives (mha_internal.h, "Generator").
 *
 * xoshiro256**'s state moves by a linear map over GF(2): state' = T·state, T a 256×256 bit matrix
 * (its output function is not linear, the state's step is). So the state k steps on is T^k·state:
 * T is built column by column (the step applied to each unit state), squared log2(k) times, and
 * applied as a matrix-vector product (the XOR of the columns whose bit is set in the state).
 */
#include "mha_internal.h"

#include <string.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void mha_rng_seed(mha_rng *r, uint64_t seed)
{
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

/* The state's step alone (xoshiro256's linear part). */
static void step(uint64_t *s)
{
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
}

uint64_t mha_rng_next(mha_rng *r)
{
    uint64_t result = rotl(r->s[1] * 5, 7) * 9;
    step(r->s);
    return result;
}

double mha_rng_unit(mha_rng *r)
{
    return (double)(mha_rng_next(r) >> 11) * 0x1.0p-53;
}

void mha_rng_advance(mha_rng *r, uint64_t steps)
{
    for (uint64_t i = 0; i < steps; i++)
        step(r->s);
}

/* out = m·v over GF(2): the XOR of the columns of m whose bit is set in v. out may not be v. */
static void mat_vec(uint64_t out[4], const mha_rng_jump *m, const uint64_t v[4])
{
    uint64_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
    for (int w = 0; w < 4; w++)
        for (uint64_t bits = v[w]; bits; bits &= bits - 1) {
            const uint64_t *c = m->col[w * 64 + __builtin_ctzll(bits)];
            a0 ^= c[0];
            a1 ^= c[1];
            a2 ^= c[2];
            a3 ^= c[3];
        }
    out[0] = a0;
    out[1] = a1;
    out[2] = a2;
    out[3] = a3;
}

void mha_rng_jump_make(mha_rng_jump *j, int log2_steps)
{
    for (int i = 0; i < 256; i++) {
        memset(j->col[i], 0, sizeof j->col[i]);
        j->col[i][i / 64] = (uint64_t)1 << (i % 64);
        step(j->col[i]);
    }
    /* T^(2^(k+1)) = T^(2^k)·T^(2^k): each column of the square is the matrix times its column */
    mha_rng_jump sq;
    for (int k = 0; k < log2_steps; k++) {
        for (int i = 0; i < 256; i++)
            mat_vec(sq.col[i], j, j->col[i]);
        *j = sq;
    }
}

void mha_rng_jump_apply(const mha_rng_jump *j, mha_rng *r)
{
    uint64_t out[4];
    mat_vec(out, j, r->s);
    memcpy(r->s, out, sizeof out);
}
