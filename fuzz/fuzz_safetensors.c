/*
 * fuzz_safetensors.c - srv_st_parse on arbitrary bytes (files in the data dir and request bodies
 * are untrusted), plus a write/parse round trip of whatever it accepts.
 *
 * Accepted files must give consistent tensors (count = product of shape, at most max_elements,
 * finite values, distinct non-empty names); srv_st_write of them, parsed again, must give the same
 * names, shapes, bits and metadata.
 *
 * One exception, by decision: an empty "__metadata__": {} comes back as no __metadata__ at all
 * (the input EwAAAAAAAAB7Il9fbWV0YWRhdGFfXyI6e319 in base64 is such a file). The writer may drop
 * it: the format makes the key optional and an empty map carries no entry, attnd reads metadata
 * only by key (srv_st_meta gives NULL for every key of either file), so the layer, its weights and
 * every reply are the same; and leaving it out keeps the writer canonical, one file for one content
 * (what GET .../weights serves does not depend on how the uploader spelled "no metadata"). Only a
 * reader that prints the map itself (safetensors' safe_open().metadata(): {} or None) could see a
 * difference. So here an empty map and none compare equal; any entry must survive.
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/safetensors.h"
#include "fuzz_fail.h"

#define MAX_EL (1 << 16)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    uint8_t *buf = malloc(size ? size : 1); /* exact size: ASan sees reads past the end */
    memcpy(buf, data, size);
    srv_st st;
    srv_error err = {0};
    if (srv_st_parse(&st, buf, size, MAX_EL, "weights", &err) != 0) {
        if (err.code == SRV_OK || !err.message[0] || err.code == SRV_E_INTERNAL)
            FAIL("refused with code %d: %s", err.code, err.message);
        if (st.n || st.tensors || st.metadata)
            FAIL("refused but owns something");
        free(buf);
        return 0;
    }
    srv_st_view *v = calloc((size_t)st.n + 1, sizeof *v);
    for (int i = 0; i < st.n; i++) {
        const srv_st_tensor *t = &st.tensors[i];
        if (!t->name || !t->name[0] || strcmp(t->name, "__metadata__") == 0)
            FAIL("tensor %d has a bad name", i);
        if (t->ndim < 0 || t->ndim > SRV_TENSOR_MAX_DIMS)
            FAIL("tensor %s ndim %d", t->name, t->ndim);
        int64_t c = 1;
        for (int d = 0; d < t->ndim; d++) {
            if (t->shape[d] < 0)
                FAIL("tensor %s dim %d is %lld", t->name, d, (long long)t->shape[d]);
            c *= t->shape[d];
        }
        if (c != t->count || c > MAX_EL)
            FAIL("tensor %s count %lld, product %lld", t->name, (long long)t->count, (long long)c);
        if (c > 0 && !t->data)
            FAIL("tensor %s has no data", t->name);
        for (int64_t k = 0; k < c; k++)
            if (!isfinite(t->data[k]))
                FAIL("tensor %s element %lld is %g", t->name, (long long)k, t->data[k]);
        for (int j = 0; j < i; j++)
            if (strcmp(st.tensors[j].name, t->name) == 0)
                FAIL("tensor %s twice", t->name);
        v[i] = (srv_st_view){t->name, t->ndim, t->shape, t->data};
    }
    srv_buf out;
    srv_buf_init(&out);
    if (srv_st_write(&out, v, st.n, st.metadata, &err) != 0)
        FAIL("write failed: %s", err.message);
    srv_st back;
    if (srv_st_parse(&back, (const uint8_t *)out.data, out.len, MAX_EL, "weights", &err) != 0)
        FAIL("own output does not parse: %s", err.message);
    if (back.n != st.n)
        FAIL("round trip: %d tensors, was %d", back.n, st.n);
    for (int i = 0; i < st.n; i++) {
        const srv_st_tensor *t = &st.tensors[i];
        const srv_st_tensor *u = srv_st_find(&back, t->name);
        if (!u || u->ndim != t->ndim || u->count != t->count ||
            memcmp(u->shape, t->shape, sizeof(int64_t) * (size_t)t->ndim) != 0 ||
            (t->count && memcmp(u->data, t->data, (size_t)t->count * 4) != 0))
            FAIL("round trip changed tensor %s", t->name);
    }
    /* NULL and {} are the same metadata (see above) */
    bool had = st.metadata && json_object_size(st.metadata) > 0;
    bool has = back.metadata && json_object_size(back.metadata) > 0;
    if (had != has || (had && !json_equal(st.metadata, back.metadata)))
        FAIL("round trip changed the metadata");
    srv_st_free(&back);
    srv_buf_free(&out);
    free(v);
    srv_st_free(&st);
    free(buf);
    return 0;
}
