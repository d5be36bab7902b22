/*
 * import_cmd.c - `attnd import` (see import_cmd.h).
 */
#include "import_cmd.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/error.h"
#include "base/sysinfo.h"
#include "store/datadir.h"
#include "store/hf_check.h"
#include "store/hf_checkpoint.h"
#include "store/hf_import.h"
#include "store/persist.h"
#include "store/weights.h"

#define DEFAULT_TOLERANCE 1e-4

static void usage(FILE *f)
{
    fprintf(f,
            "usage: attnd import CHECKPOINT --layer I --name NAME --data-dir DIR [--check FILE]\n"
            "                    [--tolerance T] [--quiet]\n"
            "\n"
            "Turns layer I's attention of a Hugging Face checkpoint into the attnd layer NAME in DIR\n"
            "(DIR/layers/NAME/), reading only that layer's tensors.\n"
            "\n"
            "  CHECKPOINT      a directory as save_pretrained writes it: config.json and model.safetensors,\n"
            "                  or the shards and model.safetensors.index.json\n"
            "  --layer I       the layer (0 .. num_hidden_layers-1)\n"
            "  --name NAME     the attnd layer's name: 1-64 of [A-Za-z0-9._-], not starting with '.'\n"
            "  --data-dir DIR  the daemon's data dir (created when missing)\n"
            "  --check FILE    a safetensors file with the model's own \"hidden_states\" [N,L,E] and\n"
            "                  \"attn_output\" for this layer: the layer is run on the first and\n"
            "                  compared with the second before anything is written\n"
            "  --tolerance T   largest |difference| --check accepts, relative to max(1, max|attn_output|)\n"
            "                  (default %g)\n"
            "  --quiet         no progress, only the summary line\n"
            "\n"
            "Families: BERT, RoBERTa, GPT-2, Llama, Mistral, Qwen2, BLOOM. Exit status 0 imported,\n"
            "1 refused or failed (nothing written), 2 bad arguments.\n",
            DEFAULT_TOLERANCE);
}

typedef struct args {
    const char *checkpoint, *name, *data_dir, *check;
    int64_t layer;
    double tolerance;
    bool quiet, have_layer;
} args;

/* 0 parsed, 1 --help, -1 bad (message printed). */
static int parse_args(args *a, int argc, char **argv)
{
    memset(a, 0, sizeof *a);
    a->tolerance = DEFAULT_TOLERANCE;
    for (int i = 1; i < argc; i++) {
        const char *s = argv[i];
        const char *val = NULL;
        char flag[32] = "";
        if (!strcmp(s, "--help") || !strcmp(s, "-h"))
            return 1;
        if (!strcmp(s, "--quiet") || !strcmp(s, "-q")) {
            a->quiet = true;
            continue;
        }
        if (strncmp(s, "--", 2) != 0) {
            if (a->checkpoint) {
                fprintf(stderr, "attnd import: one checkpoint only (got '%s' and '%s')\n", a->checkpoint, s);
                return -1;
            }
            a->checkpoint = s;
            continue;
        }
        const char *eq = strchr(s, '=');
        size_t fl = eq ? (size_t)(eq - s) : strlen(s);
        if (fl >= sizeof flag) {
            fprintf(stderr, "attnd import: unknown option '%s'\n", s);
            return -1;
        }
        memcpy(flag, s, fl);
        static const char *const takes_value[] = {"--layer", "--name", "--data-dir", "--check",
                                                  "--tolerance"};
        bool known = false;
        for (size_t k = 0; k < sizeof takes_value / sizeof *takes_value; k++)
            known = known || !strcmp(flag, takes_value[k]);
        if (!known) { /* before its value: an unknown flag at the end is no flag missing a value */
            fprintf(stderr, "attnd import: unknown option '%s' (see attnd import --help)\n", flag);
            return -1;
        }
        if (eq)
            val = eq + 1;
        else if (i + 1 < argc)
            val = argv[++i];
        else {
            fprintf(stderr, "attnd import: %s needs a value\n", flag);
            return -1;
        }
        if (!strcmp(flag, "--layer")) {
            char *end;
            long long v = strtoll(val, &end, 10);
            if (!*val || *end || v < 0 || v > INT32_MAX) {
                fprintf(stderr, "attnd import: --layer must be a layer index (0, 1, ...), got '%s'\n", val);
                return -1;
            }
            a->layer = v;
            a->have_layer = true;
        } else if (!strcmp(flag, "--name")) {
            a->name = val;
        } else if (!strcmp(flag, "--data-dir")) {
            a->data_dir = val;
        } else if (!strcmp(flag, "--check")) {
            a->check = val;
        } else { /* --tolerance */
            char *end;
            a->tolerance = strtod(val, &end);
            if (!*val || *end || !(a->tolerance >= 0)) {
                fprintf(stderr, "attnd import: --tolerance must be a number >= 0, got '%s'\n", val);
                return -1;
            }
        }
    }
    const char *missing = !a->checkpoint ? "CHECKPOINT" : !a->have_layer ? "--layer"
                          : !a->name     ? "--name"
                          : !a->data_dir ? "--data-dir"
                                         : NULL;
    if (missing) {
        fprintf(stderr, "attnd import: %s is required (see attnd import --help)\n", missing);
        return -1;
    }
    if (!srv_dd_name_valid(a->name)) {
        fprintf(stderr, "attnd import: --name '%s' is not a layer name: 1-64 of [A-Za-z0-9._-], not "
                        "starting with '.'\n", a->name);
        return -1;
    }
    return 0;
}

