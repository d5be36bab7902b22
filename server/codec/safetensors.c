/*
 * safetensors.c - the safetensors reader and writer (see safetensors.h for the format and checks).
 *
 * The header is small, so it is parsed with jansson (JSON_REJECT_DUPLICATES refuses a name given
 * twice). The data is read byte by byte as little-endian whatever the host, and converted straight
 * into each tensor's own float32 allocation.
 */
#include "safetensors.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef enum st_dtype { ST_F32, ST_F16, ST_BF16, ST_F64 } st_dtype;

typedef struct st_entry {
    const char *name; /* borrowed from the header's json_t                                     */
    st_dtype dtype;
    int ndim;
    int64_t shape[SRV_TENSOR_MAX_DIMS];
    int64_t count;
    uint64_t begin, end; /* byte offsets in the data buffer                                     */
} st_entry;

static int dtype_parse(const char *s, st_dtype *out, size_t *size)
{
    if (strcmp(s, "F32") == 0) {
        *out = ST_F32;
        *size = 4;
    } else if (strcmp(s, "F16") == 0) {
        *out = ST_F16;
        *size = 2;
    } else if (strcmp(s, "BF16") == 0) {
        *out = ST_BF16;
        *size = 2;
    } else if (strcmp(s, "F64") == 0) {
        *out = ST_F64;
        *size = 8;
    } else {
        return -1;
    }
    return 0;
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

/* An integer JSON value >= 0 into *out; -1 for anything else. */
static int json_nonneg(const json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return -1;
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

/* Checks one tensor's header entry {"dtype", "shape", "data_offsets"} and fills e. */
static int entry_parse(st_entry *e, const char *name, const json_t *info, uint64_t data_len,
                       int64_t max_elements, const char *field, srv_error *err)
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
    size_t dsize;
    if (dtype_parse(json_string_value(jd), &e->dtype, &dsize) != 0)
        return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                             "safetensors tensor \"%s\" has dtype %.16s: attnd reads F32, F16, BF16 or F64 "
                             "(convert it to float32 before saving)", name, json_string_value(jd));
    size_t nd = json_array_size(js);
    if (nd > SRV_TENSOR_MAX_DIMS)
        return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                             "safetensors tensor \"%s\" has %zu dimensions, at most %d are supported", name, nd,
                             SRV_TENSOR_MAX_DIMS);
    e->ndim = (int)nd;
    uint64_t count = 1;
    bool overflow = false;
    for (size_t i = 0; i < nd; i++) {
        uint64_t d;
        if (json_nonneg(json_array_get(js, i), &d) != 0)
            return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                                 "safetensors tensor \"%s\": shape[%zu] is not a non-negative integer", name, i);
        e->shape[i] = (int64_t)d;
        /* keep multiplying past an overflow only to report it; a zero dim makes the count 0 */
        if (d != 0 && count > UINT64_MAX / d)
            overflow = true;
        else
            count *= d;
    }
    for (size_t i = 0; i < nd; i++)
        if (e->shape[i] == 0)
            overflow = false, count = 0;
    if (overflow || count > (uint64_t)max_elements)
        return srv_error_set(err, SRV_E_TOO_LARGE, field,
                             "safetensors tensor \"%s\" has more than %" PRId64 " elements (the limit)", name,
                             max_elements);
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
    const st_entry *x = a, *y = b;
    if (x->begin != y->begin)
        return x->begin < y->begin ? -1 : 1;
    if (x->end != y->end)
        return x->end < y->end ? -1 : 1;
    return strcmp(x->name, y->name);
}

