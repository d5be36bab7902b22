/*
 * body_budget.c - the bytes of request bodies held at once (see body_budget.h).
 */
#include "body_budget.h"

#include "base/sysinfo.h"

int64_t srv_body_budget_default(int64_t max_body_bytes)
{
    int64_t mem = srv_memory_limit_bytes();
    int64_t budget = mem > 0 ? mem / 2 : INT64_C(1) << 30;
    return budget < max_body_bytes ? max_body_bytes : budget;
}

bool srv_body_budget_take(srv_body_budget *b, int64_t bytes)
{
    int64_t held = __atomic_load_n(&b->held, __ATOMIC_RELAXED);
    do {
        if (bytes > b->limit - held)
            return false;
    } while (!__atomic_compare_exchange_n(&b->held, &held, held + bytes, true, __ATOMIC_RELAXED,
                                          __ATOMIC_RELAXED));
    return true;
}

void srv_body_budget_give(srv_body_budget *b, int64_t bytes)
{
    __atomic_sub_fetch(&b->held, bytes, __ATOMIC_RELAXED);
}

int64_t srv_body_budget_held(const srv_body_budget *b)
{
    return __atomic_load_n(&b->held, __ATOMIC_RELAXED);
}
