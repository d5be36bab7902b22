/*
 * fuzz_datadir_tree.c - the data dir reader and writer over a hostile tree: entries of layers/ that
 * are links (into the data dir, out of it, to /, dangling, in a loop), FIFOs, sockets, plain files
 * where directories belong, directories where files belong, files declaring terabytes, and files
 * that change while they are read.
 *
 * Next to the data dir lies outside/: a valid layer "victim" and a file "secret", which links in
 * the tree point at. The input builds layers/ with a list of operations, then the data dir is
 * listed (srv_datadir_list, srv_datadir_strays), every name is read (srv_datadir_read), looked at
 * (srv_datadir_entry), written (srv_datadir_write, a small valid layer) or removed
 * (srv_datadir_remove), and cleaned (srv_datadir_clean), in an order the input picks. While that
 * runs, the input may change the tree under the reader: at the k-th read() or fstatat() made by the
 * data dir code (both linked through -Wl,--wrap), a file is truncated, overwritten, replaced by a
 * rename, or its layer directory swapped for a link.
 *
 * Input: operations of 5 bytes plus data, until a byte 0xFF; then actions, one byte each:
 *   op 0 mkdir layers/N            op 4 FIFO layers/N or layers/N/F
 *   op 1 file layers/N/F (data)    op 5 socket layers/N/F
 *   op 2 link layers/N -> T        op 6 layers/N/F declaring 2^40 bytes (sparse), data at its head
 *   op 3 link layers/N/F -> T      op 7 a plain file layers/N (data)
 * N is one of a few names (a, b, victim, x.y, .hidden, "bad name"), F config.json,
 * weights.safetensors or a temp name, T a target from a table (outside/victim, outside/secret,
 * /, a dangling name, the link itself, a sibling layer, ..). Op bytes: kind, name, file/target,
 * data length (2 bytes, little-endian); then the data.
 * Actions: low 3 bits pick list+read all, strays, read, entry, write, remove, clean, arm a change
 * (the next byte: after how many calls; the one after: which change); high bits pick the name.
 *
 * Checks: outside/ is byte for byte what it was (nothing is ever written, removed or repaired
 * through a link); a name whose entry is not a directory is never listed, never read as a layer,
 * and a write or remove of it answers 409 (400 for a name that is no layer name) and leaves the
 * entry as it was; a layer read whole is
 * built and runs; no message names the data dir's absolute path; a refusal is never 500 unless
 * the change armed made a read fail. A FIFO must never block (libFuzzer's -timeout), a declared
 * terabyte never be allocated (-malloc_limit_mb).
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <dirent.h>

#include "store/datadir.h"
#include "store/persist.h"
#include "fuzz_fail.h"


#define MAX_EL (1 << 12)

static char root[256], data_dir[300], layers[320], outside[300];
static srv_datadir *dd;

static const char *names[8] = {"a", "b", "victim", "x.y", ".hidden", "bad name", "c", "a"};
static const char *files[4] = {"config.json", "weights.safetensors", ".weights.safetensors.tmp-1-1",
                               "other"};
static const char *targets[8] = {"../../outside/victim", "../../outside/secret", "/", "nowhere",
                                 "a", "../b", "../../outside/victim/weights.safetensors", "."};

/* ---------------------------------------------------------------------------------------------- */
/* Changes while the data dir code reads: read() and fstatat() pass through here (-Wl,--wrap)     */

ssize_t __real_read(int fd, void *buf, size_t n);
int __real_fstatat(int dirfd, const char *path, struct stat *st, int flags);

static int countdown;  /* calls left before the change; 0: none armed */
static int change;     /* which change */
static bool changed;   /* the armed change happened in this input */
static char change_name[80];

/* The harness never follows a link either: every file it makes or changes is reached from
 * layers/ through directories opened with O_NOFOLLOW (else a link the input made would have it
 * write into outside/ itself). */
static int layers_fd = -1;

