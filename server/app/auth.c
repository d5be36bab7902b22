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

int srv_auth_init(srv_auth *a, const char *key_file, const char *key, bool guard_reads,
                  bool read_only, srv_error *err)
{
    memset(a, 0, sizeof *a);
    a->guard_reads = guard_reads;
    a->read_only = read_only;
    char line[SRV_API_KEY_MAX + 2] = "";
    const char *src = key ? key : "";
    if (key_file && key_file[0]) {
        FILE *f = fopen(key_file, "r");
        if (!f)
            return srv_error_set(err, SRV_E_BAD_REQUEST, "api_key_file",
                                 "cannot read the API key file %s: %s", key_file, strerror(errno));
        if (!fgets(line, sizeof line, f))
            line[0] = '\0';
        fclose(f);
        src = line;
        /* the first line, without its end of line and trailing white space */
        size_t n = strcspn(line, "\r\n");
        while (n > 0 && (line[n - 1] == ' ' || line[n - 1] == '\t'))
            n--;
        line[n] = '\0';
        if (n == 0)
            return srv_error_set(err, SRV_E_BAD_REQUEST, "api_key_file",
                                 "the API key file %s holds no key on its first line", key_file);
    }
    size_t n = strlen(src);
    if (n >= SRV_API_KEY_MAX)
        return srv_error_set(err, SRV_E_BAD_REQUEST, "api_key",
                             "the API key is %zu bytes long, at most %d are accepted", n,
                             SRV_API_KEY_MAX - 1);
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
