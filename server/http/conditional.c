/*
 * conditional.c - If-None-Match against an entity tag (see conditional.h).
 */
#include "conditional.h"

#include <string.h>

bool srv_none_match_hits(const char *header, const char *tag)
{
    if (!header)
        return false;
    size_t tlen = strlen(tag);
    for (const char *p = header; *p;) {
        while (*p == ' ' || *p == '\t' || *p == ',')
            p++;
        if (*p == '*')
            return true;
        if (p[0] == 'W' && p[1] == '/')
            p += 2;
        size_t n = strcspn(p, ",");
        while (n > 0 && (p[n - 1] == ' ' || p[n - 1] == '\t'))
            n--;
        if (n == tlen && memcmp(p, tag, n) == 0)
            return true;
        p += strcspn(p, ",");
    }
    return false;
}
