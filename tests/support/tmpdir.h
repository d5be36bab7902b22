/*
 * tmpdir.h - scratch directories and files for the tests that write to disk (the data dir tests):
 *
 *   char root[64];
 *   if (td_make(root, sizeof root, "datadir") != 0) return 1;   // /tmp/attnd-test-datadir-XXXXXX
 *   td_put_file(path, data, len);  td_copy_file(dst, src);  ...
 *   td_rm_rf(root);
 *
 * Everything stays below /tmp; nothing here checks (CHECK) by itself.
 */
#ifndef ATTND_TMPDIR_H
#define ATTND_TMPDIR_H

#include <stddef.h>

/* Creates a fresh directory /tmp/attnd-test-<name>-XXXXXX and writes its path into root (size
 * bytes). Returns 0, or -1 after printing why (perror) when it could not. */
int td_make(char *root, size_t size, const char *name);

/* Removes path and everything below it (does not follow links); errors are ignored. */
void td_rm_rf(const char *path);

/* Writes [data, data+len) to path (created or truncated). Returns 0, or -1 on any failure. */
int td_put_file(const char *path, const void *data, size_t len);

/* Copies the file src to dst (created or truncated). Returns 0, or -1 on any failure. */
int td_copy_file(const char *dst, const char *src);

#endif
