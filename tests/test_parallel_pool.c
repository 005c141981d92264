/* gf_parallel_for (kernels/registry.c), beside tests/test_parallel.c: every index covered once,
 * chunk boundaries that depend on (n, grain, threads) alone, nested loops
 * and loops started from several threads at once, n below the thread
 * count, grain 0, a loop run while the workers sleep, and the pool put
 * aside when workers hold chunks for long. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pthread.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "gf_kernels.h"

struct cover {
    _Atomic unsigned char *hits;
    size_t n;
    _Atomic int calls, bad;
};

static void cover_fn(void *vc, size_t b, size_t e)
{
    struct cover *c = vc;
    if (b >= e || e > c->n)
        atomic_store(&c->bad, 1);
    for (size_t i = b; i < e && i < c->n; i++)
        atomic_fetch_add(&c->hits[i], 1);
    atomic_fetch_add(&c->calls, 1);
}

/* Runs one loop and checks every index was visited once; returns the
 * number of chunks. */
static int check_cover(int threads, size_t n, size_t grain)
{
    struct cover c = {.hits = calloc(n ? n : 1, 1), .n = n};
    assert_non_null(c.hits);
    gf_parallel_for(threads, n, grain, cover_fn, &c);
    for (size_t i = 0; i < n; i++)
        if (c.hits[i] != 1) {
            fail_msg("threads %d n %zu grain %zu: index %zu visited %d times", threads, n,
                     grain, i, (int)c.hits[i]);
        }
    assert_int_equal(c.bad, 0);
    int calls = c.calls;
    free((void *)c.hits);
    return calls;
}

static void test_cover(void **state)
{
    (void)state;
    static const size_t ns[] = {0, 1, 2, 3, 7, 64, 1000, 4097, 100003};
    static const size_t grains[] = {0, 1, 3, 100, 16384};
    static const int threads[] = {1, 2, 3, 4, 8, 64, 100};
    for (size_t a = 0; a < sizeof ns / sizeof ns[0]; a++)
        for (size_t g = 0; g < sizeof grains / sizeof grains[0]; g++)
            for (size_t t = 0; t < sizeof threads / sizeof threads[0]; t++) {
                int calls = check_cover(threads[t], ns[a], grains[g]);
                if (ns[a] == 0)
                    assert_int_equal(calls, 0);
                else
                    assert_true(calls >= 1);
            }
}

/* n below the thread count, and a loop of one grain: one call on the caller */
static void test_small(void **state)
{
    (void)state;
    assert_int_equal(check_cover(8, 3, 1) >= 1, 1);
    assert_int_equal(check_cover(8, 1000, 1000), 1);
    assert_int_equal(check_cover(8, 1999, 1000), 1);
    assert_int_equal(check_cover(1, 1 << 20, 1), 1);
}

/* The boundaries of the chunks, recorded by begin index. */
struct bounds {
    _Atomic size_t *end_at; /* end_at[begin] = end + 1 */
    size_t n;
};

static void bounds_fn(void *vb, size_t b, size_t e)
{
    struct bounds *s = vb;
    atomic_store(&s->end_at[b], e + 1);
}

static void record(int threads, size_t n, size_t grain, size_t *out)
{
    struct bounds s = {.end_at = calloc(n, sizeof(size_t)), .n = n};
    assert_non_null(s.end_at);
    gf_parallel_for(threads, n, grain, bounds_fn, &s);
    for (size_t i = 0; i < n; i++)
        out[i] = s.end_at[i];
    free((void *)s.end_at);
}

/* Same (n, grain, threads), same chunks, whoever runs them and whenever:
 * the workers hot, asleep, or the pool busy with another loop. */
static void test_same_chunks(void **state)
{
    (void)state;
    const size_t n = 5003;
    size_t *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    assert_non_null(a);
    assert_non_null(b);
    for (int t = 2; t <= 8; t *= 2) {
        record(t, n, 7, a);
        for (int r = 0; r < 20; r++) {
            if (r % 5 == 0)
                usleep(20000); /* the workers are asleep by now */
            record(t, n, 7, b);
            assert_memory_equal(a, b, n * sizeof *a);
        }
    }
    free(a);
    free(b);
}

/* Nested loops: the inner ones run on their caller, every index once. */
struct nest {
    struct cover *inner;
    size_t m;
};

static void inner_fn(void *vn, size_t b, size_t e)
{
    struct nest *s = vn;
    for (size_t i = b; i < e; i++) {
        struct cover c = {.hits = s->inner->hits + i * s->m, .n = s->m};
        gf_parallel_for(4, s->m, 1, cover_fn, &c);
        if (c.bad)
            atomic_store(&s->inner->bad, 1);
    }
}