static int layer_dir(const char *name)
{
    return openat(layers_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
}

/* Opens file in layer dir d for writing, never through a link, never blocking on a FIFO. */
static int open_file(int d, const char *file, int extra)
{
    return openat(d, file, O_WRONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC | extra, 0644);
}

static void do_change(void)
{
    int d = layer_dir(change_name);
    const char *f = files[change & 1];
    switch ((change >> 1) & 3) {
    case 0: { /* the file shrinks */
        int fd = d >= 0 ? open_file(d, f, 0) : -1;
        if (fd >= 0) {
            if (ftruncate(fd, (change >> 3) & 7) != 0) {
            }
            close(fd);
        }
        break;
    }
    case 1: { /* overwritten in place */
        int fd = d >= 0 ? open_file(d, f, 0) : -1;
        if (fd >= 0) {
            if (write(fd, "{\"xx\":", 6) < 0) {
            }
            close(fd);
        }
        break;
    }
    case 2: { /* replaced by a rename: another inode under the same name */
        int fd = d >= 0 ? open_file(d, ".swap", O_CREAT | O_TRUNC) : -1;
        if (fd >= 0) {
            if (write(fd, "{}", 2) < 0) {
            }
            close(fd);
            renameat(d, ".swap", d, f);
        }
        break;
    }
    default: { /* the layer directory swapped for a link out */
        char gone[96];
        snprintf(gone, sizeof gone, ".gone-%s", change_name);
        if (renameat(layers_fd, change_name, layers_fd, gone) == 0 &&
            symlinkat("../../outside/victim", layers_fd, change_name) != 0)
            renameat(layers_fd, gone, layers_fd, change_name);
        break;
    }
    }
    if (d >= 0)
        close(d);
    changed = true;
}

static void tick(void)
{
    if (countdown > 0 && --countdown == 0)
        do_change();
}

ssize_t __wrap_read(int fd, void *buf, size_t n)
{
    tick();
    return __real_read(fd, buf, n);
}

int __wrap_fstatat(int dirfd, const char *path, struct stat *st, int flags)
{
    tick();
    return __real_fstatat(dirfd, path, st, flags);
}

/* ---------------------------------------------------------------------------------------------- */
/* The trees                                                                                      */

static void write_file(const char *path, const void *p, size_t n)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    if (n && write(fd, p, n) < 0) {
    }
    close(fd);
}

/* Removes everything below path (links themselves, never what they point at). */
static void wipe(const char *path)
{
    DIR *d = opendir(path);
    if (!d)
        return;
    struct dirent *de;
    while ((de = readdir(d)) != NULL) {
        if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
            continue;
        char p[1024];
        snprintf(p, sizeof p, "%s/%s", path, de->d_name);
        struct stat st;
        if (lstat(p, &st) == 0 && S_ISDIR(st.st_mode)) {
            wipe(p);
            rmdir(p);
        } else {
            unlink(p);
        }
    }
    closedir(d);
}

/* A snapshot of outside/: every path, its type, size and bytes. */
static char *snapshot(void)
{
    char *out = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&out, &len);
    const char *paths[] = {"secret", "victim", "victim/config.json", "victim/weights.safetensors"};
    for (int i = 0; i < 4; i++) {
        char p[512];
        snprintf(p, sizeof p, "%s/%s", outside, paths[i]);
        struct stat st;
        if (lstat(p, &st) != 0) {
            fprintf(f, "%s: gone\n", paths[i]);
            continue;
        }
        fprintf(f, "%s: mode %o size %lld:", paths[i], st.st_mode, (long long)st.st_size);
        if (S_ISREG(st.st_mode)) {
            FILE *r = fopen(p, "rb");
            int c;
            while (r && (c = fgetc(r)) != EOF)
                fputc(c, f);
            if (r)
                fclose(r);
        }
        fputc('\n', f);
    }
    fclose(f);
    return out;
}

static const char VICTIM_CONFIG[] = "{\"embed_dim\": 2, \"num_heads\": 1}\n";
static char *outside_before;

static void victim_weights(srv_buf *b)
{
    static const float w[6 * 2 + 6 + 4 + 2] = {0.5f, -0.25f, 1, 0, 0, 1, 0.5f, 0.5f, -1, 0, 0, 2};
    static const int64_t s_in[2] = {6, 2}, s_inb[1] = {6}, s_out[2] = {2, 2}, s_outb[1] = {2};
    srv_st_view v[4] = {{"in_proj_weight", 2, s_in, w},
                        {"in_proj_bias", 1, s_inb, w + 12},
                        {"out_proj.weight", 2, s_out, w + 18},
                        {"out_proj.bias", 1, s_outb, w + 22}};
    srv_error err = {0};
    if (srv_st_write(b, v, 4, NULL, &err) != 0)
        FAIL("victim weights: %s", err.message);
}

