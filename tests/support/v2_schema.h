/*
 * v2_schema.h - checks a JSON body against the texts of Triton's protocol documents, as written.
 *
 * The extension documents (docs/protocol/extension_*.md in triton-inference-server/server) describe
 * bodies in a schema notation, e.g.
 *
 *     $duration_stat =
 *     {
 *       "count" : $number,
 *       "ns" : $number
 *     }
 *
 * with $string, $number, $boolean, $object, $array for the JSON types, `#optional` after a field
 * that may be left out, `...` / `…` for "more of the same", and $name for another schema of the
 * same document. v2_schema_check reads such texts as they are in the document and checks a body
 * against one of them: every field the schema names with its JSON type, nesting and array element
 * form, no field the schema does not name ({ $string : $x, ... } is a map: any keys, each value a
 * $x), and optional fields only checked when present.
 *
 * v2_example_check does the same against a concrete example body of the documents (a real reply
 * shown there): the body must have every field of the example, with the same JSON type and
 * nesting (arrays: each element like the example's first); fields the example does not show are
 * allowed (examples from older releases show fewer fields).
 */
#ifndef ATTND_V2_SCHEMA_H
#define ATTND_V2_SCHEMA_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

/* Checks body against the schema called root ("$stats_model_response") among the schema texts
 * texts[0..n) (each "$name = <body>", as in the document). Returns true when it conforms;
 * otherwise false with why (size bytes) saying where and what ("model_stats[0].inference_stats:
 * missing \"cache_hit\""). A schema text that cannot be read is a failure too. */
bool v2_schema_check(const char *const *texts, int n, const char *root, const json_t *body,
                     char *why, size_t size);

/* Checks body against the example text (JSON) as described above. Returns true when it has the
 * example's form; otherwise false with why. */
bool v2_example_check(const char *example, const json_t *body, char *why, size_t size);

/* The JSON that schema text (one "$name = <body>") reads as: placeholders as strings ("$number"),
 * optional keys ending in '?', ellipses dropped. New reference, or NULL when it cannot be read.
 * *name (size 64) gets the schema's name with its '$'. For the tests of this reader itself. */
json_t *v2_schema_parse(const char *text, char name[64]);

#endif
