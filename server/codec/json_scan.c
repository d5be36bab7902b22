/*
 * json_scan.c - splits a JSON object into (key, value text) members and validates JSON syntax
 * without building a tree (see json_scan.h).
 *
 * A hot path: every request body goes through it once, and a large one is megabytes of numbers.
 * jansson would build a node per number (~40 bytes each, 16-20 MB/s); this walks the text once,
 * with table-driven string and number loops, and keeps nothing but the members' positions.
 * Validation is strict RFC 8259: UTF-8 in strings, escapes (\u with surrogate pairs), numbers
 * without leading zeros, '+', hex, NaN or Infinity, the three literals, and nesting to max_depth.
 *
 * Long runs (a base64 tensor is one string of 16.8 MB in an L request, which the body scan and
 * the tensor parser each cross once) are skipped 64 or 32 bytes a step with AVX-512BW or AVX2
 * where the CPU has them (chosen at run time), 8 bytes a step (SWAR) otherwise: ~2.5 ms of one
 * core per crossing with words, a fraction of that with vectors.
 */
#include "json_scan.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#include <immintrin.h>
#define SCAN_X86 1
#endif

#define SCAN_MAX_DEPTH 512 /* hard ceiling whatever max_depth says: the explicit stack's size */

static int bad_json(srv_error *err, const char *field, const char *base, const char *p, const char *what)
{
    return srv_error_set(err, SRV_E_BAD_JSON, field, "invalid JSON at byte %zu%s%s: %s",
                         (size_t)(p - base), field && *field ? " of " : "", field ? field : "", what);
}

