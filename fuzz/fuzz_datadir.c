/*
 * fuzz_datadir.c - a layer directory written by anyone: config.json + weights.safetensors from the
 * fuzzer, read by srv_datadir_read and, when that succeeds, built into a layer as the daemon does
 * at start (srv_persist_build) and run once.
 *
 * Input: 2 bytes little-endian config length, the config.json bytes, then the safetensors bytes.
 * Files go to a private directory under $TMPDIR (one per process). The data dir is opened
 * read-only so a "repair" never writes between runs (the files are rewritten for every input).
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/datadir.h"
#include "store/persist.h"
#include "fuzz_fail.h"

#define MAX_EL (1 << 16)

static char root[256];
static char layer_dir[300];

static void write_file(const char *name, const uint8_t *p, size_t n)
{
    char path[400];
    snprintf(path, sizeof path, "%s/%s", layer_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f)
        FAIL("cannot write %s: %s", path, strerror(errno));
    if (n && fwrite(p, 1, n, f) != n)
        FAIL("short write to %s", path);
    fclose(f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static srv_datadir *dd;
    if (!dd) {
        const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
        snprintf(root, sizeof root, "%s/attnd-fuzz-datadir-%d", tmp, (int)getpid());
        snprintf(layer_dir, sizeof layer_dir, "%s/layers/x", root);
        srv_error e = {0};
        srv_datadir *w = srv_datadir_open(root, false, &e); /* creates root/layers */
        if (!w)
            FAIL("open: %s", e.message);
        srv_datadir_free(w);
        mkdir(layer_dir, 0700);
        dd = srv_datadir_open(root, true, &e);
        if (!dd)
            FAIL("open: %s", e.message);
    }
    if (size < 2)
        return 0;
    size_t clen = (size_t)data[0] | (size_t)data[1] << 8;
    if (clen > size - 2)
        clen = size - 2;
    write_file("config.json", data + 2, clen);
    write_file("weights.safetensors", data + 2 + clen, size - 2 - clen);

    srv_dd_layer dl;
    srv_error err = {0};
    if (srv_datadir_read(dd, "x", MAX_EL, &dl, &err, NULL) != 0) {
        if (err.code == SRV_OK || !err.message[0])
            FAIL("refused without an error");
        if (dl.config || dl.weights.n)
            FAIL("refused but owns something");
        return 0;
    }
    if (!json_is_object(dl.config))
        FAIL("config is not an object");
    mha_limits lim;
    mha_limits_default(&lim);
    lim.max_elements = MAX_EL;
    lim.max_dim = 1 << 12;
    srv_layer *l = srv_persist_build("x", dl.config, &dl.weights, &lim, &err);
    if (l) {
        /* a loaded layer must run: one query row of zeros */
        mha_layer *layer = l->layer;
        const mha_config *c = mha_layer_config(layer);
        mha_error me;
        float *q = calloc((size_t)c->embed_dim, sizeof *q);
        float *k = calloc((size_t)c->kdim, sizeof *k);
        float *v = calloc((size_t)c->vdim, sizeof *v);
        float *o = calloc((size_t)c->embed_dim, sizeof *o);
        mha_inputs in = {0};
        in.query = (mha_tensor){q, 2, {1, c->embed_dim}};
        in.key = (mha_tensor){k, 2, {1, c->kdim}};
        in.value = (mha_tensor){v, 2, {1, c->vdim}};
        mha_plan plan;
        if (mha_plan_forward(layer, &in, &lim, &plan, &me) != MHA_OK)
            FAIL("plan: %s", me.message);
        /* finite weights may still overflow float32 on the way: refused as such (MHA_ERR_VALUE,
         * "the pass overflowed float32"), the one failure a loaded layer's pass may have */
        if (mha_forward(layer, &in, &plan, o, NULL, NULL, NULL, &me) != MHA_OK &&
            !(me.status == MHA_ERR_VALUE && strstr(me.message, "overflowed float32")))
            FAIL("forward: %s", me.message);
        free(q);
        free(k);
        free(v);
        free(o);
        srv_layer_release(l);
    } else if (err.code == SRV_OK || err.code == SRV_E_INTERNAL) {
        FAIL("build refused with code %d: %s", err.code, err.message);
    }
    srv_dd_layer_free(&dl);
    return 0;
}
