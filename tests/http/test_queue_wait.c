/*
 * test_queue_wait.c - --queue-wait-ms counts the time a pass waits for capacity, not the moment an
 * idle worker takes to wake up. A forward whose body is large enough to run on a worker (64 KiB and
 * more) is served on an idle daemon with --queue-wait-ms 0 ("no wait") and --max-inflight 1; it was
 * refused with 503 "busy: waited 0 ms for one of 1 workers" every time, since any wake-up is more
 * than 0 ms. In-process daemon on port 0.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/buf.h"
#include "check.h"
#include "http_client.h"

/* A forward body for the demo layer (E = 64) of L query rows: about 300 bytes a row. */
static char *big_forward(int L)
{
    srv_buf b;
    srv_buf_init(&b);
    srv_buf_printf(&b, "%s", "{\"query\": [");
    for (int i = 0; i < L; i++) {
        srv_buf_printf(&b, "%s", i ? ",[" : "[");
        for (int j = 0; j < 64; j++)
            srv_buf_printf(&b, "%s%.3f", j ? "," : "", ((i * 64 + j) % 17) / 17.0 - 0.5);
        srv_buf_printf(&b, "%s", "]");
    }
    srv_buf_printf(&b, "%s", "]}");
    char *s = srv_buf_steal(&b, NULL);
    if (!s)
        srv_buf_free(&b);
    return s;
}

int main(void)
{
    char *body = big_forward(256);
    if (!CHECK(body && strlen(body) >= 65536, "a body past the worker threshold (%zu bytes)",
               body ? strlen(body) : 0))
        return check_report();

    srv_options opt;
    hc_options(&opt);
    opt.demo = true;
    opt.max_inflight = 1; /* one worker, one slot */
    opt.queue_wait_ms = 0;
    srv_daemon *d = hc_start(&opt);
    if (CHECK(d != NULL, "daemon started")) {
        int ok = 0;
        hc_response r;
        for (int i = 0; i < 10; i++) { /* one at a time: a worker is always idle */
            hc_request(d, "POST", "/v1/layers/demo/forward", NULL, body, -1, NULL, &r);
            if (r.status == 200)
                ok++;
            else
                CHECK(false, "forward %d on an idle daemon: %ld %s", i, r.status, r.body);
            hc_response_free(&r);
        }
        CHECK(ok == 10, "every large forward served with --queue-wait-ms 0 (%d of 10)", ok);

        /* the trace runs on a worker too */
        hc_request(d, "POST", "/v1/layers/demo/trace", NULL, body, -1, NULL, &r);
        CHECK(r.status == 200, "a large trace on an idle daemon: %ld", r.status);
        hc_response_free(&r);
        hc_stop(d);
    }
    free(body);
    return check_report();
}
