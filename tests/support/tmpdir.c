/*
 * tmpdir.c - scratch directories and files for the tests (see tmpdir.h).
 */
#define _XOPEN_SOURCE 700
#include "tmpdir.h"

#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "check.h"

int td_make(char *root, size_t size, const char *name)
{
    int n = snprintf(root, size, "/tmp/attnd-test-%s-XXXXXX", name);
    if (n < 0 || (size_t)n >= size) {
        fprintf(stderr, "td_make: name '%s' too long for %zu bytes\n", name, size);
        return -1;
    }
    if (!mkdtemp(root)) {
        perror("mkdtemp");
        return -1;
    }
    return 0;
}

static int rm_one(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    return remove(p);
}

void td_rm_rf(const char *path)
{
    nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS);
}

int td_put_file(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f)
        return -1;
    size_t w = fwrite(data, 1, len, f);
    return fclose(f) == 0 && w == len ? 0 : -1;
}

int td_copy_file(const char *dst, const char *src)
{
    size_t len;
    char *d = check_read_file(src, &len);
    if (!d)
        return -1;
    int rc = td_put_file(dst, d, len);
    free(d);
    return rc;
}
