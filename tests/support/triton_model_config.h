/*
 * triton_model_config.h - checks a model configuration body (GET /v2/models/{name}/config)
 * against Triton's ModelConfig message, as model_config.proto (triton-inference-server/common,
 * protobuf/model_config.proto) defines it: every field name is one the proto declares for that
 * message, with the JSON form the proto's type takes (string, number, boolean, an enum's value
 * name, an object for a message or a map, an array for a repeated field), recursively.
 *
 * The table of messages and fields is written here from reading the proto (the messages a layer's
 * configuration uses, in full; the others are checked to be objects).
 */
#ifndef ATTND_TRITON_MODEL_CONFIG_H
#define ATTND_TRITON_MODEL_CONFIG_H

#include <stdbool.h>
#include <stddef.h>

#include <jansson.h>

/* True when config is a valid JSON form of ModelConfig; otherwise false with why (size bytes)
 * naming the field and what is wrong ("input[0].data_type: \"FP32\" is not a DataType value"). */
bool tmc_check(const json_t *config, char *why, size_t size);

#endif