/* ---------------------------------------------------------------------------------------------- */
/* Progress on a terminal                                                                         */

typedef struct progress {
    bool show;
    double last;          /* srv_now() of the last line drawn                                   */
    const char *tensor;   /* the tensor of the last line                                        */
    bool drawn;
} progress;

/* "512 B", "3.2 KiB", "80.0 MiB", "1.9 GiB" into buf (returned). */
static const char *human(char *buf, size_t size, uint64_t b)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024 && u < 4)
        v /= 1024, u++;
    snprintf(buf, size, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
    return buf;
}

static void on_progress(void *ctx, const srv_hf_progress *p)
{
    progress *g = ctx;
    if (!g->show)
        return;
    double now = srv_now();
    bool done = p->tensors_done == p->tensors_total;
    if (!done && p->tensor == g->tensor && now - g->last < 0.1)
        return;
    g->last = now;
    g->tensor = p->tensor;
    g->drawn = true;
    /* \r and erase-line: one line, redrawn in place */
    char a[32], b[32];
    fprintf(stderr, "\r\033[K%s: tensor %d of %d, %s of %s of the layer%s%s",
            done ? "read" : p->file, p->tensors_done + !done, p->tensors_total,
            human(a, sizeof a, p->bytes_done), human(b, sizeof b, p->bytes_total), done ? "" : " - ",
            done ? "" : p->tensor);
    fflush(stderr);
}

static void progress_end(progress *g)
{
    if (g->drawn)
        fprintf(stderr, "\n");
    g->drawn = false;
}

/* ---------------------------------------------------------------------------------------------- */

/* "embed_dim=768 num_heads=12 is_causal=true" from a config object, in its own order. */
static void config_text(char *buf, size_t size, const json_t *config)
{
    size_t o = 0;
    buf[0] = '\0';
    const char *key;
    json_t *v;
    json_object_foreach((json_t *)config, key, v) {
        char *s = json_dumps(v, JSON_COMPACT | JSON_ENCODE_ANY);
        int n = snprintf(buf + o, size - o, "%s%s=%s", o ? " " : "", key, s ? s : "?");
        free(s);
        if (n < 0 || (size_t)n >= size - o)
            break;
        o += (size_t)n;
    }
}

