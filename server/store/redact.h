/*
 * redact.h - what a reply may say about a file in the data dir: the problem, never the bytes.
 *
 * /readyz answers without a key, and an error reply may describe a file of the data dir; either can
 * reach someone who could not read that file (a data dir writer can hard-link any file attnd can
 * read into a layer directory). So messages about data dir files never quote the file: datadir.c
 * and dd_read.c build their own from what they checked (the kind of file, its size, the line and
 * column of a JSON error), and a layer that reads but does not build (its config or its tensors are
 * wrong) is described here from the error's field: a field attnd defines (config.embed_dim,
 * weights.in_proj_weight) keeps its message, which names only that field and numbers; anything else
 * (an unknown field or tensor name, which is the file's text) is described by what is wrong. The
 * log keeps the full message.
 */
#ifndef ATTND_REDACT_H
#define ATTND_REDACT_H

#include <stddef.h>

#include "base/error.h"

/* Writes to out[size] "<where>: <what is wrong>" for e, an error from building a layer out of the
 * data dir's files (srv_persist_build), without anything taken from those files; see above. */
void srv_redact_build_error(char *out, size_t size, const char *where, const srv_error *e);

#endif
