/*
 * gf_parallel_for: every index visited exactly once, for many thread
 * counts and sizes, repeatedly (the pool is reused), from two threads at
 * once (one of them then runs on its caller), and nested.
 */
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include <cmocka.h>

#include "gf_kernels.h"

struct hits {
    unsigned char *seen;
    int nested_threads; /* > 0: each chunk starts a nested loop */
};

static void mark(void *ctx, size_t b, size_t e)
{
    struct hits *h = ctx;
    for (size_t i = b; i < e; i++)
        __atomic_add_fetch(&h->seen[i], 1, __ATOMIC_RELAXED);
}

static void mark_nested(void *ctx, size_t b, size_t e)
{
    struct hits *h = ctx;
    struct hits inner = {h->seen + b, 0};
    gf_parallel_for(h->nested_threads, e - b, 1, mark, &inner);
}

static void check_once(int threads, size_t n, size_t grain, bool nested)
{
    struct hits h = {calloc(n + 1, 1), nested ? 2 : 0};
    assert_non_null(h.seen);
    gf_parallel_for(threads, n, grain, nested ? mark_nested : mark, &h);
    for (size_t i = 0; i < n; i++)
        if (h.seen[i] != 1)
            fail_msg("threads %d n %zu: index %zu visited %d times", threads, n, i, h.seen[i]);
    free(h.seen);
}

static void every_index_once(void **state)
{
    (void)state;
    const size_t sizes[] = {0, 1, 2, 3, 7, 64, 1000, 4097};
    for (int rep = 0; rep < 50; rep++)
        for (int t = 1; t <= 9; t++)
            for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++)
                check_once(t, sizes[s], 1 + (size_t)rep % 3, false);
}

static void *hammer(void *arg)
{
    (void)arg;
    for (int rep = 0; rep < 300; rep++)
        check_once(1 + rep % 4, 513, 1, false);
    return NULL;
}

static void two_callers(void **state)
{
    (void)state;
    pthread_t a, b;
    assert_int_equal(pthread_create(&a, NULL, hammer, NULL), 0);
    assert_int_equal(pthread_create(&b, NULL, hammer, NULL), 0);
    pthread_join(a, NULL);
    pthread_join(b, NULL);
}

static void nested(void **state)
{
    (void)state;
    for (int rep = 0; rep < 20; rep++)
        check_once(3, 1000, 10, true);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(every_index_once),
        cmocka_unit_test(two_callers),
        cmocka_unit_test(nested),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