/* Converts the tensor's bytes to float32 into t->data, refusing NaN and infinities. */
static int entry_convert(srv_st_tensor *t, const st_entry *e, const uint8_t *data,
                         const char *field, srv_error *err)
{
    const uint8_t *p = data + e->begin;
    for (int64_t i = 0; i < e->count; i++) {
        float v;
        switch (e->dtype) {
        case ST_F32: {
            uint32_t bits = (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
                            (uint32_t)p[3] << 24;
            memcpy(&v, &bits, sizeof v);
            p += 4;
            break;
        }
        case ST_F16:
            v = srv_st_f16_to_f32((uint16_t)(p[0] | p[1] << 8));
            p += 2;
            break;
        case ST_BF16:
            v = srv_st_bf16_to_f32((uint16_t)(p[0] | p[1] << 8));
            p += 2;
            break;
        case ST_F64: {
            uint64_t bits = le64(p);
            double d;
            memcpy(&d, &bits, sizeof d);
            /* values from FLT_MAX + half an ulp up round to infinity: refuse them before the
             * conversion (which C leaves undefined out of range) */
            if (isfinite(d) && fabs(d) >= 0x1.ffffffp127)
                return srv_error_set(err, SRV_E_BAD_VALUE, field,
                                     "safetensors tensor \"%s\" element %" PRId64 " is %g, outside float32's "
                                     "range", e->name, i, d);
            v = (float)d; /* round to nearest */
            p += 8;
            break;
        }
        default:
            return srv_error_set(err, SRV_E_INTERNAL, field, "unknown dtype");
        }
        if (!isfinite(v))
            return srv_error_set(err, SRV_E_BAD_VALUE, field,
                                 "safetensors tensor \"%s\" element %" PRId64 " is %s: weights must be finite",
                                 e->name, i, isnan(v) ? "NaN" : "infinite");
        t->data[i] = v;
    }
    return 0;
}

int srv_st_parse(srv_st *out, const uint8_t *buf, size_t len, int64_t max_elements,
                 const char *field, srv_error *err)
{
    memset(out, 0, sizeof *out);
    json_t *root = NULL;
    st_entry *entries = NULL;
    if (len < 8)
        return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                             "safetensors file is %zu bytes, too short for its 8-byte header "
                             "length", len);
    uint64_t hlen = le64(buf);
    if (hlen > SRV_ST_MAX_HEADER)
        return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                             "safetensors header length is %" PRIu64 " bytes, over the limit of %u "
                             "(damaged file, or not safetensors)", hlen, SRV_ST_MAX_HEADER);
    if (hlen > len - 8)
        return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                             "safetensors header length %" PRIu64 " runs past the end of the "
                             "%zu-byte file (truncated?)", hlen, len);
    if (hlen < 2 || buf[8] != '{')
        return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                             "safetensors header must be a JSON object starting with '{'");
    json_error_t jerr;
    root = json_loadb((const char *)buf + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, &jerr);
    if (!root) {
        if (strstr(jerr.text, "duplicate"))
            return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                                 "safetensors header names a tensor twice (%s near byte %d)",
                                 jerr.text, jerr.position);
        return srv_error_set(err, SRV_E_BAD_REQUEST, field,
                             "safetensors header is not valid JSON: %s (byte %d of the header)",
                             jerr.text, jerr.position);
    }
    if (!json_is_object(root)) {
        srv_error_set(err, SRV_E_BAD_REQUEST, field, "safetensors header is not a JSON object");
        goto error;
    }
    uint64_t data_len = len - 8 - hlen;
    const uint8_t *data = buf + 8 + hlen;

    size_t nkeys = json_object_size(root);
    if (nkeys > SRV_ST_MAX_TENSORS + 1) {
        srv_error_set(err, SRV_E_TOO_LARGE, field,
                      "safetensors file holds %zu tensors, the limit is %d", nkeys,
                      SRV_ST_MAX_TENSORS);
        goto error;
    }
    entries = calloc(nkeys ? nkeys : 1, sizeof *entries);
    if (!entries) {
        srv_error_set(err, SRV_E_NOMEM, field, "out of memory reading safetensors header");
        goto error;
    }
    int n = 0;
    const char *key;
    json_t *val;
    json_object_foreach(root, key, val) {
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
            out->metadata = json_incref(val);
            continue;
        }
        if (key[0] == '\0') {
            srv_error_set(err, SRV_E_BAD_REQUEST, field, "safetensors tensor with an empty name");
            goto error;
        }
        if (entry_parse(&entries[n], key, val, data_len, max_elements, field, err) != 0)
            goto error;
        n++;
    }

    /* the tensors must tile the data buffer: sorted by offset, no gap, no overlap, no tail */
    qsort(entries, (size_t)n, sizeof *entries, entry_cmp);
    uint64_t pos = 0;
    for (int i = 0; i < n; i++) {
        if (entries[i].begin != pos) {
            srv_error_set(err, SRV_E_BAD_REQUEST, field,
                          entries[i].begin > pos
                              ? "safetensors data has a gap: tensor \"%s\" starts at byte %" PRIu64
                                " but the previous tensor ends at %" PRIu64
                              : "safetensors tensors overlap: tensor \"%s\" starts at byte %" PRIu64
                                " before the previous tensor ends at %" PRIu64,
                          entries[i].name, entries[i].begin, pos);
            goto error;
        }
        pos = entries[i].end;
    }
    if (pos != data_len) {
        srv_error_set(err, SRV_E_BAD_REQUEST, field,
                      "safetensors data buffer is %" PRIu64 " bytes but its tensors cover %" PRIu64
                      " (%s)", data_len, pos, pos < data_len ? "trailing bytes" : "truncated");
        goto error;
    }

    out->tensors = calloc(n ? (size_t)n : 1, sizeof *out->tensors);
    if (!out->tensors) {
        srv_error_set(err, SRV_E_NOMEM, field, "out of memory reading safetensors");
        goto error;
    }
    for (int i = 0; i < n; i++) {
        srv_st_tensor *t = &out->tensors[i];
        const st_entry *e = &entries[i];
        out->n = i + 1;
        t->name = strdup(e->name);
        t->ndim = e->ndim;
        memcpy(t->shape, e->shape, sizeof t->shape);
        t->count = e->count;
        t->data = e->count ? malloc((size_t)e->count * sizeof(float)) : NULL;
        if (!t->name || (e->count && !t->data)) {
            srv_error_set(err, SRV_E_NOMEM, field,
                          "out of memory for safetensors tensor \"%s\" (%" PRId64 " floats)",
                          e->name, e->count);
            goto error;
        }
        if (entry_convert(t, e, data, field, err) != 0)
            goto error;
    }
    free(entries);
    json_decref(root);
    return 0;

