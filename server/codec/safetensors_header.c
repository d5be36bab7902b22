/*
 * safetensors_header.c - a safetensors header checked on its own, and the conversion of a tensor's
 * bytes to float32 (see safetensors.h). srv_st_parse (safetensors.c) reads whole files with these;
 * a model checkpoint reader parses only the header, then seeks to the tensors it needs.
 *
 * The header is small, so it is parsed with jansson (JSON_REJECT_DUPLICATES refuses a name given
 * twice). Data bytes are read as little-endian whatever the host.
 */
#include "safetensors.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "json_error.h"

/* Every dtype the safetensors format defines with a whole number of bytes per element. */
static const struct {
    const char *name;
    srv_st_dtype dtype;
    unsigned size;
} DTYPES[] = {
    {"F32", SRV_ST_F32, 4},        {"F16", SRV_ST_F16, 2},        {"BF16", SRV_ST_BF16, 2},
    {"F64", SRV_ST_F64, 8},        {"BOOL", SRV_ST_OTHER, 1},     {"U8", SRV_ST_OTHER, 1},
    {"I8", SRV_ST_OTHER, 1},       {"F8_E5M2", SRV_ST_OTHER, 1},  {"F8_E4M3", SRV_ST_OTHER, 1},
    {"F8_E8M0", SRV_ST_OTHER, 1},  {"I16", SRV_ST_OTHER, 2},      {"U16", SRV_ST_OTHER, 2},
    {"I32", SRV_ST_OTHER, 4},      {"U32", SRV_ST_OTHER, 4},      {"I64", SRV_ST_OTHER, 8},
    {"U64", SRV_ST_OTHER, 8},
};
#define NDTYPES (sizeof DTYPES / sizeof DTYPES[0])

static int dtype_find(const char *s)
{
    for (size_t i = 0; i < NDTYPES; i++)
        if (strcmp(s, DTYPES[i].name) == 0)
            return (int)i;
    return -1;
}

size_t srv_st_dtype_size(const srv_st_entry *e)
{
    int i = dtype_find(e->dtype_name);
    return i < 0 ? 1 : DTYPES[i].size;
}

float srv_st_f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
    uint32_t exp = (h >> 10) & 0x1fu;
    uint32_t mant = h & 0x3ffu;
    uint32_t bits;
    if (exp == 0) {
        /* zero or subnormal: mant * 2^-24, exact in float32 */
        float v = ldexpf((float)mant, -24);
        return sign ? -v : v;
    } else if (exp == 31) {
        bits = sign | 0x7f800000u | (mant << 13);
    } else {
        bits = sign | ((exp + 112u) << 23) | (mant << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

float srv_st_bf16_to_f32(uint16_t h)
{
    uint32_t bits = (uint32_t)h << 16;
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

int srv_st_header_len(const uint8_t *first8, uint64_t file_len, uint64_t max_header,
                      uint64_t *hlen, const char *field, srv_error *err)
{
    if (file_len < 8)
        return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                             "safetensors file is %" PRIu64 " bytes, too short for its 8-byte header "
                             "length", file_len);
    uint64_t n = le64(first8);
    if (n > max_header)
        /* not n itself: a file that is no safetensors would show its first 8 bytes through it */
        return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                             "safetensors header length (the first 8 bytes) is over the limit of "
                             "%" PRIu64 " bytes (damaged file, or not safetensors)", max_header);
    if (n > file_len - 8)
        return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                             "safetensors header length (the first 8 bytes) runs past the end of "
                             "the %" PRIu64 "-byte file (truncated?)", file_len);
    *hlen = n;
    return 0;
}

