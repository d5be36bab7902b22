/*
 * json_error.c - what is wrong with a JSON text jansson refused, in words that quote none of it
 * (see json_error.h).
 */
#include "json_error.h"

const char *srv_json_problem(const json_error_t *jerr)
{
    switch (json_error_code(jerr)) {
    case json_error_invalid_utf8:
        return "invalid UTF-8";
    case json_error_premature_end_of_input:
        return "the text ends too early";
    case json_error_end_of_input_expected:
        return "text after the end of the value";
    case json_error_duplicate_key:
        return "a key given twice";
    case json_error_null_character:
    case json_error_null_byte_in_key:
        return "a NUL character";
    case json_error_numeric_overflow:
        return "a number out of range";
    case json_error_stack_overflow:
        return "nested too deep";
    case json_error_out_of_memory:
        return "out of memory";
    default:
        return "invalid syntax";
    }
}
