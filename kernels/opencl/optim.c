/* OpenCL kernels of the optimizer ops (graph/ops.def, "optimizer ops";
 * definitions: kernels/cpu/optim.c; device code: optim.cl):
 *
 *   GradAccumulate   elementwise, or transposed through 32 x 32 tiles
 *   GradNorm         two passes: partial sums per group, then one group
 *   SGDStep AdamWStep elementwise; hyper (and N) read on the host (their
 *                    `host` copies), the scalars of kernels/optim_ops.h
 *                    passed as arguments
 *
 * fp32 only.  Each element is computed as the CPU computes it (optim.cl);
 * GradNorm sums in double (float with compensation on a device without
 * cl_khr_fp64, or with GRAPHFUSE_CL_FP64=0), in a fixed order.  Its
 * workspace holds the partial sums: one per group of the first pass.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "device_common.h"
#include "ocl.h"
#include "optim_ops.h"

#define FILE_CL "optim.cl"
#define WG 256

/* Whether sums of squares are in double: the device has cl_khr_fp64 and
 * GRAPHFUSE_CL_FP64 is not 0. */
static bool use_fp64(const struct gf_kernel_args *a)
{
    const char *env = getenv("GRAPHFUSE_CL_FP64");
    if (env && strcmp(env, "0") == 0)
        return false;
    char ext[4096] = "";
    clGetDeviceInfo(gf_cl_of(a->backend)->device, CL_DEVICE_EXTENSIONS, sizeof(ext) - 1, ext,
                    NULL);
    return strstr(ext, "cl_khr_fp64") != NULL;
}

static cl_kernel kernel(const struct gf_kernel_args *a, const char *name, bool fp64)
{
    char opts[64];
    snprintf(opts, sizeof(opts), "-DWG=%d -DGF_FP64=%d", WG, fp64 ? 1 : 0);
    cl_kernel k = gf_cl_kernel(a->backend, FILE_CL, name, opts);
    if (!k)
        gf_cl_fail(a, name);
    return k;
}

/* ---- GradAccumulate ------------------------------------------------------------------- */

static enum gf_status acc_launch(const struct gf_kernel_args *a, const struct gf_optim_args *o)
{
    const struct gf_tview *g = &a->in[0], *acc = o->opt ? &a->in[1] : NULL;
    struct gf_tview *y = &a->out[0];
    bool tr = o->r.transpose;
    float scale = o->r.scale;
    cl_int has = acc != NULL;
    cl_mem am = acc ? acc->data : g->data;
    cl_kernel k = kernel(a, tr ? "grad_acc_t" : "grad_acc", false);
    if (!k)
        return GF_ERR_INTERNAL;
    if (!tr) {
        cl_ulong n = y->nelem;
        size_t global = gf_cl_grid(a, y->nelem, WG), local = WG;
        if (!gf_cl_args(k, 6, sizeof(cl_mem), &y->data, sizeof(cl_mem), &am, sizeof(cl_mem),
                        &g->data, sizeof(float), &scale, sizeof(cl_int), &has, sizeof(n), &n))
            return gf_cl_fail(a, "grad_acc");
        return gf_cl_run(a, k, 1, &global, &local);
    }
    cl_int r = (cl_int)y->dims[0], c = (cl_int)y->dims[1];
    size_t global[2] = {((size_t)c + 31) / 32 * 32, ((size_t)r + 31) / 32 * 8};
    size_t local[2] = {32, 8};
    if (!gf_cl_args(k, 7, sizeof(cl_mem), &y->data, sizeof(cl_mem), &am, sizeof(cl_mem),
                    &g->data, sizeof(float), &scale, sizeof(cl_int), &has, sizeof(r), &r,
                    sizeof(c), &c))
        return gf_cl_fail(a, "grad_acc_t");
    return gf_cl_run(a, k, 2, global, local);
}

/* ---- GradNorm ------------------------------------------------------------------------- */

/* Groups of the first pass (the same for every run on a device and size). */
static size_t norm_groups(const struct gf_kernel_args *a)
{
    return gf_cl_grid(a, a->in[0].nelem, WG) / WG;
}

static size_t norm_workspace(const struct gf_kernel_args *a)
{
    return norm_groups(a) * sizeof(double);
}

static enum gf_status norm_launch(const struct gf_kernel_args *a)
{
    enum gf_status st = GF_OK;
    const struct gf_tview *x = &a->in[0];
    struct gf_tview *o = &a->out[0];
    bool fp64 = use_fp64(a);
    cl_kernel k1 = kernel(a, "sumsq_part", fp64), k2 = k1 ? kernel(a, "sumsq_final", fp64) : NULL;
    if (!k2)
        return GF_ERR_INTERNAL;
    cl_ulong n = x->nelem;
    cl_uint np = (cl_uint)norm_groups(a);
    size_t global = (size_t)np * WG, local = WG;
    cl_mem xm = x->data, ws = a->workspace;
    if (!xm) { /* empty: the sum of nothing */
        np = 0;
        xm = ws;
    }
    if (np && !gf_cl_args(k1, 3, sizeof(cl_mem), &xm, sizeof(n), &n, sizeof(cl_mem), &ws))
        return gf_cl_fail(a, "sumsq_part");
    if (np)
        st = gf_cl_run(a, k1, 1, &global, &local);
    if (st != GF_OK)
        return st;
    if (!gf_cl_args(k2, 3, sizeof(cl_mem), &ws, sizeof(np), &np, sizeof(cl_mem), &o->data))
        return gf_cl_fail(a, "sumsq_final");
    global = WG;
    return gf_cl_run(a, k2, 1, &global, &local);
}

