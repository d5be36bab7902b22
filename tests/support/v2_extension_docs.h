/*
 * v2_extension_docs.h - the texts of Triton's protocol extension documents, as they are written
 * there (triton-inference-server/server, docs/protocol/ and docs/examples/), for the tests to check
 * attnd's /v2 extension bodies against the documents rather than against attnd's own output.
 *
 *   triton_stats_schemas      extension_statistics.md: $stats_model_response, $model_stat,
 *                             $inference_stats, $response_stats, $batch_stats, $duration_stat,
 *                             $memory_usage, $repository_statistics_error_response
 *   triton_repository_schemas extension_model_repository.md: the index, load and unload requests,
 *                             responses and error responses
 *   TRITON_LOAD_EXAMPLE       extension_model_repository.md's load request example, HTTP head
 *                             and body as written (its "config" string is not valid JSON there)
 *   TRITON_STATS_EXAMPLE_1, _2 the two "Model 'peoplenet' Stats" replies shown by
 *                             docs/examples/jetson/concurrency_and_dynamic_batching/README.md
 *
 * Read with v2_schema.h.
 */
#ifndef ATTND_V2_EXTENSION_DOCS_H
#define ATTND_V2_EXTENSION_DOCS_H

/* extension_statistics.md, "Statistics Response JSON Object" and its error object */
static const char *const triton_stats_schemas[] __attribute__((unused)) = {
    "$stats_model_response =\n"
    "{\n"
    "  \"model_stats\" : [ $model_stat, ... ]\n"
    "}\n",
    "$model_stat =\n"
    "{\n"
    "  \"name\" : $string,\n"
    "  \"version\" : $string #optional,\n"
    "  \"last_inference\" : $number,\n"
    "  \"inference_count\" : $number,\n"
    "  \"execution_count\" : $number,\n"
    "  \"inference_stats\" : $inference_stats,\n"
    "  \"response_stats\" : { $string : $response_stats, ... },\n"
    "  \"batch_stats\" : [ $batch_stats, ... ],\n"
    "  \"memory_usage\" : [ $memory_usage, ...]\n"
    "}\n",
    "$inference_stats =\n"
    "{\n"
    "  \"success\" : $duration_stat,\n"
    "  \"fail\" : $duration_stat,\n"
    "  \"queue\" : $duration_stat,\n"
    "  \"compute_input\" : $duration_stat,\n"
    "  \"compute_infer\" : $duration_stat,\n"
    "  \"compute_output\" : $duration_stat,\n"
    "  \"cache_hit\": $duration_stat,\n"
    "  \"cache_miss\": $duration_stat\n"
    "}\n",
    "$response_stats =\n"
    "{\n"
    "  \"compute_infer\" : $duration_stat,\n"
    "  \"compute_output\" : $duration_stat,\n"
    "  \"success\" : $duration_stat,\n"
    "  \"fail\" : $duration_stat,\n"
    "  \"empty_response\" : $duration_stat,\n"
    "  \"cancel\" : $duration_stat\n"
    "}\n",
    "$batch_stats =\n"
    "{\n"
    "  \"batch_size\" : $number,\n"
    "  \"compute_input\" : $duration_stat,\n"
    "  \"compute_infer\" : $duration_stat,\n"
    "  \"compute_output\" : $duration_stat\n"
    "}\n",
    "$duration_stat =\n"
    "{\n"
    "  \"count\" : $number,\n"
    "  \"ns\" : $number\n"
    "}\n",
    "$memory_usage =\n"
    "{\n"
    "  \"type\" : $string,\n"
    "  \"id\" : $number,\n"
    "  \"byte_size\" : $number\n"
    "}\n",
    "$repository_statistics_error_response =\n"
    "{\n"
    "  \"error\": $string\n"
    "}\n",
};
#define TRITON_STATS_SCHEMAS_COUNT (int)(sizeof triton_stats_schemas / sizeof triton_stats_schemas[0])

/* extension_model_repository.md, "Index", "Load" and "Unload" */
static const char *const triton_repository_schemas[] __attribute__((unused)) = {
    "$repository_index_request =\n"
    "{\n"
    "  \"ready\" : $boolean #optional,\n"
    "}\n",
    "$repository_index_response =\n"
    "[\n"
    "  {\n"
    "    \"name\" : $string,\n"
    "    \"version\" : $string #optional,\n"
    "    \"state\" : $string,\n"
    "    \"reason\" : $string\n"
    "  },\n"
    "  …\n"
    "]\n",
    "$repository_index_error_response =\n"
    "{\n"
    "  \"error\": $string\n"
    "}\n",
    "$repository_load_request =\n"
    "{\n"
    "  \"parameters\" : $parameters #optional\n"
    "}\n",
    "$repository_load_error_response =\n"
    "{\n"
    "  \"error\": $string\n"
    "}\n",
    "$repository_unload_request =\n"
    "{\n"
    "  \"parameters\" : $parameters #optional\n"
    "}\n",
    "$repository_unload_error_response =\n"
    "{\n"
    "  \"error\": $string\n"
    "}\n",
};
#define TRITON_REPOSITORY_SCHEMAS_COUNT (int)(sizeof triton_repository_schemas / sizeof triton_repository_schemas[0])