/* An integer JSON value >= 0 into *out; -1 for anything else. */
static int json_nonneg(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

/* Checks one tensor's header entry {"dtype", "shape", "data_offsets"} and fills e. */
static int entry_parse(srv_st_entry *e, const char *name, const json_t *info, uint64_t data_len,
                       const srv_st_header_limits *lim, const char *field, srv_error *err)
{
    memset(e, 0, sizeof *e);
    e->name = name;
    if (!json_is_object(info))
        return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                             "safetensors tensor \"%s\": header entry is not an object with dtype, shape and "
                             "data_offsets", name);
    const json_t *jd = json_object_get(info, "dtype");
    const json_t *js = json_object_get(info, "shape");
    const json_t *jo = json_object_get(info, "data_offsets");
    if (!json_is_string(jd) || !json_is_array(js) || !json_is_array(jo))
        return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                             "safetensors tensor \"%s\": header entry needs \"dtype\" (string), \"shape\" "
                             "(array) and \"data_offsets\" (array)", name);
    int d = dtype_find(json_string_value(jd));
    if (d < 0 || (!lim->any_dtype && DTYPES[d].dtype == SRV_ST_OTHER))
        return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                             "safetensors tensor \"%s\" has dtype %.16s: attnd reads F32, F16, BF16 or F64 "
                             "(convert it to float32 before saving)", name, json_string_value(jd));
    e->dtype = DTYPES[d].dtype;
    snprintf(e->dtype_name, sizeof e->dtype_name, "%s", DTYPES[d].name);
    uint64_t dsize = DTYPES[d].size;
    size_t nd = json_array_size(js);
    if (nd > SRV_TENSOR_MAX_DIMS)
        return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                             "safetensors tensor \"%s\" has %zu dimensions, at most %d are supported", name, nd,
                             SRV_TENSOR_MAX_DIMS);
    e->ndim = (int)nd;
    uint64_t count = 1;
    bool overflow = false;
    for (size_t i = 0; i < nd; i++) {
        uint64_t dim;
        if (json_nonneg(json_array_get(js, i), &dim) != 0)
            return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                                 "safetensors tensor \"%s\": shape[%zu] is not a non-negative integer", name, i);
        e->shape[i] = (int64_t)dim;
        /* keep multiplying past an overflow only to report it; a zero dim makes the count 0 */
        if (dim != 0 && count > UINT64_MAX / dim)
            overflow = true;
        else
            count *= dim;
    }
    for (size_t i = 0; i < nd; i++)
        if (e->shape[i] == 0)
            overflow = false, count = 0;
    if (overflow || count > (uint64_t)lim->max_elements)
        return srv_error_set(err, SRV_E_TOO_LARGE, field,
                             "safetensors tensor \"%s\" has more than %" PRId64 " elements (the limit)", name,
                             lim->max_elements);
    e->count = (int64_t)count;
    if (json_array_size(jo) != 2 || json_nonneg(json_array_get(jo, 0), &e->begin) != 0 ||
        json_nonneg(json_array_get(jo, 1), &e->end) != 0)
        return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                             "safetensors tensor \"%s\": data_offsets must be [begin, end], two non-negative "
                             "integers", name);
    if (e->begin > e->end || e->end > data_len)
        return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                             "safetensors tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64 "] lie outside "
                             "the data buffer of %" PRIu64 " bytes", name, e->begin, e->end,
                             data_len);
    /* count <= max_elements (< 2^62) and dsize <= 8, so this cannot overflow */
    if (e->end - e->begin != count * dsize)
        return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                             "safetensors tensor \"%s\": data_offsets span %" PRIu64 " bytes but shape x dtype "
                             "needs %" PRIu64, name, e->end - e->begin, count * dsize);
    return 0;
}

