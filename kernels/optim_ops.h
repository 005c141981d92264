/*
 * optim_ops.h — the optimizer ops' per-step scalars (graph/ops.def,
 * "optimizer ops"), shared by every backend's kernels so that each one
 * rounds them alike.  Internal to kernels/; the ops are defined at the top
 * of kernels/cpu/optim.c.
 *
 * `hyper` is a float64 tensor: the optimizer's options in double, as
 * torch.optim keeps them in Python, plus the step and the gradient scale
 * (the clipping coefficient, 1 without clipping).  The kernels read it on
 * the host (its `host` copy), or, a device kernel given it in device memory
 * only, on the device when the kernel runs (so that a replayed CUDA graph
 * sees the values written before the launch).  The scalars below are
 * computed from it in double and rounded to float where torch hands them
 * to its kernels.
 *
 * The optional input N (GradNorm's output) and attribute max_norm move the
 * clipping into the update: the gradient scale is hyper's times torch's
 * clipping coefficient (gf_clip_scale).  When the scale or N is not finite
 * nothing is updated: the outputs keep the inputs' values.
 */
#ifndef GF_OPTIM_OPS_H
#define GF_OPTIM_OPS_H

#include <math.h>
#include <stdbool.h>

/* AdamWStep's hyper: [lr, beta1, beta2, eps, weight_decay, step, grad_scale];
 * step counts the updates before this one (torch's t is step + 1). */
enum { GF_ADAMW_LR, GF_ADAMW_BETA1, GF_ADAMW_BETA2, GF_ADAMW_EPS, GF_ADAMW_WD,
       GF_ADAMW_STEP, GF_ADAMW_GRAD_SCALE, GF_ADAMW_HYPER };
/* SGDStep's hyper: [lr, momentum, dampening, weight_decay, nesterov (0/1),
 * step, grad_scale]; the momentum buffer starts as the gradient at step 0. */
enum { GF_SGD_LR, GF_SGD_MOMENTUM, GF_SGD_DAMPENING, GF_SGD_WD, GF_SGD_NESTEROV,
        GF_SGD_STEP, GF_SGD_GRAD_SCALE, GF_SGD_HYPER };

struct gf_adamw_scalars {
    bool decay_on;     /* weight_decay != 0 */
    bool small;        /* |1 - beta1| < 0.5: torch's lerp takes its first form */
    float decay;       /* 1 - lr * wd */
    float w;           /* 1 - beta1 (lerp's weight) */
    float b2, one_b2;  /* beta2, 1 - beta2 */
    float step_size;   /* -lr / (1 - beta1^t) */
    float bc2_sqrt;    /* sqrt(1 - beta2^t) */
    float eps;
    float grad_scale;
};

static inline void gf_adamw_scalars(const double *h, struct gf_adamw_scalars *c)
{
    double lr = h[GF_ADAMW_LR], t = h[GF_ADAMW_STEP] + 1;
    c->decay_on = h[GF_ADAMW_WD] != 0;
    c->decay = (float)(1.0 - lr * h[GF_ADAMW_WD]);
    c->w = (float)(1.0 - h[GF_ADAMW_BETA1]);
    c->small = fabsf(c->w) < 0.5f;
    c->b2 = (float)h[GF_ADAMW_BETA2];
    c->one_b2 = (float)(1.0 - h[GF_ADAMW_BETA2]);
    c->step_size = (float)-(lr / (1.0 - pow(h[GF_ADAMW_BETA1], t)));
    c->bc2_sqrt = (float)pow(1.0 - pow(h[GF_ADAMW_BETA2], t), 0.5);
    c->eps = (float)h[GF_ADAMW_EPS];
    c->grad_scale = (float)h[GF_ADAMW_GRAD_SCALE];
}

struct gf_sgd_scalars {
    bool decay_on;     /* weight_decay != 0 */
    bool momentum_on;  /* momentum != 0 */
    bool nesterov;
    bool first;        /* step 0: the buffer starts as the gradient */
    float wd, mom;
    float damp;        /* 1 - dampening */
    float neg_lr;
    float grad_scale;
};

static inline void gf_sgd_scalars(const double *h, struct gf_sgd_scalars *c)
{
    c->decay_on = h[GF_SGD_WD] != 0;
    c->momentum_on = h[GF_SGD_MOMENTUM] != 0;
    c->nesterov = h[GF_SGD_NESTEROV] != 0;
    c->first = h[GF_SGD_STEP] == 0;
    c->wd = (float)h[GF_SGD_WD];
    c->mom = (float)h[GF_SGD_MOMENTUM];
    c->damp = (float)(1.0 - h[GF_SGD_DAMPENING]);
    c->neg_lr = (float)-h[GF_SGD_LR];
    c->grad_scale = (float)h[GF_SGD_GRAD_SCALE];
}

/* torch.nn.utils.clip_grad_norm_'s coefficient, in float (max_norm <= 0:
 * no clipping, 1). */
static inline float gf_clip_coef_of(double max_norm, double norm)
{
    if (!(max_norm > 0))
        return 1.0f;
    float coef = (float)max_norm / ((float)norm + 1e-6f);
    return coef > 1.0f ? 1.0f : coef;
}

/* The update's gradient scale: grad_scale (float, from hyper), times the
 * clipping coefficient for max_norm when a norm N is given: the clipping of
 * the scaled gradient, whose norm is grad_scale N (fp16 loss scaling stages
 * grad_scale 1 / S: the gradient and its norm unscaled, exactly, S being a
 * power of 2); false when the update is skipped (grad_scale or the norm not
 * finite). */
static inline bool gf_clip_scale(float grad_scale, const double *norm, double max_norm,
                                 float *scale)
{
    if (!isfinite(grad_scale) || (norm && !isfinite(*norm)))
        return false;
    *scale = norm ? grad_scale * gf_clip_coef_of(max_norm, *norm * grad_scale) : grad_scale;
    return true;
}

#endif /* GF_OPTIM_OPS_H */