/* extension_model_repository.md, "Load", "Examples" */
#define TRITON_LOAD_EXAMPLE \
    "POST /v2/repository/models/mymodel/load HTTP/1.1\n" \
    "Host: localhost:8000\n" \
    "{\n" \
    "  \"parameters\": {\n" \
    "    \"config\": \"{\n" \
    "      \"name\": \"mymodel\",\n" \
    "      \"backend\": \"onnxruntime\",\n" \
    "      \"inputs\": [{\n" \
    "          \"name\": \"INPUT0\",\n" \
    "          \"datatype\": \"FP32\",\n" \
    "          \"shape\": [ 1 ]\n" \
    "        }\n" \
    "      ],\n" \
    "      \"outputs\": [{\n" \
    "          \"name\": \"OUTPUT0\",\n" \
    "          \"datatype\": \"FP32\",\n" \
    "          \"shape\": [ 1 ]\n" \
    "        }\n" \
    "      ]\n" \
    "    }\",\n" \
    "\n" \
    "    \"file:1/model.onnx\" : \"<base64-encoded-file-content>\"\n" \
    "  }\n" \
    "}\n"

/* docs/examples/jetson/concurrency_and_dynamic_batching/README.md, "Expected output" (concurrency),
 * without the "TOTAL INFERENCE TIME" line after it */
#define TRITON_STATS_EXAMPLE_1 \
    "{\n" \
    "   \"model_stats\":[\n" \
    "      {\n" \
    "         \"name\":\"peoplenet\",\n" \
    "         \"version\":\"1\",\n" \
    "         \"last_inference\":1626448309997,\n" \
    "         \"inference_count\":6,\n" \
    "         \"execution_count\":6,\n" \
    "         \"inference_stats\":{\n" \
    "            \"success\":{\n" \
    "               \"count\":6,\n" \
    "               \"ns\":574589968\n" \
    "            },\n" \
    "            \"fail\":{\n" \
    "               \"count\":0,\n" \
    "               \"ns\":0\n" \
    "            },\n" \
    "            \"queue\":{\n" \
    "               \"count\":6,\n" \
    "               \"ns\":234669630\n" \
    "            },\n" \
    "            \"compute_input\":{\n" \
    "               \"count\":6,\n" \
    "               \"ns\":194884512\n" \
    "            },\n" \
    "            \"compute_infer\":{\n" \
    "               \"count\":6,\n" \
    "               \"ns\":97322636\n" \
    "            },\n" \
    "            \"compute_output\":{\n" \
    "               \"count\":6,\n" \
    "               \"ns\":47700806\n" \
    "            }\n" \
    "         },\n" \
    "         \"batch_stats\":[\n" \
    "            {\n" \
    "               \"batch_size\":1,\n" \
    "               \"compute_input\":{\n" \
    "                  \"count\":6,\n" \
    "                  \"ns\":194884512\n" \
    "               },\n" \
    "               \"compute_infer\":{\n" \
    "                  \"count\":6,\n" \
    "                  \"ns\":97322636\n" \
    "               },\n" \
    "               \"compute_output\":{\n" \
    "                  \"count\":6,\n" \
    "                  \"ns\":47700806\n" \
    "               }\n" \
    "            }\n" \
    "         ]\n" \
    "      }\n" \
    "   ]\n" \
    "}\n"

/* docs/examples/jetson/concurrency_and_dynamic_batching/README.md, "Expected output" (dynamic batching),
 * without the "TOTAL INFERENCE TIME" line after it */
#define TRITON_STATS_EXAMPLE_2 \
    "{\n" \
    "   \"model_stats\":[\n" \
    "      {\n" \
    "         \"name\":\"peoplenet\",\n" \
    "         \"version\":\"1\",\n" \
    "         \"last_inference\":1626447787832,\n" \
    "         \"inference_count\":6,\n" \
    "         \"execution_count\":2,\n" \
    "         \"inference_stats\":{\n" \
    "            \"success\":{\n" \
    "               \"count\":6,\n" \
    "               \"ns\":558981051\n" \
    "            },\n" \
    "            \"fail\":{\n" \
    "               \"count\":0,\n" \
    "               \"ns\":0\n" \
    "            },\n" \
    "            \"queue\":{\n" \
    "               \"count\":6,\n" \
    "               \"ns\":49271380\n" \
    "            },\n" \
    "            \"compute_input\":{\n" \
    "               \"count\":6,\n" \
    "               \"ns\":170634044\n" \
    "            },\n" \
    "            \"compute_infer\":{\n" \
    "               \"count\":6,\n" \
    "               \"ns\":338079193\n" \
    "            },\n" \
    "            \"compute_output\":{\n" \
    "               \"count\":6,\n" \
    "               \"ns\":950544\n" \
    "            }\n" \
    "         },\n" \
    "         \"batch_stats\":[\n" \
    "            {\n" \
    "               \"batch_size\":1,\n" \
    "               \"compute_input\":{\n" \
    "                  \"count\":1,\n" \
    "                  \"ns\":15955684\n" \
    "               },\n" \
    "               \"compute_infer\":{\n" \
    "                  \"count\":1,\n" \
    "                  \"ns\":29917093\n" \
    "               },\n" \
    "               \"compute_output\":{\n" \
    "                  \"count\":1,\n" \
    "                  \"ns\":152264\n" \
    "               }\n" \
    "            },\n" \
    "            {\n" \
    "               \"batch_size\":5,\n" \
    "               \"compute_input\":{\n" \
    "                  \"count\":1,\n" \
    "                  \"ns\":30935672\n" \
    "               },\n" \
    "               \"compute_infer\":{\n" \
    "                  \"count\":1,\n" \
    "                  \"ns\":61632420\n" \
    "               },\n" \
    "               \"compute_output\":{\n" \
    "                  \"count\":1,\n" \
    "                  \"ns\":159656\n" \
    "               }\n" \
    "            }\n" \
    "         ]\n" \
    "      }\n" \
    "   ]\n" \
    "}\n"

#endif
