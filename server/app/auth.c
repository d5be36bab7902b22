/*
 * auth.c - API key and read-only mode (see auth.h).
 */
#include "auth.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

bool srv_auth_equal(const char *given, size_t given_len, const char *key, size_t key_len)
{
    /* walk the whole key whatever the guess; bytes past the guess compare against 0 */
    volatile unsigned char diff = (unsigned char)(given_len != key_len);
    for (size_t i = 0; i < key_len; i++) {
        unsigned char g = i < given_len ? (unsigned char)given[i] : 0;
        diff |= (unsigned char)(g ^ (unsigned char)key[i]);
    }
    return diff == 0;
}

/* Refuses a key no client could ever send so that it matches: the Authorization value a client
 * sends is read without its surrounding blanks (srv_auth_check, as RFC 9110 5.5 says), and a
 * header cannot carry control characters (400 before routing). `from` names the key's source. */
static int check_key(const char *key, size_t n, const char *from, srv_error *err)
{
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)key[i];
        if (c < 0x20 || c == 0x7f)
            return srv_error_set(err, SRV_E_BAD_REQUEST, "api_key",
                                 "the API key from %s holds a control character (byte 0x%02x at "
                                 "position %zu), which no client can send in an Authorization "
                                 "header: remove it",
                                 from, c, i);
    }
    if (n > 0 && (key[0] == ' ' || key[n - 1] == ' '))
        return srv_error_set(err, SRV_E_BAD_REQUEST, "api_key",
                             "the API key from %s %s with a space; a client's Authorization value "
                             "is read without its surrounding blanks, so no request could ever "
                             "match it: remove the space",
                             from, key[0] == ' ' ? "starts" : "ends");
    return 0;
}

int srv_auth_init(srv_auth *a, const char *key_file, const char *key, bool guard_reads,
                  bool read_only, srv_error *err)
{
    memset(a, 0, sizeof *a);
    a->guard_reads = guard_reads;
    a->read_only = read_only;
    char line[SRV_API_KEY_MAX + 2] = "";
    const char *src = key ? key : "";
    char from[1100] = "ATTND_API_KEY (or --api-key)";
    if (key_file && key_file[0]) {
        FILE *f = fopen(key_file, "r");
        if (!f)
            return srv_error_set(err, SRV_E_BAD_REQUEST, "api_key_file",
                                 "cannot read the API key file %s: %s", key_file, strerror(errno));
        size_t got = fread(line, 1, sizeof line - 1, f);
        fclose(f);
        src = line;
        snprintf(from, sizeof from, "the file %s", key_file);
        /* the first line without its end of line ("\n" or "\r\n"); nothing else is trimmed */
        const char *nl = memchr(line, '\n', got);
        size_t n = nl ? (size_t)(nl - line) : got;
        if (nl && n > 0 && line[n - 1] == '\r')
            n--;
        line[n] = '\0';
        if (memchr(line, '\0', n))
            return srv_error_set(err, SRV_E_BAD_REQUEST, "api_key_file",
                                 "the API key file %s holds a NUL byte in its first line", key_file);
        if (n == 0)
            return srv_error_set(err, SRV_E_BAD_REQUEST, "api_key_file",
                                 "the API key file %s holds no key on its first line", key_file);
    }
    size_t n = strlen(src);
    if (n >= SRV_API_KEY_MAX)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "api_key",
                             "the API key is %zu bytes long, at most %d are accepted", n,
                             SRV_API_KEY_MAX - 1);
    if (check_key(src, n, from, err) < 0)
        return -1;
    memcpy(a->key, src, n + 1);
    a->key_len = n;
    if (guard_reads && n == 0)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "auth_reads",
                             "--auth-reads needs an API key (--api-key-file or ATTND_API_KEY)");
    return 0;
}

int srv_auth_check(const srv_auth *a, bool changes, bool probe, const char *authorization,
                   srv_error *err)
{
    if (changes && a->read_only)
        return srv_error_set(err, SRV_E_FORBIDDEN, "",
                             "this attnd runs with --read-only: layers cannot be changed");
    if (a->key_len == 0 || probe || (!changes && !a->guard_reads))
        return 0;
    if (!authorization || !authorization[0])
        return srv_error_set(err, SRV_E_UNAUTHORIZED, "",
                             "this request needs an API key: send Authorization: Bearer <key>");
    if (strncasecmp(authorization, "Bearer ", 7) != 0)
        return srv_error_set(err, SRV_E_UNAUTHORIZED, "",
                             "the Authorization header must be \"Bearer <key>\"");
    const char *given = authorization + 7;
    while (*given == ' ')
        given++;
    size_t len = strlen(given);
    while (len > 0 && (given[len - 1] == ' ' || given[len - 1] == '\t'))
        len--;
    if (!srv_auth_equal(given, len, a->key, a->key_len))
        return srv_error_set(err, SRV_E_UNAUTHORIZED, "", "the API key is not the right one");
    return 0;
}
