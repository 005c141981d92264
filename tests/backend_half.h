/*
 * backend_half.h — fp16 / bf16 helpers for the tests of a backend's
 * kernels (include after backend_util.h):
 *
 *     uint16_t *h = bth_from(GF_FLOAT16, f, n);   // n floats rounded to fp16
 *     bt_compare(node, in, 1, 0, &out, 1, bth_ulp(GF_FLOAT16), BTH_ATOL);
 *     bth_compare_wide(node, in, 2, 0, &out, 1, NULL, bth_ulp(GF_BFLOAT16), BTH_ATOL);
 *
 * bth_ulp(t) is one unit in the last place relative to the value (2^-10
 * for fp16, 2^-7 for bf16): kernels that compute in float and round once
 * to the storage type agree with the CPU's within it, and exactly where
 * both do the same correctly rounded float operation.
 *
 * bth_compare_wide checks ops whose CPU kernel takes fp32 only (the
 * backward ops): the CPU kernel runs on fp32 copies of the fp16 / bf16
 * inputs (exact), its fp32 results in the places of fp16 / bf16 outputs
 * are rounded once to the output's type, and the backend's kernel, given the
 * fp16 / bf16 tensors themselves (config: NULL for the defaults), must
 * match them.
 */
#ifndef GF_BACKEND_HALF_H
#define GF_BACKEND_HALF_H

#include "gf_half.h"

#define BTH_ATOL 1e-6 /* as the fp32 tests: float cancellation in the tails (Gelu) */

static inline bool bth_is(enum gf_dtype t)
{
    return t == GF_FLOAT16 || t == GF_BFLOAT16;
}

static inline double bth_ulp(enum gf_dtype t)
{
    return t == GF_FLOAT16 ? 1.0 / 1024 : 1.0 / 128;
}

/* n floats rounded to fp16 or bf16 (malloc'd; the caller frees). */
static inline uint16_t *bth_from(enum gf_dtype t, const float *f, size_t n)
{
    uint16_t *h = malloc(n * sizeof(uint16_t) + 8);
    for (size_t i = 0; i < n; i++)
        h[i] = t == GF_FLOAT16 ? gf_float_to_half(f[i]) : gf_float_to_bf16(f[i]);
    return h;
}

static inline float bth_to_float(enum gf_dtype t, uint16_t h)
{
    return t == GF_FLOAT16 ? gf_half_to_float(h) : gf_bf16_to_float(h);
}

/* The CPU kernel on fp32 copies of the fp16 / bf16 inputs, its results
 * rounded to the outputs' types, against the backend's kernel on the inputs
 * as they are; every output compared as bt_compare does. */
static inline void bth_compare_wide(const struct gf_node *n, const struct gf_tview *in,
                                      size_t n_in, unsigned host_mask,
                                      const struct gf_tview *out, size_t n_out,
                                      const int *config, double rtol, double atol)
{
    struct gf_tview win[BT_MAX], wout[BT_MAX];
    void *res[BT_MAX];
    assert_true(n_in <= BT_MAX && n_out <= BT_MAX);
    for (size_t i = 0; i < n_in; i++) {
        win[i] = in[i];
        if (!bth_is(in[i].dtype) || !in[i].data)
            continue;
        float *f = malloc(in[i].nelem * sizeof(float) + 8);
        for (size_t j = 0; j < in[i].nelem; j++)
            f[j] = bth_to_float(in[i].dtype, ((const uint16_t *)in[i].data)[j]);
        win[i].dtype = GF_FLOAT;
        win[i].data = f;
        win[i].host = f;
    }
    for (size_t i = 0; i < n_out; i++) {
        wout[i] = out[i];
        if (bth_is(out[i].dtype))
            wout[i].dtype = GF_FLOAT;
        wout[i].data = calloc(1, gf_tview_bytes(&wout[i]) + 8);
        wout[i].host = wout[i].data;
    }
    if (bt_run_on(gf_backend_get("cpu"), n, win, n_in, wout, n_out, NULL) != GF_OK)
        fail_msg("CPU kernel for %s (fp32) failed: %s", n->op_type, gf_last_error());
    enum gf_status st = bt_run_dev(n, in, n_in, host_mask, out, n_out, config, res);
    if (st != GF_OK && st != GF_ERR_UNSUPPORTED)
        fail_msg("%s kernel for %s failed: %s", bt_name(), n->op_type, gf_last_error());
    for (size_t i = 0; i < n_out; i++) {
        void *want = wout[i].data;
        if (st != GF_OK) { /* no kernel on the backend under test: counted, not compared */
            free(want);
            free(res[i]);
            continue;
        }
        if (bth_is(out[i].dtype)) /* rounded once, in place */
            for (size_t j = 0; j < out[i].nelem; j++) {
                float v = ((float *)want)[j];
                ((uint16_t *)want)[j] = out[i].dtype == GF_FLOAT16 ? gf_float_to_half(v)
                                                                   : gf_float_to_bf16(v);
            }
        bt_check(n, i, &out[i], want, res[i], rtol, atol);
        free(want);
        free(res[i]);
    }
    for (size_t i = 0; i < n_in; i++)
        if (win[i].data != in[i].data)
            free(win[i].data);
}

#endif /* GF_BACKEND_HALF_H */
