/*
 * test_app_errors.c - a daemon that cannot start says why: each failure at start reports its own
 * cause, never one recorded before it (first error wins) nor an empty engine error ("ok").
 *
 * Test seam: the Makefile links this program with ld's --wrap for srv_registry_create and
 * mha_pool_create, so the calls srv_app_create makes reach the __wrap_ functions below, which fail
 * when told to and otherwise call the real ones.
 */
#include "check.h"
#include "http_client.h"
#include "store/config.h"

#include <string.h>

#include "app/app.h"

static bool fail_registry, fail_pool;

srv_registry *__real_srv_registry_create(void);
srv_registry *__wrap_srv_registry_create(void);
mha_pool *__real_mha_pool_create(int threads, mha_error *err);
mha_pool *__wrap_mha_pool_create(int threads, mha_error *err);

srv_registry *__wrap_srv_registry_create(void)
{
    return fail_registry ? NULL : __real_srv_registry_create();
}

mha_pool *__wrap_mha_pool_create(int threads, mha_error *err)
{
    /* 0 threads: the engine refuses with its own message, as for a pool that cannot start */
    return __real_mha_pool_create(fail_pool ? 0 : threads, err);
}

static void test_registry_fails(void)
{
    srv_options opt;
    hc_options(&opt);
    fail_registry = true;
    srv_error err = {0};
    srv_daemon *d = srv_daemon_start(&opt, &err);
    fail_registry = false;
    CHECK(d == NULL, "a daemon without a registry does not start");
    srv_daemon_stop(d);
    CHECK(err.code == SRV_E_NOMEM, "the error is out_of_memory (%s)", srv_error_name(err.code));
    CHECK(strstr(err.message, "registry") != NULL, "the message names the registry: '%s'",
          err.message);
    CHECK(strcmp(err.message, "ok") != 0, "and is not 'ok'");
}

static void test_pool_fails(void)
{
    srv_options opt;
    hc_options(&opt);
    fail_pool = true;
    srv_error err = {0};
    srv_app *app = srv_app_create(&opt, NULL, &err);
    fail_pool = false;
    CHECK(app == NULL, "an app without an engine pool is not created");
    srv_app_free(app);
    CHECK(strstr(err.message, "1 to 1024 threads") != NULL,
          "the engine's own reason is reported: '%s'", err.message);
}

static void test_still_starts(void)
{
    srv_daemon *d = hc_start(NULL);
    CHECK(d != NULL, "with nothing failing the daemon starts (the seams call the real functions)");
    hc_stop(d);
}

/* srv_config_from_json's 422 for a config the engine refuses: with err NULL (no crash), and after
 * an error the caller already holds (kept: first error wins, its code too). */
static void test_config_error(void)
{
    json_t *bad = json_pack("{s:i, s:i}", "embed_dim", 6, "num_heads", 4);
    mha_config cfg;
    mha_limits lim;
    mha_limits_default(&lim);
    srv_error err = {0};
    CHECK(srv_config_from_json(&cfg, bad, &lim, "config", &err) < 0 &&
              err.code == SRV_E_INVALID_CONFIG && strstr(err.field, "config."),
          "an indivisible config is a 422 naming the field: %s %s", err.field, err.message);
    CHECK(srv_config_from_json(&cfg, bad, &lim, "config", NULL) < 0, "err NULL: -1, no crash");
    srv_error held = {0};
    srv_error_set(&held, SRV_E_SHAPE, "query", "the first error");
    srv_config_from_json(&cfg, bad, &lim, "config", &held);
    CHECK(held.code == SRV_E_SHAPE && strcmp(held.message, "the first error") == 0,
          "an error already held is kept whole (code %s, '%s')", srv_error_name(held.code),
          held.message);
    json_decref(bad);
}

int main(void)
{
    test_registry_fails();
    test_pool_fails();
    test_still_starts();
    test_config_error();
    return check_report();
}