const char *srv_json_skip_ws(const char *p, const char *end)
{
    while (p < end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t'))
        p++;
    return p;
}

/* Eight bytes at a time (SWAR), where at least eight remain before the end: strings and tensor
 * values are long runs of ordinary bytes. */
#define ONES 0x0101010101010101ULL
#define HIGHS 0x8080808080808080ULL

static inline uint64_t load8(const char *p)
{
    uint64_t w;
    memcpy(&w, p, 8);
    return w;
}

/* High bit set in each byte of w that is zero; the lowest set byte is exact (bytes above a zero one
 * may be flagged falsely by the borrow, which never matters: only the lowest is used). */
static inline uint64_t zero_bytes(uint64_t w)
{
    return (w - ONES) & ~w & HIGHS;
}

/* 1 for the bytes a string may hold as they are: not '"', '\\', control characters or non-ASCII. */
static const uint8_t plain_char[256] = {
#define R16(v) v, v, v, v, v, v, v, v, v, v, v, v, v, v, v, v
    R16(0), R16(0), /* 0x00-0x1F control */
    1, 1, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, /* 0x20-0x2F: '"' = 0x22 */
    R16(1), R16(1),                                 /* 0x30-0x4F                */
    1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 0, 1, 1, 1, /* 0x50-0x5F: '\\' = 0x5C */
    R16(1), R16(1),                                 /* 0x60-0x7F                */
    R16(0), R16(0), R16(0), R16(0), R16(0), R16(0), R16(0), R16(0),
#undef R16
};

static int hex4(const char *p, const char *end, unsigned *out)
{
    if (end - p < 4)
        return -1;
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        unsigned d;
        if (c >= '0' && c <= '9')
            d = (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f')
            d = (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F')
            d = (unsigned)(c - 'A' + 10);
        else
            return -1;
        v = v << 4 | d;
    }
    *out = v;
    return 0;
}

/* Length of the valid UTF-8 sequence at p (first byte >= 0x80), or 0. */
static size_t utf8_len(const unsigned char *p, const unsigned char *end)
{
    unsigned c = p[0];
    size_t len;
    unsigned cp, min;
    if (c >= 0xC2 && c <= 0xDF) {
        len = 2, cp = c & 0x1F, min = 0x80;
    } else if (c >= 0xE0 && c <= 0xEF) {
        len = 3, cp = c & 0x0F, min = 0x800;
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4, cp = c & 0x07, min = 0x10000;
    } else {
        return 0;
    }
    if ((size_t)(end - p) < len)
        return 0;
    for (size_t i = 1; i < len; i++) {
        if ((p[i] & 0xC0) != 0x80)
            return 0;
        cp = cp << 6 | (p[i] & 0x3F);
    }
    if (cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return 0;
    return len;
}

/* ---- Skipping long runs with vectors ----
 * The sets of bytes a run stops at: */
typedef enum stop_set {
    STOP_QUOTE_ESC,   /* '"' '\\'                              (inside a string, not checked)  */
    STOP_STRING,      /* '"' '\\', control bytes, non-ASCII    (inside a string, checked)      */
    STOP_STRUCTURAL,  /* '"' '[' ']' '{' '}'                                                   */
} stop_set;

#ifdef SCAN_X86
/* The position of the first byte of `set` in whole 64-byte blocks from p, or the start of the
 * first block that does not fit before end. ('[' | 0x20 is '{' and ']' | 0x20 is '}', and no other
 * byte maps to either: three compares find the five structural bytes.) */
__attribute__((target("avx512f,avx512bw"))) static const char *skip_avx512(const char *p,
                                                                            const char *end,
                                                                            stop_set set)
{
    const __m512i quote = _mm512_set1_epi8('"'), esc = _mm512_set1_epi8('\\');
    const __m512i space = _mm512_set1_epi8(0x20), lbrace = _mm512_set1_epi8('{'),
                  rbrace = _mm512_set1_epi8('}');
    while (end - p >= 64) {
        __m512i v = _mm512_loadu_si512((const void *)p);
        __mmask64 m = _mm512_cmpeq_epi8_mask(v, quote);
        if (set == STOP_STRUCTURAL) {
            __m512i low = _mm512_or_si512(v, space);
            m |= _mm512_cmpeq_epi8_mask(low, lbrace) | _mm512_cmpeq_epi8_mask(low, rbrace);
        } else {
            m |= _mm512_cmpeq_epi8_mask(v, esc);
            if (set == STOP_STRING) /* below 0x20 unsigned, or the top bit set */
                m |= _mm512_cmplt_epu8_mask(v, space) | _mm512_movepi8_mask(v);
        }
        if (m)
            return p + __builtin_ctzll(m);
        p += 64;
    }
    return p;
}

/* skip_avx512 with 32-byte blocks. */
__attribute__((target("avx2"))) static const char *skip_avx2(const char *p, const char *end,
                                                              stop_set set)
{
    const __m256i quote = _mm256_set1_epi8('"'), esc = _mm256_set1_epi8('\\');
    const __m256i space = _mm256_set1_epi8(0x20), below = _mm256_set1_epi8(0x1F),
                  lbrace = _mm256_set1_epi8('{'), rbrace = _mm256_set1_epi8('}');
    while (end - p >= 32) {
        __m256i v = _mm256_loadu_si256((const __m256i *)p);
        __m256i hit = _mm256_cmpeq_epi8(v, quote);
        if (set == STOP_STRUCTURAL) {
            __m256i low = _mm256_or_si256(v, space);
            hit = _mm256_or_si256(hit, _mm256_or_si256(_mm256_cmpeq_epi8(low, lbrace),
                                                       _mm256_cmpeq_epi8(low, rbrace)));
        } else {
            hit = _mm256_or_si256(hit, _mm256_cmpeq_epi8(v, esc));
            if (set == STOP_STRING) /* v <= 0x1F unsigned; the top bit comes with movemask(v) */
                hit = _mm256_or_si256(hit, _mm256_cmpeq_epi8(_mm256_min_epu8(v, below), v));
        }
        uint32_t m = (uint32_t)_mm256_movemask_epi8(hit);
        if (set == STOP_STRING)
            m |= (uint32_t)_mm256_movemask_epi8(v);
        if (m)
            return p + __builtin_ctz(m);
        p += 32;
    }
    return p;
}

/* 2 AVX-512BW, 1 AVX2, 0 neither: the CPU's best, or lower (srv_json_scan_set_simd); -1 not yet
 * asked. */
static int simd_level = -1;

static int simd(void)
{
    int l = __atomic_load_n(&simd_level, __ATOMIC_RELAXED);
    if (l < 0) { /* a benign race: every thread finds the same answer */
        __builtin_cpu_init();
        l = __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512f") ? 2
            : __builtin_cpu_supports("avx2")                                       ? 1
                                                                                    : 0;
        __atomic_store_n(&simd_level, l, __ATOMIC_RELAXED);
    }
    return l;
}
#endif

void srv_json_scan_set_simd(int level)
{
#ifdef SCAN_X86
    __atomic_store_n(&simd_level, -1, __ATOMIC_RELAXED);
    int cpu = simd();
    if (level >= 0 && level < cpu)
        __atomic_store_n(&simd_level, level, __ATOMIC_RELAXED);
#else
    (void)level;
#endif
}

/* Where a run of bytes not in `set` starting at p may stop: a byte of the set, or a position
 * where the word loops take over (fewer than a block left). Called once the word loop crossed
 * LONG_RUN bytes without a stop: short strings (keys, numbers as text) never pay for the call. */
#define LONG_RUN 64
static inline const char *skip_long(const char *p, const char *end, stop_set set)
{
#ifdef SCAN_X86
    int l = simd();
    if (l == 2)
        return skip_avx512(p, end, set);
    if (l == 1)
        return skip_avx2(p, end, set);
#endif
    (void)end;
    (void)set;
    return p;
}

/* Appends bytes to the bounded output of srv_json_string. */
static inline void out_put(char *out, size_t cap, size_t *n, const char *s, size_t len)
{
    if (out && *n < cap - 1) {
        size_t room = cap - 1 - *n;
        memcpy(out + *n, s, len < room ? len : room);
    }
    *n += len;
}

const char *srv_json_string(const char *p, const char *end, char *out, size_t cap, size_t *out_len,
                            const char *base, const char *field, srv_error *err)
{
    size_t n = 0;
    if (out && cap == 0)
        out = NULL;
    if (p >= end || *p != '"') {
        bad_json(err, field, base, p, "expected a string");
        return NULL;
    }
    p++;
    for (;;) {
        const char *run = p;
        for (size_t crossed = 0; end - p >= 8; crossed += 8) { /* to the first '"', '\\', control or
                                                                   non-ASCII byte */
            uint64_t w = load8(p);
            uint64_t stop = zero_bytes(w ^ ONES * '"') | zero_bytes(w ^ ONES * '\\') |
                            ((w - ONES * 0x20) & ~w & HIGHS) | (w & HIGHS);
            if (stop) {
                p += __builtin_ctzll(stop) >> 3;
                break;
            }
            p += 8;
            if (crossed == LONG_RUN)
                p = skip_long(p, end, STOP_STRING);
        }
        while (p < end && plain_char[(unsigned char)*p])
            p++;
        out_put(out, cap, &n, run, (size_t)(p - run));
        if (p >= end) {
            bad_json(err, field, base, p, "unterminated string");
            return NULL;
        }
        unsigned char c = (unsigned char)*p;
        if (c == '"') {
            p++;
            break;
        }
        if (c < 0x20) {
            bad_json(err, field, base, p, "control character in a string (escape it)");
            return NULL;
        }
        if (c >= 0x80) {
            size_t len = utf8_len((const unsigned char *)p, (const unsigned char *)end);
            if (!len) {
                bad_json(err, field, base, p, "invalid UTF-8 in a string");
                return NULL;
            }
            out_put(out, cap, &n, p, len);
            p += len;
            continue;
        }
        /* backslash */
        if (end - p < 2) {
            bad_json(err, field, base, p, "unterminated string");
            return NULL;
        }
        char e = p[1], ch;
        switch (e) {
        case '"': ch = '"'; break;
        case '\\': ch = '\\'; break;
        case '/': ch = '/'; break;
        case 'b': ch = '\b'; break;
        case 'f': ch = '\f'; break;
        case 'n': ch = '\n'; break;
        case 'r': ch = '\r'; break;
        case 't': ch = '\t'; break;
        case 'u': ch = 0; break;
        default:
            bad_json(err, field, base, p, "invalid escape in a string");
            return NULL;
        }
        if (e != 'u') {
            out_put(out, cap, &n, &ch, 1);
            p += 2;
            continue;
        }
        unsigned cp;
        if (hex4(p + 2, end, &cp) != 0) {
            bad_json(err, field, base, p, "\\u needs four hex digits");
            return NULL;
        }
        p += 6;
        if (cp >= 0xDC00 && cp <= 0xDFFF) {
            bad_json(err, field, base, p - 6, "lone low surrogate in \\u escape");
            return NULL;
        }
        if (cp >= 0xD800 && cp <= 0xDBFF) {
            unsigned lo;
            if (end - p < 6 || p[0] != '\\' || p[1] != 'u' || hex4(p + 2, end, &lo) != 0 ||
                lo < 0xDC00 || lo > 0xDFFF) {
                bad_json(err, field, base, p - 6, "high surrogate not followed by a low one");
                return NULL;
            }
            p += 6;
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
        }
        char u[4];
        size_t ul;
        if (cp < 0x80) {
            u[0] = (char)cp, ul = 1;
        } else if (cp < 0x800) {
            u[0] = (char)(0xC0 | cp >> 6), u[1] = (char)(0x80 | (cp & 0x3F)), ul = 2;
        } else if (cp < 0x10000) {
            u[0] = (char)(0xE0 | cp >> 12), u[1] = (char)(0x80 | (cp >> 6 & 0x3F));
            u[2] = (char)(0x80 | (cp & 0x3F)), ul = 3;
        } else {
            u[0] = (char)(0xF0 | cp >> 18), u[1] = (char)(0x80 | (cp >> 12 & 0x3F));
            u[2] = (char)(0x80 | (cp >> 6 & 0x3F)), u[3] = (char)(0x80 | (cp & 0x3F)), ul = 4;
        }
        out_put(out, cap, &n, u, ul);
    }
    if (out)
        out[n < cap - 1 ? n : cap - 1] = '\0';
    if (out_len)
        *out_len = n;
    return p;
}

/* A JSON number at p, strictly; returns the position after it or NULL. */
static const char *skip_number(const char *p, const char *end)
{
    if (p < end && *p == '-')
        p++;
    if (p >= end)
        return NULL;
    if (*p == '0') {
        p++;
    } else if (*p >= '1' && *p <= '9') {
        while (p < end && (unsigned)(*p - '0') <= 9)
            p++;
    } else {
        return NULL;
    }
    if (p < end && *p == '.') {
        p++;
        const char *d = p;
        while (p < end && (unsigned)(*p - '0') <= 9)
            p++;
        if (p == d)
            return NULL;
    }
    if (p < end && (*p == 'e' || *p == 'E')) {
        p++;
        if (p < end && (*p == '+' || *p == '-'))
            p++;
        const char *d = p;
        while (p < end && (unsigned)(*p - '0') <= 9)
            p++;
        if (p == d)
            return NULL;
    }
    /* a number must not run into letters or digits ("01", "1x") */
    if (p < end && ((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
                    *p == '.' || *p == '-' || *p == '+'))
        return NULL;
    return p;
}

const char *srv_json_skip_value(const char *p, const char *end, int depth, int max_depth,
                                const char *base, const char *field, srv_error *err)
{
    char stack[SCAN_MAX_DEPTH]; /* '{' or '[' for each container open inside this value */
    int sp = 0;
    if (max_depth > SCAN_MAX_DEPTH)
        max_depth = SCAN_MAX_DEPTH;

value:
    p = srv_json_skip_ws(p, end);
    if (p >= end) {
        bad_json(err, field, base, p, "unexpected end of text, expected a value");
        return NULL;
    }
    switch (*p) {
    case '{':
    case '[':
        if (depth + sp + 1 > max_depth) {
            srv_error_set(err, SRV_E_BAD_JSON, field, "JSON nests deeper than %d levels at byte %zu",
                          max_depth, (size_t)(p - base));
            return NULL;
        }
        stack[sp++] = *p;
        p = srv_json_skip_ws(p + 1, end);
        if (p < end && *p == (stack[sp - 1] == '{' ? '}' : ']')) {
            p++;
            sp--;
            goto close;
        }
        if (stack[sp - 1] == '{')
            goto key;
        goto value;
    case '"':
        p = srv_json_string(p, end, NULL, 0, NULL, base, field, err);
        if (!p)
            return NULL;
        goto close;
    case 't':
    case 'f':
    case 'n': {
        const char *lit = *p == 't' ? "true" : *p == 'f' ? "false" : "null";
        size_t n = strlen(lit);
        if ((size_t)(end - p) < n || memcmp(p, lit, n) != 0) {
            bad_json(err, field, base, p, "invalid literal (true, false and null are)");
            return NULL;
        }
        p += n;
        goto close;
    }
    default: {
        const char *q = skip_number(p, end);
        if (!q) {
            bad_json(err, field, base, p,
                     *p == 'N' || *p == 'I' || (*p == '-' && p + 1 < end && p[1] == 'I')
                         ? "NaN and Infinity are not JSON numbers"
                         : "invalid number or unexpected character");
            return NULL;
        }
        p = q;
        goto close;
    }
    }

key:
    p = srv_json_skip_ws(p, end);
    p = srv_json_string(p, end, NULL, 0, NULL, base, field, err);
    if (!p)
        return NULL;
    p = srv_json_skip_ws(p, end);
    if (p >= end || *p != ':') {
        bad_json(err, field, base, p, "expected ':' after a key");
        return NULL;
    }
    p++;
    goto value;

close:
    if (sp == 0)
        return p;
    p = srv_json_skip_ws(p, end);
    if (p < end && *p == ',') {
        p++;
        if (stack[sp - 1] == '{')
            goto key;
        goto value;
    }
    if (p < end && *p == (stack[sp - 1] == '{' ? '}' : ']')) {
        p++;
        sp--;
        goto close;
    }
    bad_json(err, field, base, p, stack[sp - 1] == '{' ? "expected ',' or '}'" : "expected ',' or ']'");
    return NULL;
}

/* ---- Delimiting a tensor value without validating it (srv_json_object_scan_lazy) ----
 * A tensor's text is megabytes of numbers that srv_tensor_parse reads strictly anyway; validating
 * each number here too would double the cost of reading a body. So a lazy member's container is
 * only delimited: the bytes that matter are the five structural ones (brackets, braces, '"'), found
 * eight bytes at a time, and inside strings '"' and '\\'. */
/* The first byte at or after p that is '"', '[', ']', '{' or '}' (end if none). c | 0x26 == 0x7F
 * holds for the four brackets and for "Y_y\x7F", which the exact test after the word skips. */
static const char *next_structural(const char *p, const char *end)
{
    for (;;) {
        for (size_t crossed = 0; end - p >= 8; crossed += 8) {
            uint64_t w = load8(p);
            uint64_t m = zero_bytes(w ^ (ONES * '"')) | zero_bytes((w | ONES * 0x26) ^ (ONES * 0x7F));
            if (m) {
                p += __builtin_ctzll(m) >> 3;
                break;
            }
            p += 8;
            if (crossed == LONG_RUN)
                p = skip_long(p, end, STOP_STRUCTURAL);
        }
        while (p < end) {
            char c = *p;
            if (c == '"' || c == '[' || c == ']' || c == '{' || c == '}')
                return p;
            if ((c | 0x26) == 0x7F) { /* a false candidate from the word test: resume word-wise */
                p++;
                break;
            }
            p++;
        }
        if (p >= end)
            return end;
    }
}

/* The position of the '"' closing the string whose opening quote is just before p, escapes skipped
 * (not checked), or NULL when the text ends first. */
static const char *string_close(const char *p, const char *end)
{
    for (;;) {
        for (size_t crossed = 0; end - p >= 8; crossed += 8) {
            uint64_t w = load8(p);
            uint64_t m = zero_bytes(w ^ (ONES * '"')) | zero_bytes(w ^ (ONES * '\\'));
            if (m) {
                p += __builtin_ctzll(m) >> 3;
                break;
            }
            p += 8;
            if (crossed == LONG_RUN)
                p = skip_long(p, end, STOP_QUOTE_ESC);
        }
        while (p < end && *p != '"' && *p != '\\')
            p++;
        if (p >= end)
            return NULL;
        if (*p == '"')
            return p;
        p += 2; /* '\\' and the byte it escapes */
        if (p > end)
            return NULL;
    }
}

/* Delimits the array or object at p (p[0] is '[' or '{'), counting `depth` levels open around it:
 * brackets matched, nesting within max_depth, strings closed. Returns the position after it, or
 * NULL with err. Nothing else inside is checked. */
static const char *delimit_container(const char *p, const char *end, int depth, int max_depth,
                                     const srv_json_plain *plain, const char *base,
                                     const char *field, srv_error *err)
{
    char stack[SCAN_MAX_DEPTH];
    int sp = 0;
    if (max_depth > SCAN_MAX_DEPTH)
        max_depth = SCAN_MAX_DEPTH;
    for (;;) {
        p = next_structural(p, end);
        if (p >= end) {
            bad_json(err, field, base, p, "unexpected end of text inside an array or object");
            return NULL;
        }
        char c = *p;
        if (c == '"') {
            const char *q = plain ? plain->close(plain->cls, p) : NULL;
            if (!q || q >= end)
                q = string_close(p + 1, end);
            if (!q) {
                bad_json(err, field, base, p, "unterminated string");
                return NULL;
            }
            p = q + 1;
            continue;
        }
        if (c == '[' || c == '{') {
            if (depth + sp + 1 > max_depth) {
                srv_error_set(err, SRV_E_BAD_JSON, field, "JSON nests deeper than %d levels at byte %zu",
                              max_depth, (size_t)(p - base));
                return NULL;
            }
            stack[sp++] = c;
            p++;
            continue;
        }
        if (sp == 0 || stack[sp - 1] != (c == ']' ? '[' : '{')) {
            bad_json(err, field, base, p, "mismatched bracket");
            return NULL;
        }
        p++;
        if (--sp == 0)
            return p;
    }
}

/* Whether key is one of the NULL-terminated keys ("*" matches every key). */
static bool key_listed(const char *key, const char *const *keys)
{
    for (; keys && *keys; keys++)
        if (strcmp(*keys, "*") == 0 || strcmp(*keys, key) == 0)
            return true;
    return false;
}

static int object_scan(const char *json, size_t len, const char *field, int max_depth,
                       const char *const *lazy_keys, const srv_json_plain *plain,
                       srv_json_member *out, int max, srv_error *err);

int srv_json_object_scan(const char *json, size_t len, const char *field, int max_depth,
                         srv_json_member *out, int max, srv_error *err)
{
    return object_scan(json, len, field, max_depth, NULL, NULL, out, max, err);
}

int srv_json_object_scan_lazy(const char *json, size_t len, const char *field, int max_depth,
                              const char *const *lazy_keys, srv_json_member *out, int max,
                              srv_error *err)
{
    return srv_json_object_scan_lazy_plain(json, len, field, max_depth, lazy_keys, NULL, out, max,
                                           err);
}

int srv_json_object_scan_lazy_plain(const char *json, size_t len, const char *field, int max_depth,
                                    const char *const *lazy_keys, const srv_json_plain *plain,
                                    srv_json_member *out, int max, srv_error *err)
{
    srv_error lazy_err = {0};
    int n = object_scan(json, len, field, max_depth, lazy_keys, plain, out, max, &lazy_err);
    if (n >= 0)
        return n;
    /* The strict scan reports the first error in the text, as srv_json_object_scan does: a syntax
     * error inside a lazy value before the one the lazy scan met wins. */
    n = object_scan(json, len, field, max_depth, NULL, NULL, out, max, err);
    if (n >= 0) /* cannot happen: the lazy scan checks a subset of what the strict one does */
        return srv_error_set(err, lazy_err.code, lazy_err.field, "%s", lazy_err.message);
    return n;
}

static int object_scan(const char *json, size_t len, const char *field, int max_depth,
                       const char *const *lazy_keys, const srv_json_plain *plain,
                       srv_json_member *out, int max, srv_error *err)
{
    const char *p = json, *end = json + len;
    if (!field)
        field = "";
    p = srv_json_skip_ws(p, end);
    if (p >= end || *p != '{') {
        if (p >= end)
            return bad_json(err, field, json, p, "empty, expected an object");
        /* a valid non-object value is a type error (bad_request for a member such as
         * "weights": null; the whole body not being an object stays bad_json); anything else is
         * bad JSON */
        srv_error probe = {0};
        const char *q = srv_json_skip_value(p, end, 0, max_depth, json, field, &probe);
        if (q && srv_json_skip_ws(q, end) == end)
            return srv_error_set(err, *field ? SRV_E_BAD_REQUEST : SRV_E_BAD_JSON, field,
                                 "%s%sexpected a JSON object {...}", field, *field ? ": " : "");
        if (probe.code != SRV_OK)
            return srv_error_set(err, probe.code, probe.field, "%s", probe.message);
        return bad_json(err, field, json, q, "text after the value");
    }
    if (max_depth < 1)
        return srv_error_set(err, SRV_E_BAD_JSON, field, "JSON nests deeper than %d levels at byte %zu",
                             max_depth, (size_t)(p - json));
    int n = 0;
    p = srv_json_skip_ws(p + 1, end);
    if (p < end && *p == '}') {
        p++;
    } else {
        for (;;) {
            p = srv_json_skip_ws(p, end);
            char key[SRV_JSON_KEY_MAX];
            size_t klen;
            const char *kstart = p;
            p = srv_json_string(p, end, key, sizeof key, &klen, json, field, err);
            if (!p)
                return -1;
            if (klen > SRV_JSON_KEY_MAX - 1)
                return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                                     "%s%skey at byte %zu is %zu bytes long; keys are at most %d", field,
                                     *field ? ": " : "", (size_t)(kstart - json), klen,
                                     SRV_JSON_KEY_MAX - 1);
            if (strlen(key) != klen)
                return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                                     "%s%skey at byte %zu contains \\u0000", field, *field ? ": " : "",
                                     (size_t)(kstart - json));
            for (int i = 0; i < n && i < max; i++)
                if (strcmp(out[i].key, key) == 0) {
                    char f[sizeof err->field]; /* the member given twice: "config.embed_dim" */
                    size_t k = 0;
                    for (const char *c = field; *c && k + 1 < sizeof f;)
                        f[k++] = *c++;
                    if (*field && k + 1 < sizeof f)
                        f[k++] = '.';
                    for (const char *c = key; *c && k + 1 < sizeof f;)
                        f[k++] = *c++;
                    f[k] = '\0';
                    return srv_error_set(err, SRV_E_BAD_JSON, f, "duplicate key \"%s\"%s%s", key,
                                         *field ? " in " : "", field);
                }
            p = srv_json_skip_ws(p, end);
            if (p >= end || *p != ':')
                return bad_json(err, field, json, p, "expected ':' after a key");
            const char *v = srv_json_skip_ws(p + 1, end);
            bool lazy = lazy_keys && v < end && (*v == '[' || *v == '{') && key_listed(key, lazy_keys);
            p = lazy ? delimit_container(v, end, 1, max_depth, plain, json, field, err)
                     : srv_json_skip_value(v, end, 1, max_depth, json, field, err);
            if (!p)
                return -1;
            if (n >= max)
                return srv_error_set(err, SRV_E_BAD_REQUEST, field, "%s%smore than %d members", field,
                                     *field ? " has " : "object has ", max);
            memcpy(out[n].key, key, klen + 1);
            out[n].value = v;
            out[n].value_len = (size_t)(p - v);
            out[n].lazy = lazy;
            n++;
            p = srv_json_skip_ws(p, end);
            if (p < end && *p == ',') {
                p++;
                continue;
            }
            if (p < end && *p == '}') {
                p++;
                break;
            }
            return bad_json(err, field, json, p, "expected ',' or '}'");
        }
    }
    p = srv_json_skip_ws(p, end);
    if (p != end)
        return bad_json(err, field, json, p, "text after the object");
    return n;
}
