/*
 * bench_util.h — timing helpers shared by the benchmarks (tests/bench_*.c):
 * a clock in seconds or milliseconds and the statistics the benchmarks
 * report over their repeats.
 *
 *     double t[REPS];
 *     for (int r = 0; r < REPS; r++) {
 *         double t0 = bench_now_ms();
 *         run();
 *         t[r] = bench_now_ms() - t0;
 *     }
 *     printf("%.3f ms\n", bench_median(t, REPS));   // sorts t
 *
 * bench_now_s and bench_now_ms read CLOCK_MONOTONIC; bench_clock_s reads a
 * given clock (CLOCK_THREAD_CPUTIME_ID: the calling thread's CPU time).
 * The two medians sort their array in place; bench_min leaves it as is.
 */
#ifndef GF_BENCH_UTIL_H
#define GF_BENCH_UTIL_H

#include <stdlib.h>
#include <time.h>

/* The time of clock `clk`, in seconds. */
static inline double bench_clock_s(clockid_t clk)
{
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Monotonic time in seconds. */
static inline double bench_now_s(void)
{
    return bench_clock_s(CLOCK_MONOTONIC);
}

/* Monotonic time in milliseconds. */
static inline double bench_now_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e3 + (double)ts.tv_nsec * 1e-6;
}

/* qsort comparator: doubles in ascending order. */
static inline int bench_cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The median of v[0..n-1], n >= 1: the middle value, or for even n the
 * mean of the two middle values.  Sorts v in place. */
static inline double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), bench_cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* The upper median of v[0..n-1], n >= 1: v[n / 2] once sorted (for even
 * n the larger of the two middle values).  Sorts v in place. */
static inline double bench_median_upper(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), bench_cmp_double);
    return v[n / 2];
}

/* The smallest of v[0..n-1], n >= 1 (the fastest run).  Leaves v as is. */
static inline double bench_min(double *v, int n)
{
    double m = v[0];
    for (int i = 1; i < n; i++)
        if (v[i] < m)
            m = v[i];
    return m;
}

#endif /* GF_BENCH_UTIL_H */