static void setup(void)
{
    const char *tmp = getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp";
    snprintf(root, sizeof root, "%s/attnd-fuzz-tree-%d", tmp, (int)getpid());
    snprintf(data_dir, sizeof data_dir, "%s/data", root);
    snprintf(layers, sizeof layers, "%s/layers", data_dir);
    snprintf(outside, sizeof outside, "%s/outside", root);
    mkdir(root, 0700);
    mkdir(outside, 0700);
    char p[512];
    snprintf(p, sizeof p, "%s/victim", outside);
    mkdir(p, 0700);
    snprintf(p, sizeof p, "%s/victim/config.json", outside);
    write_file(p, VICTIM_CONFIG, sizeof VICTIM_CONFIG - 1);
    srv_buf b;
    srv_buf_init(&b);
    victim_weights(&b);
    snprintf(p, sizeof p, "%s/victim/weights.safetensors", outside);
    write_file(p, b.data, b.len);
    srv_buf_free(&b);
    snprintf(p, sizeof p, "%s/secret", outside);
    write_file(p, "the secret", 10);
    outside_before = snapshot();
    srv_error err = {0};
    dd = srv_datadir_open(data_dir, false, &err);
    if (!dd)
        FAIL("open: %s", err.message);
    dd->temp_grace_s = 0; /* clean removes every leftover at once */
    layers_fd = open(layers, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (layers_fd < 0)
        FAIL("cannot open %s: %s", layers, strerror(errno));
}

static void build(const uint8_t **pp, const uint8_t *end)
{
    const uint8_t *p = *pp;
    while (end - p >= 5 && p[0] != 0xFF) {
        unsigned kind = p[0] & 7;
        const char *n = names[p[1] & 7];
        const char *f = files[p[2] & 3];
        const char *t = targets[p[2] & 7];
        size_t len = (size_t)p[3] | (size_t)p[4] << 8;
        p += 5;
        if (len > (size_t)(end - p))
            len = (size_t)(end - p);
        if (kind == 2) {
            symlinkat(t, layers_fd, n);
        } else if (kind == 7) { /* a plain file where a layer directory belongs */
            int fd = open_file(layers_fd, n, O_CREAT | O_TRUNC);
            if (fd >= 0) {
                if (len && write(fd, p, len) < 0) {
                }
                close(fd);
            }
        } else if (kind == 4 && !(p[-3] & 4)) {
            mkfifoat(layers_fd, n, 0644);
        } else {
            mkdirat(layers_fd, n, 0755);
            int d = layer_dir(n);
            if (d >= 0) {
                if (kind == 3) {
                    symlinkat(t, d, f);
                } else if (kind == 4) {
                    mkfifoat(d, f, 0644);
                } else if (kind == 5) {
                    char path[600];
                    snprintf(path, sizeof path, "%s/%s/%s", layers, n, f);
                    int sk = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
                    struct sockaddr_un a = {.sun_family = AF_UNIX};
                    if (sk >= 0 && strlen(path) < sizeof a.sun_path) { /* the dir is no link */
                        memcpy(a.sun_path, path, strlen(path) + 1);
                        bind(sk, (struct sockaddr *)&a, sizeof a);
                    }
                    if (sk >= 0)
                        close(sk);
                } else if (kind != 0) { /* 1: a file; 6: one declaring 2^40 bytes (sparse) */
                    int fd = open_file(d, f, O_CREAT | O_TRUNC);
                    if (fd >= 0) {
                        if (len && write(fd, p, len) < 0) {
                        }
                        if (kind == 6 && ftruncate(fd, (off_t)1 << 40) != 0) {
                        }
                        close(fd);
                    }
                }
                close(d);
            }
        }
        p += len;
    }
    *pp = p < end ? p + 1 : p;
}

/* ---------------------------------------------------------------------------------------------- */
/* The checks                                                                                     */

static void check_message(const srv_error *err, const char *what)
{
    if (strstr(err->message, root))
        FAIL("%s: the message names the server's path: %s", what, err->message);
}

/* What layers/<name> is, as lstat sees it: 'd' directory, 'l' link (target in link), 'o' other,
 * '-' nothing. */
static char kind_of(const char *name, char *link, size_t size)
{
    char p[400];
    snprintf(p, sizeof p, "%s/%s", layers, name);
    struct stat st;
    link[0] = '\0';
    if (lstat(p, &st) != 0)
        return '-';
    if (S_ISLNK(st.st_mode)) {
        ssize_t n = readlink(p, link, size - 1);
        link[n > 0 ? n : 0] = '\0';
        return 'l';
    }
    return S_ISDIR(st.st_mode) ? 'd' : 'o';
}

static void check_read(const char *name)
{
    srv_dd_layer dl;
    srv_error err = {0};
    char link[256];
    char k = kind_of(name, link, sizeof link);
    if (srv_datadir_read(dd, name, MAX_EL, &dl, &err, NULL) != 0) {
        if (err.code == SRV_OK || !err.message[0])
            FAIL("read %s refused without an error", name);
        if (err.code == SRV_E_INTERNAL && !changed)
            FAIL("read %s: internal error with nothing changing: %s", name, err.message);
        check_message(&err, "read");
        return;
    }
    if (k != 'd' && !changed)
        FAIL("layers/%s is not a directory ('%c' %s) and was read as a layer", name, k, link);
    if (json_object_get(dl.config, "embed_dim") && json_integer_value(json_object_get(dl.config, "embed_dim")) == 2 &&
        dl.weights.n == 4 && k == 'l')
        FAIL("the layer outside/victim was read through layers/%s", name);
    mha_limits lim;
    mha_limits_default(&lim);
    lim.max_elements = MAX_EL;
    lim.max_dim = 1 << 10;
    srv_layer *l = srv_persist_build(name, dl.config, &dl.weights, &lim, &err);
    if (!l && (err.code == SRV_OK || err.code == SRV_E_INTERNAL))
        FAIL("build %s refused with code %d: %s", name, err.code, err.message);
    srv_layer_release(l);
    srv_dd_layer_free(&dl);
}

static void check_change(const char *name, bool remove)
{
    char link[256], after[256];
    char k = kind_of(name, link, sizeof link);
    srv_error err = {0};
    int rc;
    if (remove) {
        rc = srv_datadir_remove(dd, name, &err);
    } else {
        json_t *cfg = json_loads(VICTIM_CONFIG, 0, NULL);
        static const float w[24] = {1, 0, 0, 1, 1, 0, 0, 1, 1, 0, 0, 1};
        static const int64_t s_in[2] = {6, 2}, s_inb[1] = {6}, s_out[2] = {2, 2}, s_outb[1] = {2};
        srv_st_view v[4] = {{"in_proj_weight", 2, s_in, w},
                            {"in_proj_bias", 1, s_inb, w + 12},
                            {"out_proj.weight", 2, s_out, w + 18},
                            {"out_proj.bias", 1, s_outb, w + 22}};
        rc = srv_datadir_write(dd, name, cfg, v, 4, "9", NULL, NULL, &err);
        json_decref(cfg);
    }
    if (rc < 0) {
        if (err.code == SRV_OK || !err.message[0])
            FAIL("%s %s refused without an error", remove ? "remove" : "write", name);
        check_message(&err, remove ? "remove" : "write");
    }
    if ((k == 'l' || k == 'o') && !changed && srv_dd_name_valid(name)) {
        if (rc >= 0 || err.code != SRV_E_CONFLICT)
            FAIL("%s of layers/%s, a '%c' (%s): returned %d, code %d (409 expected): %s",
                 remove ? "remove" : "write", name, k, link, rc, err.code, err.message);
        if (kind_of(name, after, sizeof after) != k || strcmp(link, after) != 0)
            FAIL("%s of layers/%s changed the entry", remove ? "remove" : "write", name);
    }
}

static void stray(const char *name, const char *reason, void *ctx)
{
    if (strstr(reason, root) || strstr(name, root))
        FAIL("a stray's reason names the server's path: %s", reason);
}

static void list_and_read(void)
{
    srv_dd_entry *list = NULL;
    srv_error err = {0};
    int n = srv_datadir_list(dd, &list, &err);
    for (int i = 0; i < n; i++) {
        char link[256];
        char k = kind_of(list[i].name, link, sizeof link);
        if (k != 'd' && !changed)
            FAIL("layers/%s is listed as a layer and is a '%c' (%s)", list[i].name, k, link);
        check_read(list[i].name);
    }
    free(list);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (!dd)
        setup();
    wipe(layers);
    countdown = 0;
    changed = false;
    const uint8_t *p = data, *end = data + size;
    build(&p, end);
    for (; p < end; p++) {
        const char *name = names[(p[0] >> 3) & 7];
        switch (p[0] & 7) {
        case 0:
            list_and_read();
            break;
        case 1:
            srv_datadir_strays(dd, stray, NULL);
            break;
        case 2:
            check_read(name);
            break;
        case 3: {
            srv_error err = {0};
            if (srv_datadir_entry(dd, name, &err) < 0)
                check_message(&err, "entry");
            break;
        }
        case 4:
            check_change(name, false);
            break;
        case 5:
            check_change(name, true);
            break;
        case 6:
            srv_datadir_clean(dd);
            break;
        default:
            if (end - p >= 3) {
                countdown = 1 + p[1] % 16;
                change = p[2];
                snprintf(change_name, sizeof change_name, "%s", name);
                p += 2;
            }
            break;
        }
        char *now = snapshot();
        if (strcmp(now, outside_before) != 0)
            FAIL("outside/ changed:\n%s\nwas:\n%s", now, outside_before);
        free(now);
    }
    countdown = 0;
    return 0;
}