static int entry_cmp(const void *a, const void *b)
{
    const srv_st_entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

int srv_st_header_parse(srv_st_header *out, const uint8_t *json, size_t hlen, uint64_t data_len,
                        const srv_st_header_limits *lim, const char *field, srv_error *err)
{
    memset(out, 0, sizeof *out);
    out->data_len = data_len;
    if (hlen < 2 || json[0] != '{')
        return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                             "safetensors header must be a JSON object starting with '{'");
    json_error_t jerr;
    out->root = json_loadb((const char *)json, hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!out->root) {
        /* what is wrong and where, never the header's text (it may be a file the client
         * could not read itself: json_error.h) */
        if (json_error_code(&jerr) == json_error_duplicate_key)
            return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                                 "safetensors header names a tensor twice (near byte %d)",
                                 jerr.position);
        return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                             "safetensors header is not valid JSON: %s (byte %d of the header)",
                             srv_json_problem(&jerr), jerr.position);
    }
    if (!json_is_object(out->root)) {
        srv_error_set(err, SRV_E_BAD_REQUEST, field, "safetensors header is not a JSON object");
        goto error;
    }
    size_t nkeys = json_object_size(out->root);
    if (nkeys > (size_t)lim->max_tensors + 1) {
        srv_error_set(err, SRV_E_TOO_LARGE, field, "safetensors file holds %zu tensors, the limit is %d",
                      nkeys, lim->max_tensors);
        goto error;
    }
    out->entries = calloc(nkeys ? nkeys : 1, sizeof *out->entries);
    if (!out->entries) {
        srv_error_set(err, SRV_E_NOMEM, field, "out of memory reading safetensors header");
        goto error;
    }
    const char *key;
    json_t *val;
    json_object_foreach(out->root, key, val) {
        if (strcmp(key, "__metadata__") == 0) {
            if (!json_is_object(val)) {
                srv_error_set(err, SRV_E_BAD_REQUEST, field,
                              "safetensors __metadata__ must be an object of strings");
                goto error;
            }
            const char *mk;
            json_t *mv;
            json_object_foreach(val, mk, mv) {
                if (!json_is_string(mv)) {
                    srv_error_set(err, SRV_E_BAD_REQUEST, field,
                                  "safetensors __metadata__ value \"%.64s\" is not a string", mk);
                    goto error;
                }
            }
            out->metadata = val;
            continue;
        }
        if (key[0] == '\0') {
            srv_error_set(err, SRV_E_BAD_REQUEST, field, "safetensors tensor with an empty name");
            goto error;
        }
        if (entry_parse(&out->entries[out->n], key, val, data_len, lim, field, err) != 0)
            goto error;
        out->n++;
    }

    /* the tensors must tile the data buffer: sorted by offset, no gap, no overlap, no tail */
    qsort(out->entries, (size_t)out->n, sizeof *out->entries, entry_cmp);
    uint64_t pos = 0;
    for (int i = 0; i < out->n; i++) {
        const srv_st_entry *e = &out->entries[i];
        if (e->begin != pos) {
            srv_error_set(err, SRV_E_BAD_REQUEST, field,
                          e->begin > pos
                              ? "safetensors data has a gap: tensor \"%s\" starts at byte %" PRIu64
                                " but the previous tensor ends at %" PRIu64
                              : "safetensors tensors overlap: tensor \"%s\" starts at byte %" PRIu64
                                " before the previous tensor ends at %" PRIu64,
                          e->name, e->begin, pos);
            goto error;
        }
        pos = e->end;
    }
    if (pos != data_len) {
        srv_error_set(err, SRV_E_BAD_REQUEST, field,
                      "safetensors data buffer is %" PRIu64 " bytes but its tensors cover %" PRIu64
                      " (%s)", data_len, pos, pos < data_len ? "trailing bytes" : "truncated");
        goto error;
    }
    return 0;

error:
    srv_st_header_free(out);
    return -1;
}

void srv_st_header_free(srv_st_header *h)
{
    if (!h)
        return;
    free(h->entries);
    json_decref(h->root);
    memset(h, 0, sizeof *h);
}

const srv_st_entry *srv_st_header_find(const srv_st_header *h, const char *name)
{
    for (int i = 0; i < h->n; i++)
        if (strcmp(h->entries[i].name, name) == 0)
            return &h->entries[i];
    return NULL;
}

int srv_st_convert(float *out, const srv_st_entry *e, const uint8_t *bytes, int64_t first,
                   int64_t n, const char *field, srv_error *err)
{
    const uint8_t *p = bytes;
    for (int64_t i = 0; i < n; i++) {
        float v;
        switch (e->dtype) {
        case SRV_ST_F32: {
            uint32_t bits = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                            (uint32_t)p[3] << 24;
            memcpy(&v, &bits, sizeof v);
            p += 4;
            break;
        }
        case SRV_ST_F16:
            v = srv_st_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
            p += 2;
            break;
        case SRV_ST_BF16:
            v = srv_st_bf16_to_f32((uint16_t)(p[0] | p[1] << 8));
            p += 2;
            break;
        case SRV_ST_F64: {
            uint64_t bits = le64(p);
            double d;
            memcpy(&d, &bits, sizeof d);
            /* values from FLT_MAX + half an ulp up round to infinity: refuse them before the
             * conversion (which C leaves undefined out of range) */
            if (isfinite(d) && fabs(d) >= 0x1.ffffffp127)
                return srv_error_set(err, SRV_E_BAD_VALUE, field,
                                     "safetensors tensor \"%s\" element %" PRId64 " is %g, outside float32's "
                                     "range", e->name, first + i, d);
            v = (float)d; /* round to nearest */
            p += 8;
            break;
        }
        default:
            return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                                 "safetensors tensor \"%s\" has dtype %s, not a float dtype attnd "
                                 "converts (F32, F16, BF16, F64)", e->name, e->dtype_name);
        }
        if (!isfinite(v))
            return srv_error_set(err, SRV_E_BAD_VALUE, field,
                                 "safetensors tensor \"%s\" element %" PRId64 " is %s: weights must be finite",
                                 e->name, first + i, isnan(v) ? "NaN" : "infinite");
        out[i] = v;
    }
    return 0;
}
