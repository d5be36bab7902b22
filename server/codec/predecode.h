/*
 * predecode.h - base64 tensor texts decoded while the request body is still arriving.
 *
 * Why: an L forward request in the base64 form (docs/api.md, "Tensors in JSON") is one 16.8 MB string.
 * Decoding it once the body is complete adds its time to the request's, while during the upload
 * the thread receiving the body mostly waits for the client (curl sends 64 KB at a time). So the
 * receiving thread feeds each new chunk to a predecoder, which spots `"base64": "` and decodes the
 * string's complete quartets as they come.
 *
 * It is only a cache. The tensor parser (tensor_parse.c) still reads the whole body strictly and takes a
 * decoded string only when it is exactly the text it would decode itself: the same start and end,
 * no escapes. Anything unusual - escapes, bytes outside the alphabet, misplaced padding, a match
 * inside some other string, too many strings, no memory - leaves the string to the parser, which
 * decodes it and reports any error as it always does. So the replies, errors included, are the
 * same with or without it.
 *
 * One predecoder per request, used by one thread at a time (the body's, then the handler's).
 */
#ifndef ATTND_PREDECODE_H
#define ATTND_PREDECODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Bodies smaller than this are decoded after they arrive: their strings take microseconds. (The
 * fuzz build lowers it, so that fuzz_http reaches the predecoder with small inputs.) */
#ifndef SRV_PREDECODE_MIN_BODY
#define SRV_PREDECODE_MIN_BODY ((size_t)1 << 20)
#endif
/* Strings decoded per body at most (query, key, value, two masks). */
#define SRV_PREDECODE_MAX 5

typedef struct srv_predecoded {
    size_t start, end; /* the string's text: body[start, end), between its quotes      */
    uint8_t *data;     /* its decoded bytes (srv_bigbuf_array_alloc); NULL once taken   */
    size_t len;        /* bytes in data                                                */
    bool nonfinite;    /* read as float32 (a word at every 4 bytes), one is inf or NaN */
} srv_predecoded;

typedef struct srv_predecoder {
    size_t body_len;   /* Content-Length: bounds the bytes a string can decode to        */
    size_t seen;       /* body bytes looked at so far                                     */
    bool off;          /* gave up for this body (SRV_PREDECODE_MAX strings, no memory)    */
    bool active;       /* inside a string (cur) now                                       */
    bool failed;       /* cur will not decode: only its end is looked for                 */
    bool padded;       /* cur's last quartet so far had '=': nothing but its end may follow */
    size_t pos;        /* the first body byte of cur not decoded yet                      */
    size_t cap;        /* bytes cur.data has room for                                     */
    size_t checked;    /* bytes of cur.data whose float32 words were checked              */
    srv_predecoded cur;
    int n;
    srv_predecoded done[SRV_PREDECODE_MAX];
} srv_predecoder;

/* Ready for a body of body_len bytes. */
void srv_predecoder_init(srv_predecoder *p, size_t body_len);

/* The body so far is body[0, len), of which bytes from the last call's len on are new. Decodes
 * what it can of them; never fails (it gives up quietly, see above). */
void srv_predecoder_feed(srv_predecoder *p, const char *body, size_t len);

/* The decoded bytes of the string whose text is body[start, end) (between its quotes), handed
 * over (free with srv_bigbuf_array_free), or NULL when that string was not decoded whole.
 * *len gets their count, *nonfinite whether a float32 word among them is inf or NaN. */
uint8_t *srv_predecoder_take(srv_predecoder *p, size_t start, size_t end, size_t *len,
                             bool *nonfinite);

/* The closing quote of the string whose opening quote is at open_quote (a position in body) when
 * that string was decoded whole (taken or not), else NULL. Such a string holds base64 characters
 * only, so scanners may jump over it (srv_json_plain in json_scan.h). */
const char *srv_predecoder_close(const srv_predecoder *p, const char *body, const char *open_quote);

/* Frees what was decoded and not taken. Accepts NULL. */
void srv_predecoder_free(srv_predecoder *p);

#endif
