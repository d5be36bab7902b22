/*
 * openapi_embed.c - the repository's openapi.yaml, built into the binary so that /openapi.yaml
 * needs no source tree at run time (a container has none). The Makefile rebuilds this object when
 * openapi.yaml changes; the path is relative to the repository root, where make runs the compiler.
 */
__asm__(".section .rodata\n"
        ".global srv_openapi_yaml\n"
        ".global srv_openapi_yaml_end\n"
        ".balign 16\n"
        "srv_openapi_yaml:\n"
        ".incbin \"openapi.yaml\"\n"
        "srv_openapi_yaml_end:\n"
        ".byte 0\n"
        ".previous\n");
