/*
 * ui_assets.c - the viewer's files (web/), built into the binary with .incbin, as openapi.yaml is
 * (openapi_embed.c). The Makefile rebuilds this object when a file of web/ changes; paths are
 * relative to the repository root, where make runs the compiler. A new file of web/ needs a line
 * in each list below: tests/api/test_ui.c fails until every .html, .js and .css of web/ is here,
 * byte for byte.
 */
#include "ui_assets.h"

#include <string.h>

/* EMBED(sym, file): sym[] .. sym_end[] hold web/file */
#define EMBED(sym, file)                                                                           \
    __asm__(".section .rodata\n"                                                                   \
            ".global " #sym "\n"                                                                   \
            ".hidden " #sym "\n"                                                                   \
            ".global " #sym "_end\n"                                                               \
            ".hidden " #sym "_end\n"                                                               \
            ".balign 16\n" #sym ":\n"                                                              \
            ".incbin \"web/" file "\"\n" #sym "_end:\n"                                            \
            ".previous\n");                                                                        \
    extern const char sym[], sym##_end[]

EMBED(srv_ui_app_js, "app.js");
EMBED(srv_ui_attnd_js, "attnd.js");
EMBED(srv_ui_colormap_js, "colormap.js");
EMBED(srv_ui_deepzoom_js, "deepzoom.js");
EMBED(srv_ui_dom_js, "dom.js");
EMBED(srv_ui_export_js, "export.js");
EMBED(srv_ui_format_js, "format.js");
EMBED(srv_ui_heatmap_js, "heatmap.js");
EMBED(srv_ui_index_html, "index.html");
EMBED(srv_ui_layers_js, "layers.js");
EMBED(srv_ui_masks_js, "masks.js");
EMBED(srv_ui_npy_js, "npy.js");
EMBED(srv_ui_state_js, "state.js");
EMBED(srv_ui_style_css, "style.css");
EMBED(srv_ui_tokens_js, "tokens.js");
EMBED(srv_ui_view_compare_js, "view_compare.js");
EMBED(srv_ui_view_heads_js, "view_heads.js");
EMBED(srv_ui_view_lines_js, "view_lines.js");
EMBED(srv_ui_view_neuron_js, "view_neuron.js");
EMBED(srv_ui_view_params_js, "view_params.js");
EMBED(srv_ui_view_topk_js, "view_topk.js");
EMBED(srv_ui_view_trace_js, "view_trace.js");
EMBED(srv_ui_view_zoom_js, "view_zoom.js");

#define ASSET(sym, file, type)                                                                     \
    {                                                                                              \
        file, type, sym, sym##_end                                                                 \
    }
#define HTML "text/html; charset=utf-8"
#define JS "text/javascript; charset=utf-8"
#define CSS "text/css; charset=utf-8"

const srv_ui_asset srv_ui_assets[] = {
    ASSET(srv_ui_app_js, "app.js", JS),
    ASSET(srv_ui_attnd_js, "attnd.js", JS),
    ASSET(srv_ui_colormap_js, "colormap.js", JS),
    ASSET(srv_ui_deepzoom_js, "deepzoom.js", JS),
    ASSET(srv_ui_dom_js, "dom.js", JS),
    ASSET(srv_ui_export_js, "export.js", JS),
    ASSET(srv_ui_format_js, "format.js", JS),
    ASSET(srv_ui_heatmap_js, "heatmap.js", JS),
    ASSET(srv_ui_index_html, "index.html", HTML),
    ASSET(srv_ui_layers_js, "layers.js", JS),
    ASSET(srv_ui_masks_js, "masks.js", JS),
    ASSET(srv_ui_npy_js, "npy.js", JS),
    ASSET(srv_ui_state_js, "state.js", JS),
    ASSET(srv_ui_style_css, "style.css", CSS),
    ASSET(srv_ui_tokens_js, "tokens.js", JS),
    ASSET(srv_ui_view_compare_js, "view_compare.js", JS),
    ASSET(srv_ui_view_heads_js, "view_heads.js", JS),
    ASSET(srv_ui_view_lines_js, "view_lines.js", JS),
    ASSET(srv_ui_view_neuron_js, "view_neuron.js", JS),
    ASSET(srv_ui_view_params_js, "view_params.js", JS),
    ASSET(srv_ui_view_topk_js, "view_topk.js", JS),
    ASSET(srv_ui_view_trace_js, "view_trace.js", JS),
    ASSET(srv_ui_view_zoom_js, "view_zoom.js", JS),
    {NULL, NULL, NULL, NULL},
};

const srv_ui_asset *srv_ui_asset_find(const char *name)
{
    for (const srv_ui_asset *a = srv_ui_assets; a->name; a++)
        if (strcmp(a->name, name) == 0)
            return a;
    return NULL;
}