/* A whole file (at most max bytes) in a malloc'd buffer, or NULL. */
static char *read_file(const char *path, int64_t max, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    long n = -1;
    if (fseek(f, 0, SEEK_END) == 0 && (n = ftell(f)) >= 0 && n <= max && fseek(f, 0, SEEK_SET) == 0 &&
        (buf = malloc((size_t)n + 1)) && fread(buf, 1, (size_t)n, f) == (size_t)n) {
        *len = (size_t)n;
    } else {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

static int fail(progress *g, const char *what, const srv_error *err)
{
    progress_end(g);
    fprintf(stderr, "attnd import: %s: %s\n", what, err->message);
    return 1;
}

int srv_import_main(int argc, char **argv)
{
    args a;
    int rc = parse_args(&a, argc, argv);
    if (rc == 1) {
        usage(stdout);
        return 0;
    }
    if (rc < 0)
        return 2;

    progress g = {.show = !a.quiet && isatty(STDERR_FILENO)};
    srv_error err = {0};
    double t0 = srv_now();
    mha_limits limits;
    mha_limits_default(&limits);
    srv_hf_layer hl = {0};
    srv_layer *l = NULL;
    srv_datadir *dd = NULL;
    srv_st ref = {0};
    char *refbuf = NULL;
    int status = 1;

    srv_ckpt *ck = srv_ckpt_open(AT_FDCWD, a.checkpoint, false, &err);
    if (!ck) {
        fail(&g, a.checkpoint, &err);
        goto done;
    }
    if (srv_hf_import(ck, a.layer, &limits, on_progress, &g, &hl, &err) < 0) {
        fail(&g, a.checkpoint, &err);
        goto done;
    }
    progress_end(&g);
    /* the layer as the daemon builds one: its config parser and weight checks */
    if (!(l = srv_persist_build(a.name, hl.config, &hl.weights, &limits, &err))) {
        fail(&g, "the imported layer is refused", &err);
        goto done;
    }

    char checked[160] = "";
    if (a.check) {
        size_t len = 0;
        if (!(refbuf = read_file(a.check, limits.max_elements * 8 + (1 << 20), &len))) {
            fprintf(stderr, "attnd import: cannot read --check file %s\n", a.check);
            goto done;
        }
        if (srv_st_parse(&ref, (const uint8_t *)refbuf, len, limits.max_elements, a.check, &err) < 0) {
            fail(&g, a.check, &err);
            goto done;
        }
        double diff, scale;
        if (srv_hf_check(l, &ref, &diff, &scale, &err) < 0) {
            fail(&g, a.check, &err);
            goto done;
        }
        double allowed = a.tolerance * (scale > 1 ? scale : 1);
        if (diff > allowed) {
            fprintf(stderr,
                    "attnd import: the imported layer does not reproduce %s: max |difference| %.3g, "
                    "over the tolerance %.3g; nothing written (was the reference taken from layer "
                    "%lld, the --layer imported? a reference from another layer differs by this "
                    "much)\n", a.check, diff, allowed, (long long)a.layer);
            goto done;
        }
        snprintf(checked, sizeof checked, "; check: max |diff| %.2g vs max |output| %.3g", diff, scale);
    }

    if (!(dd = srv_datadir_open(a.data_dir, false, &err))) {
        fail(&g, a.data_dir, &err);
        goto done;
    }
    srv_st_view v[MHA_MAX_PARAMS];
    int nv = srv_weights_views(l->layer, v);
    const double times[2] = {l->created, l->updated}; /* now: a layer the command made */
    if (srv_datadir_write(dd, a.name, l->config, v, nv, NULL, times, NULL, &err) < 0) {
        fail(&g, "writing the layer", &err);
        goto done;
    }
    char cfg[512], h1[32], h2[32];
    config_text(cfg, sizeof cfg, hl.config);
    printf("imported layer %" PRId64 " of %s checkpoint %s as %s/layers/%s: %s; %" PRId64
           " parameters; read %d tensors, %s (%s in all, of %d weight file%s) in %.2f s%s\n",
           a.layer, hl.family, a.checkpoint, a.data_dir, a.name, cfg,
           mha_param_total(mha_layer_config(l->layer)), hl.tensors, human(h1, sizeof h1, hl.bytes),
           human(h2, sizeof h2, srv_ckpt_bytes_read(ck)), srv_ckpt_files(ck), srv_ckpt_files(ck) == 1 ? "" : "s",
           srv_now() - t0, checked);
    status = 0;

done:
    srv_st_free(&ref);
    free(refbuf);
    srv_datadir_free(dd);
    srv_layer_release(l);
    srv_hf_layer_free(&hl);
    srv_ckpt_free(ck);
    return status;
}
