/*
 * json_error.h - what is wrong with a JSON text jansson refused, in words that quote none of it.
 *
 * jansson's own message (json_error_t.text) quotes the text near the error ("invalid token near
 * 'hunter2'"): fine for a client's own body, not for a file the client could not read itself (the
 * data dir's, a checkpoint's, a safetensors header's), whose replies say what is wrong and where
 * (the line and column, or the byte) and never its bytes.
 */
#ifndef ATTND_JSON_ERROR_H
#define ATTND_JSON_ERROR_H

#include <jansson.h>

/* "invalid syntax", "a key given twice", "a number out of range", ... for jerr. */
const char *srv_json_problem(const json_error_t *jerr);

#endif
