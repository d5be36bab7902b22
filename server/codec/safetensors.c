/*
 * safetensors.c - whole safetensors files: the reader (on top of the header checks of
 * safetensors_header.c) and the writer (see safetensors.h for the format and checks).
 */
#include "safetensors.h"

#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int srv_st_parse(srv_st *out, const uint8_t *buf, size_t len, int64_t max_elements,
                 const char *field, srv_error *err)
{
    memset(out, 0, sizeof *out);
    uint64_t hlen;
    if (srv_st_header_len(buf, len, SRV_ST_MAX_HEADER, &hlen, field, err) != 0)
        return -1;
    const srv_st_header_limits lim = {SRV_ST_MAX_HEADER, SRV_ST_MAX_TENSORS, max_elements, false};
    srv_st_header h;
    if (srv_st_header_parse(&h, buf + 8, (size_t)hlen, len - 8 - hlen, &lim, field, err) != 0)
        return -1;
    const uint8_t *data = buf + 8 + hlen;
    out->metadata = h.metadata ? json_incref((json_t *)h.metadata) : NULL;
    out->tensors = calloc(h.n ? (size_t)h.n : 1, sizeof *out->tensors);
    if (!out->tensors) {
        srv_error_set(err, SRV_E_NOMEM, field, "out of memory reading safetensors");
        goto error;
    }
    for (int i = 0; i < h.n; i++) {
        srv_st_tensor *t = &out->tensors[i];
        const srv_st_entry *e = &h.entries[i];
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
        if (srv_st_convert(t->data, e, data + e->begin, 0, e->count, field, err) != 0)
            goto error;
    }
    srv_st_header_free(&h);
    return 0;

error:
    srv_st_header_free(&h);
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

static int view_cmp(const void *a, const void *b)
{
    const srv_st_view *const *x = a, *const *y = b;
    return strcmp((*x)->name, (*y)->name);
}

static int str_cmp(const void *a, const void *b)
{
    return strcmp(*(const char *const *)a, *(const char *const *)b);
}

int srv_st_write_stream(srv_st_sink sink, void *ctx, const srv_st_view *tensors, int n,
                        const json_t *metadata, srv_error *err)
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
    if (sink(ctx, len8, 8) != 0 || sink(ctx, h.data, h.len) != 0)
        goto sink_error;
    /* the data, little-endian, through a staging block (never a second copy of the whole) */
    uint8_t stage[1 << 16];
    for (int i = 0; i < n; i++) {
        const srv_st_view *t = order[i];
        int64_t count = 1;
        for (int d = 0; d < t->ndim; d++)
            count *= t->shape[d];
        for (int64_t j = 0; j < count;) {
            int64_t m = count - j < (int64_t)sizeof stage / 4 ? count - j : (int64_t)sizeof stage / 4;
            uint8_t *p = stage;
            for (int64_t k = 0; k < m; k++) {
                uint32_t bits;
                memcpy(&bits, &t->data[j + k], sizeof bits);
                p[0] = (uint8_t)bits;
                p[1] = (uint8_t)(bits >> 8);
                p[2] = (uint8_t)(bits >> 16);
                p[3] = (uint8_t)(bits >> 24);
                p += 4;
            }
            if (sink(ctx, stage, (size_t)m * 4) != 0)
                goto sink_error;
            j += m;
        }
    }
    free(order);
    free(mkeys);
    srv_buf_free(&h);
    return 0;

sink_error: /* the sink said why (its err); otherwise: */
    srv_error_set(err, SRV_E_INTERNAL, "", "could not write the safetensors file");
error:
    free(order);
    free(mkeys);
    srv_buf_free(&h);
    return -1;
}

static int buf_sink(void *ctx, const void *bytes, size_t n)
{
    return srv_buf_append(ctx, bytes, n);
}

int srv_st_write(srv_buf *out, const srv_st_view *tensors, int n, const json_t *metadata,
                 srv_error *err)
{
    /* room for the data and a header of any likely size up front: the buffer grows once */
    uint64_t data = 0;
    for (int i = 0; i < n && tensors; i++) {
        uint64_t count = 1;
        for (int d = 0; d < tensors[i].ndim && d < SRV_TENSOR_MAX_DIMS; d++)
            count = tensors[i].shape[d] > 0 ? count * (uint64_t)tensors[i].shape[d] : 0;
        data += count * 4;
    }
    if (data < SIZE_MAX / 2)
        srv_buf_reserve(out, (size_t)data + 4096);
    if (srv_st_write_stream(buf_sink, out, tensors, n, metadata, err) != 0)
        return -1;
    if (out->failed)
        return srv_error_set(err, SRV_E_NOMEM, "", "out of memory writing safetensors");
    out->data[out->len] = '\0';
    return 0;
}
