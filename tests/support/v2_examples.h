/*
 * v2_examples.h - the /v2 request texts the protocol documents show, written as they are there
 * (pretty-printed) but with our model's input and output names; shared by the codec unit test
 * (test_v2_codec.c) and the end-to-end test (test_v2.c), so both read the very same text.
 *
 *   V2_EXAMPLE_JSON("true, false")  inference_rest.md's request: id "42", query FP32 [2,2] = 1 2 3 4,
 *                                   key_padding_mask BOOL [2] with the given data, output asked for.
 *   V2_EXAMPLE_BINARY(3)            extension_binary_data.md's request header: model_name "mymodel",
 *                                   query FP32 [2,2] as 16 binary bytes, key_padding_mask BOOL [n]
 *                                   as n binary bytes, output asked for as binary. The binary part
 *                                   (16 + n bytes) follows the header; Inference-Header-Content-Length
 *                                   is strlen of this text.
 *
 * Both are string literals (arguments: a string literal, a whole number).
 */
#ifndef ATTND_V2_EXAMPLES_H
#define ATTND_V2_EXAMPLES_H

#define V2_EXAMPLE_JSON(mask_data)                                                                 \
    "{\n"                                                                                          \
    "  \"id\" : \"42\",\n"                                                                         \
    "  \"inputs\" : [\n"                                                                           \
    "    {\n"                                                                                      \
    "      \"name\" : \"query\",\n"                                                                \
    "      \"shape\" : [ 2, 2 ],\n"                                                                \
    "      \"datatype\" : \"FP32\",\n"                                                             \
    "      \"data\" : [ 1, 2, 3, 4 ]\n"                                                            \
    "    },\n"                                                                                     \
    "    {\n"                                                                                      \
    "      \"name\" : \"key_padding_mask\",\n"                                                     \
    "      \"shape\" : [ 2 ],\n"                                                                   \
    "      \"datatype\" : \"BOOL\",\n"                                                             \
    "      \"data\" : [ " mask_data " ]\n"                                                         \
    "    }\n"                                                                                      \
    "  ],\n"                                                                                       \
    "  \"outputs\" : [\n"                                                                          \
    "    {\n"                                                                                      \
    "      \"name\" : \"output\"\n"                                                                \
    "    }\n"                                                                                      \
    "  ]\n"                                                                                        \
    "}\n"

#define V2_EXAMPLE_BINARY(mask_len)                                                                \
    "{\n"                                                                                          \
    "  \"model_name\" : \"mymodel\",\n"                                                            \
    "  \"inputs\" : [\n"                                                                           \
    "    {\n"                                                                                      \
    "      \"name\" : \"query\",\n"                                                                \
    "      \"shape\" : [ 2, 2 ],\n"                                                                \
    "      \"datatype\" : \"FP32\",\n"                                                             \
    "      \"parameters\" : {\n"                                                                   \
    "        \"binary_data_size\" : 16\n"                                                          \
    "      }\n"                                                                                    \
    "    },\n"                                                                                     \
    "    {\n"                                                                                      \
    "      \"name\" : \"key_padding_mask\",\n"                                                     \
    "      \"shape\" : [ " #mask_len " ],\n"                                                       \
    "      \"datatype\" : \"BOOL\",\n"                                                             \
    "      \"parameters\" : {\n"                                                                   \
    "        \"binary_data_size\" : " #mask_len "\n"                                               \
    "      }\n"                                                                                    \
    "    }\n"                                                                                      \
    "  ],\n"                                                                                       \
    "  \"outputs\" : [\n"                                                                          \
    "    {\n"                                                                                      \
    "      \"name\" : \"output\",\n"                                                               \
    "      \"parameters\" : {\n"                                                                   \
    "        \"binary_data\" : true\n"                                                             \
    "      }\n"                                                                                    \
    "    }\n"                                                                                      \
    "  ]\n"                                                                                        \
    "}\n"

#endif