/* ---- the updates ---------------------------------------------------------------------- */

static enum gf_status sgd_launch(const struct gf_kernel_args *a, const struct gf_optim_args *o,
                                 const struct gf_sgd_scalars *s)
{
    size_t n = a->in[0].nelem;
    if (!s) /* supports() asks for hyper on the host */
        return gf_kernel_error(a, GF_ERR_INTERNAL, "hyper is not on the host");
    cl_kernel k = kernel(a, "sgd_step", false);
    if (!k)
        return GF_ERR_INTERNAL;
    cl_mem b = o->opt ? a->out[1].data : a->out[0].data;
    cl_mem b0 = o->opt ? a->in[3].data : a->in[0].data;
    cl_ulong cn = n;
    cl_int decay_on = s->decay_on, mom_on = s->momentum_on && o->opt, nest = s->nesterov,
           first = s->first;
    if (!gf_cl_args(k, 15, sizeof(cl_mem), &a->out[0].data, sizeof(cl_mem), &b, sizeof(cl_mem),
                    &a->in[0].data, sizeof(cl_mem), &b0, sizeof(cl_mem), &a->in[1].data,
                    sizeof(cn), &cn, sizeof(cl_int), &decay_on, sizeof(cl_int), &mom_on,
                    sizeof(cl_int), &nest, sizeof(cl_int), &first, sizeof(float), &s->wd,
                    sizeof(float), &s->mom, sizeof(float), &s->damp, sizeof(float), &s->neg_lr,
                    sizeof(float), &s->grad_scale))
        return gf_cl_fail(a, "sgd_step");
    size_t global = gf_cl_grid(a, n, WG), local = WG;
    return gf_cl_run(a, k, 1, &global, &local);
}

static enum gf_status adamw_launch(const struct gf_kernel_args *a, const struct gf_optim_args *o,
                                   const struct gf_adamw_scalars *s)
{
    (void)o; /* supports(): hyper and N on the host, s holds them */
    size_t n = a->in[0].nelem;
    if (!s)
        return gf_kernel_error(a, GF_ERR_INTERNAL, "hyper is not on the host");
    cl_kernel k = kernel(a, "adamw_step", false);
    if (!k)
        return GF_ERR_INTERNAL;
    cl_ulong cn = n;
    cl_int decay_on = s->decay_on, small = s->small;
    if (!gf_cl_args(k, 18, sizeof(cl_mem), &a->out[0].data, sizeof(cl_mem), &a->out[1].data,
                    sizeof(cl_mem), &a->out[2].data, sizeof(cl_mem), &a->in[0].data,
                    sizeof(cl_mem), &a->in[2].data, sizeof(cl_mem), &a->in[3].data,
                    sizeof(cl_mem), &a->in[1].data, sizeof(cn), &cn, sizeof(cl_int), &decay_on,
                    sizeof(cl_int), &small, sizeof(float), &s->decay, sizeof(float), &s->w,
                    sizeof(float), &s->b2, sizeof(float), &s->one_b2, sizeof(float), &s->step_size,
                    sizeof(float), &s->bc2_sqrt, sizeof(float), &s->eps, sizeof(float),
                    &s->grad_scale))
        return gf_cl_fail(a, "adamw_step");
    size_t global = gf_cl_grid(a, n, WG), local = WG;
    return gf_cl_run(a, k, 1, &global, &local);
}

/* ==== the table ====================================================================== */

static const struct gf_dev_optim cl_optim = {
    .acc = acc_launch, .norm = norm_launch, .sgd = sgd_launch, .adamw = adamw_launch};

static enum gf_status optim_run(const struct gf_kernel_args *a)
{
    return gf_dev_optim_run(&cl_optim, a);
}

/* The rules (kernels/checks.c): fp32, the hyper on the host. */
static bool optim_supports(const struct gf_node *n, const struct gf_tview *in, size_t n_in)
{
    return gf_optim_supports(n, in, n_in, true);
}

#define KERNEL(OP, WS)                                                                      \
    {.op = GF_OP_##OP, .backend = "opencl", .dtype = GF_UNDEFINED, .impl = "optim",         \
     .supports = optim_supports, .workspace = WS, .run = optim_run}

static const struct gf_kernel kernels[] = {
    KERNEL(GRAD_ACCUMULATE, NULL), KERNEL(GRAD_NORM, norm_workspace), KERNEL(SGD_STEP, NULL),
    KERNEL(ADAMW_STEP, NULL)};

const struct gf_kernel_table gf_opencl_optim_table = {kernels,
                                                      sizeof(kernels) / sizeof(kernels[0])};