error:
    free(entries);
    json_decref(root);
    srv_st_free(out);
    return -1;
}

void srv_st_free(srv_st *st)
{
    if (!st)
        return;
    for (int i = 0; i < st->n; i++) {
        free(st->tensors[i].name);
        free(st->tensors[i].data);
    }
    free(st->tensors);
    json_decref(st->metadata);
    memset(st, 0, sizeof *st);
}

const srv_st_tensor *srv_st_find(const srv_st *st, const char *name)
{
    for (int i = 0; i < st->n; i++)
        if (strcmp(st->tensors[i].name, name) == 0)
            return &st->tensors[i];
    return NULL;
}

const char *srv_st_meta(const srv_st *st, const char *key)
{
    return st->metadata ? json_string_value(json_object_get(st->metadata, key)) : NULL;
}

json_t *srv_st_header(const uint8_t *buf, size_t len)
{
    if (len < 8)
        return NULL;
    uint64_t hlen = le64(buf);
    if (hlen > SRV_ST_MAX_HEADER || hlen > len - 8)
        return NULL;
    json_t *root = json_loadb((const char *)buf + 8, (size_t)hlen, JSON_REJECT_DUPLICATES, NULL);
    if (!json_is_object(root)) {
        json_decref(root);
        return NULL;
    }
    return root;
}

