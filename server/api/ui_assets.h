/*
 * ui_assets.h - the viewer's files (web/), built into the binary by ui_assets.c: /ui needs no
 * source tree at run time, and serves no file that is not in this table.
 */
#ifndef ATTND_UI_ASSETS_H
#define ATTND_UI_ASSETS_H

#include <stddef.h>

typedef struct srv_ui_asset {
    const char *name;         /* the file name under web/ and /ui/: "attnd.js"                    */
    const char *content_type; /* "text/javascript; charset=utf-8", ...                           */
    const char *data;         /* its bytes [data, end), borrowed from the binary's read-only data */
    const char *end;
} srv_ui_asset;

/* Every file of web/ the viewer loads, ended by an entry with name NULL. */
extern const srv_ui_asset srv_ui_assets[];

/* The asset called name (exactly; no path), or NULL. */
const srv_ui_asset *srv_ui_asset_find(const char *name);

#endif
