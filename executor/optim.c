/*
 * Optimizers, gradient clipping and learning-rate schedules, with
 * torch.optim's arithmetic: fp32 tensors and state, scalars computed in
 * double (as Python does) and rounded to float where torch hands them to
 * a kernel, the same operation order, and a fused multiply-add where
 * torch's vectorized CPU kernels use one (add with alpha, lerp).
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "gf_exec.h"

struct gf_optim {
    struct gf_optim_opts o;
    size_t n;
    size_t *sizes;
    size_t n_state;  /* buffers per tensor: 0, 1 (SGD momentum) or 2 (AdamW) */
    float **state;   /* state[k * n + i]: buffer k of tensor i */
    float *block;    /* all state buffers, one allocation */
    int64_t step;
};

void gf_optim_opts_init(struct gf_optim_opts *o, enum gf_optim_kind kind)
{
    memset(o, 0, sizeof(*o));
    o->kind = kind;
    o->lr = 1e-3;
    o->beta1 = 0.9;
    o->beta2 = 0.999;
    o->eps = 1e-8;
    o->weight_decay = kind == GF_OPTIM_ADAMW ? 0.01 : 0.0;
}

const char *gf_optim_name(enum gf_optim_kind kind)
{
    return kind == GF_OPTIM_ADAMW ? "adamw" : "sgd";
}

bool gf_optim_parse(const char *name, enum gf_optim_kind *kind)
{
    if (strcmp(name, "sgd") == 0)
        *kind = GF_OPTIM_SGD;
    else if (strcmp(name, "adamw") == 0)
        *kind = GF_OPTIM_ADAMW;
    else
        return false;
    return true;
}

/* torch's own checks (torch/optim/sgd.py, adam.py). */
static enum gf_status check_opts(const struct gf_optim_opts *o)
{
    if (!(o->lr >= 0) || !isfinite(o->lr))
        return gf_error(GF_ERR_ARG, "invalid learning rate %g", o->lr);
    if (!(o->weight_decay >= 0) || !isfinite(o->weight_decay))
        return gf_error(GF_ERR_ARG, "invalid weight decay %g", o->weight_decay);
    if (o->kind == GF_OPTIM_SGD) {
        if (!(o->momentum >= 0) || !isfinite(o->momentum))
            return gf_error(GF_ERR_ARG, "invalid momentum %g", o->momentum);
        if (!isfinite(o->dampening))
            return gf_error(GF_ERR_ARG, "invalid dampening %g", o->dampening);
        if (o->nesterov && (o->momentum <= 0 || o->dampening != 0))
            return gf_error(GF_ERR_ARG, "nesterov momentum needs a momentum > 0 and "
                            "dampening 0");
        return GF_OK;
    }
    if (o->kind != GF_OPTIM_ADAMW)
        return gf_error(GF_ERR_ARG, "unknown optimizer %d", (int)o->kind);
    if (!(o->beta1 >= 0 && o->beta1 < 1))
        return gf_error(GF_ERR_ARG, "invalid beta1 %g (0 <= beta1 < 1)", o->beta1);
    if (!(o->beta2 >= 0 && o->beta2 < 1))
        return gf_error(GF_ERR_ARG, "invalid beta2 %g (0 <= beta2 < 1)", o->beta2);
    if (!(o->eps >= 0) || !isfinite(o->eps))
        return gf_error(GF_ERR_ARG, "invalid epsilon %g", o->eps);
    return GF_OK;
}

enum gf_status gf_optim_new(const struct gf_optim_opts *o, size_t n, const size_t *sizes,
                            struct gf_optim **out)
{
    *out = NULL;
    enum gf_status st = check_opts(o);
    if (st != GF_OK)
        return st;
    struct gf_optim *op = calloc(1, sizeof(*op));
    if (!op)
        return gf_error(GF_ERR_NOMEM, "out of memory");
    op->o = *o;
    op->n = n;
    op->n_state = o->kind == GF_OPTIM_ADAMW ? 2 : o->momentum != 0 ? 1 : 0;
    size_t total = 0;
    for (size_t i = 0; i < n; i++)
        total += sizes[i];
    op->sizes = malloc((n + 1) * sizeof(*op->sizes));
    op->state = calloc(op->n_state * n + 1, sizeof(*op->state));
    op->block = calloc(op->n_state * total + 1, sizeof(float));
    if (!op->sizes || !op->state || !op->block) {
        gf_optim_free(op);
        return gf_error(GF_ERR_NOMEM, "out of memory for the optimizer state (%zu floats)",
                        op->n_state * total);
    }
    if (n)
        memcpy(op->sizes, sizes, n * sizeof(*sizes));
    float *p = op->block;
    for (size_t k = 0; k < op->n_state; k++)
        for (size_t i = 0; i < n; i++, p += sizes[i - 1])
            op->state[k * n + i] = p;
    *out = op;
    return GF_OK;
}

void gf_optim_free(struct gf_optim *o)
{
    if (!o)
        return;
    free(o->block);
    free(o->state);
    free(o->sizes);
    free(o);
}

int64_t gf_optim_get_step(const struct gf_optim *o)
{
    return o->step;
}

void gf_optim_set_step(struct gf_optim *o, int64_t step)
{
    o->step = step;
}