static int view_cmp(const void *a, const void *b)
{
    const srv_st_view *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int srv_st_write(srv_buf *out, const srv_st_view *tensors, int n, const json_t *metadata,
                 srv_error *err)
{
    const srv_st_view **order = calloc(n > 0 ? (size_t)n : 1, sizeof *order);
    const char **mkeys = NULL;
    srv_buf h;
    srv_buf_init(&h);
    if (!order)
        return srv_error_set(err, SRV_E_NOMEM, "", "out of memory writing safetensors");
    if (n < 0 || (metadata && !json_is_object(metadata))) {
        srv_error_set(err, SRV_E_INTERNAL, "", "srv_st_write: bad arguments");
        goto error;
    }
    for (int i = 0; i < n; i++) {
        order[i] = &tensors[i];
        if (!tensors[i].name || !tensors[i].name[0] ||
            strcmp(tensors[i].name, "__metadata__") == 0 || tensors[i].ndim < 0 ||
            tensors[i].ndim > SRV_TENSOR_MAX_DIMS) {
            srv_error_set(err, SRV_E_INTERNAL, "", "srv_st_write: bad tensor %d", i);
            goto error;
        }
    }
    qsort(order, (size_t)n, sizeof *order, view_cmp);
    for (int i = 1; i < n; i++)
        if (strcmp(order[i - 1]->name, order[i]->name) == 0) {
            srv_error_set(err, SRV_E_INTERNAL, "", "srv_st_write: tensor \"%s\" given twice",
                          order[i]->name);
            goto error;
        }

    /* header: {"__metadata__":{...sorted keys...},"name":{"dtype":"F32","shape":[..],
     * "data_offsets":[b,e]},...} compact, as serde_json writes it */
    srv_buf_putc(&h, '{');
    bool first = true;
    if (metadata && json_object_size(metadata) > 0) {
        size_t nm = json_object_size(metadata), k = 0;
        mkeys = calloc(nm, sizeof *mkeys);
        if (!mkeys) {
            srv_error_set(err, SRV_E_NOMEM, "", "out of memory writing safetensors");
            goto error;
        }
        const char *mk;
        json_t *mv;
        json_object_foreach((json_t *)metadata, mk, mv) {
            if (!json_is_string(mv)) {
                srv_error_set(err, SRV_E_INTERNAL, "", "metadata \"%s\" is not a string", mk);
                goto error;
            }
            mkeys[k++] = mk;
        }
        qsort(mkeys, nm, sizeof *mkeys, str_cmp);
        srv_buf_puts(&h, "\"__metadata__\":{");
        for (size_t i = 0; i < nm; i++) {
            if (i)
                srv_buf_putc(&h, ',');
            srv_buf_json_string(&h, mkeys[i]);
            srv_buf_putc(&h, ':');
            srv_buf_json_string(&h, json_string_value(json_object_get(metadata, mkeys[i])));
        }
        srv_buf_putc(&h, '}');
        first = false;
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        const srv_st_view *t = order[i];
        uint64_t count = 1;
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] < 0 || (t->shape[d] && count > UINT64_MAX / 4 / (uint64_t)t->shape[d])) {
                srv_error_set(err, SRV_E_INTERNAL, "", "safetensors tensor \"%s\": bad shape", t->name);
                goto error;
            }
            count *= (uint64_t)t->shape[d];
        }
        if (!first)
            srv_buf_putc(&h, ',');
        first = false;
        srv_buf_json_string(&h, t->name);
        srv_buf_puts(&h, ":{\"dtype\":\"F32\",\"shape\":[");
        for (int d = 0; d < t->ndim; d++)
            srv_buf_printf(&h, d ? ",%" PRId64 : "%" PRId64, t->shape[d]);
        srv_buf_printf(&h, "],\"data_offsets\":[%" PRIu64 ",%" PRIu64 "]}", off, off + 4 * count);
        off += 4 * count;
    }
    srv_buf_putc(&h, '}');
    while (h.len % 8)
        srv_buf_putc(&h, ' ');
    if (h.failed || off > SIZE_MAX - h.len - 8) {
        srv_error_set(err, SRV_E_NOMEM, "", "out of memory writing safetensors");
        goto error;
    }

    uint8_t len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (uint8_t)((uint64_t)h.len >> (8 * i));
    srv_buf_append(out, len8, 8);
    srv_buf_append(out, h.data, h.len);
    if (srv_buf_reserve(out, (size_t)off) != 0) {
        srv_error_set(err, SRV_E_NOMEM, "", "out of memory writing safetensors (%" PRIu64
                      " bytes of data)", off);
        goto error;
    }
    for (int i = 0; i < n; i++) {
        const srv_st_view *t = order[i];
        int64_t count = 1;
        for (int d = 0; d < t->ndim; d++)
            count *= t->shape[d];
        uint8_t *p = (uint8_t *)out->data + out->len;
        for (int64_t j = 0; j < count; j++) {
            uint32_t bits;
            memcpy(&bits, &t->data[j], sizeof bits);
            p[0] = (uint8_t)bits;
            p[1] = (uint8_t)(bits >> 8);
            p[2] = (uint8_t)(bits >> 16);
            p[3] = (uint8_t)(bits >> 24);
            p += 4;
        }
        out->len += (size_t)count * 4;
    }
    out->data[out->len] = '\0';
    if (out->failed) {
        srv_error_set(err, SRV_E_NOMEM, "", "out of memory writing safetensors");
        goto error;
    }
    free(order);
    free(mkeys);
    srv_buf_free(&h);
    return 0;

error:
    free(order);
    free(mkeys);
    srv_buf_free(&h);
    return -1;
}