static void test_nested(void **state)
{
    (void)state;
    const size_t outer = 37, m = 101;
    struct cover all = {.hits = calloc(outer * m, 1), .n = outer * m};
    struct nest s = {&all, m};
    gf_parallel_for(4, outer, 1, inner_fn, &s);
    for (size_t i = 0; i < outer * m; i++)
        assert_int_equal(all.hits[i], 1);
    assert_int_equal(all.bad, 0);
    free((void *)all.hits);
}

/* Several threads start loops at once: one gets the pool, the others run
 * on themselves; every loop covers its indices once. */
static void *caller(void *arg)
{
    intptr_t id = (intptr_t)arg;
    for (int r = 0; r < 200; r++) {
        size_t n = (size_t)(1 + (id * 7919 + r * 104729) % 5000);
        struct cover c = {.hits = calloc(n, 1), .n = n};
        if (!c.hits)
            return (void *)1;
        gf_parallel_for(1 + (int)((id + r) % 4), n, (size_t)(r % 5), cover_fn, &c);
        for (size_t i = 0; i < n; i++)
            if (c.hits[i] != 1)
                c.bad = 1;
        int bad = c.bad;
        free((void *)c.hits);
        if (bad)
            return (void *)1;
    }
    return NULL;
}

static void test_concurrent(void **state)
{
    (void)state;
    pthread_t th[6];
    for (intptr_t i = 0; i < 6; i++)
        assert_int_equal(pthread_create(&th[i], NULL, caller, (void *)i), 0);
    for (int i = 0; i < 6; i++) {
        void *ret = NULL;
        assert_int_equal(pthread_join(th[i], &ret), 0);
        assert_null(ret);
    }
}

/* A chunk that takes a while on one thread does not stop the others:
 * many back-to-back loops of uneven chunks still cover everything. */
static void slow_fn(void *vc, size_t b, size_t e)
{
    if (b == 0) {
        struct timespec ts = {0, 200000};
        nanosleep(&ts, NULL);
    }
    cover_fn(vc, b, e);
}

static void test_uneven(void **state)
{
    (void)state;
    for (int r = 0; r < 50; r++) {
        size_t n = 64 + (size_t)r;
        struct cover c = {.hits = calloc(n, 1), .n = n};
        gf_parallel_for(4, n, 1, slow_fn, &c);
        for (size_t i = 0; i < n; i++)
            assert_int_equal(c.hits[i], 1);
        free((void *)c.hits);
    }
}

/* Workers that keep a chunk for long (as on a busy machine, where a
 * worker loses its core mid-chunk): the caller puts the pool aside and
 * tells kernels so (gf_parallel_width); every loop still covers its
 * indices once, in the same chunks. */
int gf_parallel_width(int n_threads); /* kernels/registry.c */

static _Thread_local int on_caller;

/* A worker's chunk sleeps 2 ms; the caller's works 20 us (a busy wait: its
 * core stays its own), long enough for a worker woken by the loop to take
 * a chunk before the caller has taken them all (else, on a quiet machine,
 * the caller could run every chunk before a sleeping worker woke, and the
 * pool would never look slow). */
static void stall_fn(void *vc, size_t b, size_t e)
{
    struct timespec t0, t;
    if (!on_caller) {
        struct timespec ts = {0, 2000000};
        nanosleep(&ts, NULL);
    } else {
        clock_gettime(CLOCK_MONOTONIC, &t0);
        do
            clock_gettime(CLOCK_MONOTONIC, &t);
        while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < 20000);
    }
    cover_fn(vc, b, e);
}

static void test_aside(void **state)
{
    (void)state;
    const char *adapt = getenv("GF_POOL_ADAPT");
    if (adapt && strcmp(adapt, "0") == 0)
        skip(); /* the pool is never put aside */
    on_caller = 1;
    const size_t n = 4096;
    size_t *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
    assert_non_null(a);
    assert_non_null(b);
    record(2, n, 1, a);
    int narrowed = 0;
    for (int r = 0; r < 200 && !narrowed; r++) {
        struct cover c = {.hits = calloc(n, 1), .n = n};
        assert_non_null(c.hits);
        gf_parallel_for(2, n, 1, stall_fn, &c);
        for (size_t i = 0; i < n; i++)
            assert_int_equal(c.hits[i], 1);
        free((void *)c.hits);
        narrowed = gf_parallel_width(2) == 1;
    }
    assert_true(narrowed);
    assert_int_equal(gf_parallel_width(1), 1);
    record(2, n, 1, b); /* while aside: the same chunks */
    assert_memory_equal(a, b, n * sizeof *a);
    free(a);
    free(b);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cover),     cmocka_unit_test(test_small),
        cmocka_unit_test(test_same_chunks), cmocka_unit_test(test_nested),
        cmocka_unit_test(test_concurrent), cmocka_unit_test(test_uneven),
        cmocka_unit_test(test_aside),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