size_t gf_optim_state_count(const struct gf_optim *o)
{
    return o->n_state;
}

const char *gf_optim_state_name(const struct gf_optim *o, size_t k)
{
    if (k >= o->n_state)
        return NULL;
    if (o->o.kind == GF_OPTIM_SGD)
        return "momentum_buffer";
    return k == 0 ? "exp_avg" : "exp_avg_sq";
}

float *gf_optim_get_state(struct gf_optim *o, size_t i, size_t k)
{
    return i < o->n && k < o->n_state ? o->state[k * o->n + i] : NULL;
}

/* torch.optim.SGD, one tensor (_single_tensor_sgd):
 *   g = grad + wd * p                       (wd != 0)
 *   buf = g (first step), else buf = momentum * buf + (1 - dampening) * g
 *   g = g + momentum * buf (nesterov), else g = buf      (momentum != 0)
 *   p = p - lr * g
 * `x.add(y, alpha=a)` is fma(a, y, x) in torch's vectorized kernels. */
static void sgd_one(const struct gf_optim *op, float *p, const float *grad, float *buf,
                    size_t n, double lr)
{
    const struct gf_optim_opts *o = &op->o;
    const float wd = (float)o->weight_decay, mom = (float)o->momentum;
    const float damp = (float)(1.0 - o->dampening), neg_lr = (float)-lr;
    for (size_t i = 0; i < n; i++) {
        float g = grad[i];
        if (o->weight_decay != 0)
            g = fmaf(wd, p[i], g);
        if (o->momentum != 0) {
            if (op->step == 0)
                buf[i] = g;
            else
                buf[i] = fmaf(damp, g, buf[i] * mom);
            g = o->nesterov ? fmaf(mom, buf[i], g) : buf[i];
        }
        p[i] = fmaf(neg_lr, g, p[i]);
    }
}

/* torch.optim.AdamW, one tensor (_single_tensor_adam, decoupled decay):
 *   p = p * (1 - lr * wd)
 *   m = lerp(m, g, 1 - beta1)            = m + (1 - beta1) * (g - m)
 *   v = v * beta2 + (1 - beta2) * g * g
 *   p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * with t the step count after incrementing. */
static void adamw_one(const struct gf_optim *op, float *p, const float *grad, float *m,
                      float *v, size_t n, double lr)
{
    const struct gf_optim_opts *o = &op->o;
    double t = (double)(op->step + 1);
    const float decay = (float)(1.0 - lr * o->weight_decay);
    const float w = (float)(1.0 - o->beta1), b2 = (float)o->beta2;
    const float one_b2 = (float)(1.0 - o->beta2);
    const bool small = fabsf(w) < 0.5f; /* torch's lerp picks its form by the weight */
    const float step_size = (float)-(lr / (1.0 - pow(o->beta1, t)));
    const float bc2_sqrt = (float)pow(1.0 - pow(o->beta2, t), 0.5);
    const float eps = (float)o->eps;
    for (size_t i = 0; i < n; i++) {
        const float g = grad[i];
        if (o->weight_decay != 0)
            p[i] = p[i] * decay;
        m[i] = small ? fmaf(w, g - m[i], m[i]) : fmaf(w - 1.0f, g - m[i], g);
        v[i] = v[i] * b2 + one_b2 * g * g;
        const float denom = sqrtf(v[i]) / bc2_sqrt + eps;
        p[i] = p[i] + step_size * (m[i] / denom);
    }
}

void gf_optim_step(struct gf_optim *o, float *const *params, const float *const *grads,
                   double lr)
{
    for (size_t i = 0; i < o->n; i++) {
        if (o->o.kind == GF_OPTIM_ADAMW)
            adamw_one(o, params[i], grads[i], o->state[i], o->state[o->n + i], o->sizes[i],
                      lr);
        else
            sgd_one(o, params[i], grads[i], o->n_state ? o->state[i] : NULL, o->sizes[i], lr);
    }
    o->step++;
}

/* torch.nn.utils.clip_grad_norm_(norm_type=2): total = ||(||g_i||)_i||,
 * coef = max_norm / (total + 1e-6) in float, clamped to 1, every gradient
 * multiplied by it (also when it is 1). */
double gf_clip_grad_norm(size_t n, float *const *grads, const size_t *sizes, double max_norm)
{
    double sum = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < sizes[i]; k++)
            sum += (double)grads[i][k] * grads[i][k];
    double norm = sqrt(sum);
    if (!(max_norm > 0))
        return norm;
    float coef = (float)max_norm / ((float)norm + 1e-6f);
    if (coef > 1.0f)
        coef = 1.0f;
    for (size_t i = 0; i < n; i++)
        for (size_t k = 0; k < sizes[i]; k++)
            grads[i][k] *= coef;
    return norm;
}

double gf_lr_at(enum gf_lr_schedule kind, double lr, double min_lr, int64_t warmup,
                int64_t total, int64_t s)
{
    if (warmup > 0 && s < warmup)
        return lr * (double)(s + 1) / (double)warmup;
    if (kind == GF_LR_CONSTANT)
        return lr;
    int64_t span = total - warmup;
    double progress = span > 0 ? (double)(s - warmup) / (double)span : 1.0;
    if (progress > 1)
        progress = 1;
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + cos(M_PI * progress));
}
