/*
 * Optimizers, clipping, schedules and the trainer.
 *
 * The optimizer tests run graphfuse's fp32 SGD / AdamW next to the torch
 * formulas written out here in double (several steps, weight decay,
 * momentum, dampening, nesterov, both forms of torch's lerp, bias
 * correction).  The trainer tests use small models whose backward graph is
 * written by hand (gf_trainer_opts.differentiated), so they test the
 * trainer alone: the loss and parameters against the same model computed
 * here in double, gradient accumulation, parameter selection by regex,
 * tied copies, checkpoint + resume bit for bit, and a NaN named by its op.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>
#include <math.h>

#include "gf_exec.h"

/* ---- helpers --------------------------------------------------------------- */

static uint64_t rng_state = 12345;

/* Uniform in [-1, 1). */
static float frand(void)
{
    rng_state = rng_state * 6364136223846793005ull + 1442695040888963407ull;
    return (float)((double)(rng_state >> 40) / (double)(1ull << 24) * 2.0 - 1.0);
}

static void assert_close(double got, double want, double rtol, double atol, const char *what)
{
    if (!(fabs(got - want) <= atol + rtol * fabs(want)))
        fail_msg("%s: got %.9g, want %.9g", what, got, want);
}

/* ---- optimizers against the torch formulas in double ---------------------------- */

#define N_EL 37 /* odd on purpose */
#define N_STEPS 8

struct sgd_case {
    double lr, momentum, dampening, wd;
    bool nesterov;
};

/* torch.optim.SGD in double. */
static void ref_sgd(const struct sgd_case *c, double *p, const float *g, double *buf,
                    int step)
{
    for (int i = 0; i < N_EL; i++) {
        double d = g[i] + c->wd * p[i];
        if (c->momentum != 0) {
            buf[i] = step == 0 ? d : c->momentum * buf[i] + (1 - c->dampening) * d;
            d = c->nesterov ? d + c->momentum * buf[i] : buf[i];
        }
        p[i] -= c->lr * d;
    }
}

static void check_sgd(const struct sgd_case *c)
{
    struct gf_optim_opts o;
    gf_optim_opts_init(&o, GF_OPTIM_SGD);
    o.lr = c->lr;
    o.momentum = c->momentum;
    o.dampening = c->dampening;
    o.weight_decay = c->wd;
    o.nesterov = c->nesterov;
    size_t size = N_EL;
    struct gf_optim *op;
    assert_int_equal(gf_optim_new(&o, 1, &size, &op), GF_OK);
    assert_int_equal(gf_optim_state_count(op), c->momentum != 0 ? 1 : 0);
    float p[N_EL], g[N_EL];
    double rp[N_EL], buf[N_EL] = {0};
    for (int i = 0; i < N_EL; i++)
        rp[i] = p[i] = frand();
    for (int s = 0; s < N_STEPS; s++) {
        for (int i = 0; i < N_EL; i++)
            g[i] = frand();
        float *pp = p;
        const float *gg = g;
        gf_optim_step(op, &pp, &gg, c->lr);
        ref_sgd(c, rp, g, buf, s);
        for (int i = 0; i < N_EL; i++)
            assert_close(p[i], rp[i], 1e-5, 1e-6, "sgd parameter");
    }
    for (int i = 0; c->momentum != 0 && i < N_EL; i++)
        assert_close(gf_optim_get_state(op, 0, 0)[i], buf[i], 1e-5, 1e-6, "momentum buffer");
    assert_int_equal(gf_optim_get_step(op), N_STEPS);
    gf_optim_free(op);
}

static void sgd_matches_torch(void **state)
{
    (void)state;
    const struct sgd_case cases[] = {
        {0.1, 0, 0, 0, false},      /* plain */
        {0.1, 0.9, 0, 0, false},    /* the models/ reference: buf = g at the first step */
        {0.05, 0.9, 0.3, 0, false}, /* dampening */
        {0.05, 0.8, 0, 0.01, true}, /* nesterov + weight decay */
        {0.2, 0, 0, 0.1, false},    /* weight decay alone */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check_sgd(&cases[i]);
}

struct adam_case {
    double lr, beta1, beta2, eps, wd;
};

/* AdamW as the paper writes it: m̂ = m / (1 - β1^t), v̂ = v / (1 - β2^t),
 * p = p (1 - lr wd) - lr m̂ / (sqrt(v̂) + eps). */
static void ref_adamw(const struct adam_case *c, double *p, const float *g, double *m,
                      double *v, int t)
{
    for (int i = 0; i < N_EL; i++) {
        p[i] *= 1 - c->lr * c->wd;
        m[i] = c->beta1 * m[i] + (1 - c->beta1) * g[i];
        v[i] = c->beta2 * v[i] + (1 - c->beta2) * (double)g[i] * g[i];
        double mh = m[i] / (1 - pow(c->beta1, t)), vh = v[i] / (1 - pow(c->beta2, t));
        p[i] -= c->lr * mh / (sqrt(vh) + c->eps);
    }
}

static void check_adamw(const struct adam_case *c)
{
    struct gf_optim_opts o;
    gf_optim_opts_init(&o, GF_OPTIM_ADAMW);
    o.lr = c->lr;
    o.beta1 = c->beta1;
    o.beta2 = c->beta2;
    o.eps = c->eps;
    o.weight_decay = c->wd;
    size_t size = N_EL;
    struct gf_optim *op;
    assert_int_equal(gf_optim_new(&o, 1, &size, &op), GF_OK);
    assert_int_equal(gf_optim_state_count(op), 2);
    assert_string_equal(gf_optim_state_name(op, 0), "exp_avg");
    assert_string_equal(gf_optim_state_name(op, 1), "exp_avg_sq");
    float p[N_EL], g[N_EL];
    double rp[N_EL], m[N_EL] = {0}, v[N_EL] = {0};
    for (int i = 0; i < N_EL; i++)
        rp[i] = p[i] = frand();
    for (int s = 1; s <= N_STEPS; s++) {
        for (int i = 0; i < N_EL; i++)
            g[i] = frand() * (i % 3 == 0 ? 1e-3f : 1.0f); /* mixed scales */
        float *pp = p;
        const float *gg = g;
        gf_optim_step(op, &pp, &gg, c->lr);
        ref_adamw(c, rp, g, m, v, s);
        for (int i = 0; i < N_EL; i++)
            assert_close(p[i], rp[i], 1e-5, 1e-6, "adamw parameter");
    }
    for (int i = 0; i < N_EL; i++) {
        assert_close(gf_optim_get_state(op, 0, 0)[i], m[i], 1e-4, 1e-7, "exp_avg");
        assert_close(gf_optim_get_state(op, 0, 1)[i], v[i], 1e-4, 1e-9, "exp_avg_sq");
    }
    gf_optim_free(op);
}

static void adamw_matches_torch(void **state)
{
    (void)state;
    const struct adam_case cases[] = {
        {1e-3, 0.9, 0.999, 1e-8, 0.01}, /* the models/ reference */
        {1e-2, 0.9, 0.99, 1e-6, 0.0},   /* no decay */
        {5e-3, 0.3, 0.9, 1e-8, 0.1},    /* 1 - beta1 >= 0.5: torch's other lerp form */
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++)
        check_adamw(&cases[i]);
}

static void bad_hyperparameters(void **state)
{
    (void)state;
    struct gf_optim_opts o;
    struct gf_optim *op = NULL;
    size_t size = 4;
    gf_optim_opts_init(&o, GF_OPTIM_SGD);
    o.nesterov = true; /* without momentum: torch refuses it too */
    assert_int_equal(gf_optim_new(&o, 1, &size, &op), GF_ERR_ARG);
    assert_non_null(strstr(gf_last_error(), "nesterov"));
    gf_optim_opts_init(&o, GF_OPTIM_SGD);
    o.lr = -1;
    assert_int_equal(gf_optim_new(&o, 1, &size, &op), GF_ERR_ARG);
    assert_non_null(strstr(gf_last_error(), "learning rate"));
    gf_optim_opts_init(&o, GF_OPTIM_ADAMW);
    o.beta1 = 1.0;
    assert_int_equal(gf_optim_new(&o, 1, &size, &op), GF_ERR_ARG);
    assert_non_null(strstr(gf_last_error(), "beta1"));
    assert_null(op);
    enum gf_optim_kind k;
    assert_true(gf_optim_parse("adamw", &k) && k == GF_OPTIM_ADAMW);
    assert_false(gf_optim_parse("adam", &k));
}

/* clip_grad_norm_'s coefficient: max / (norm + 1e-6) in float, at most 1. */
static void clipping(void **state)
{
    (void)state;
    assert_close(gf_clip_coef(0, 5), 1, 0, 0, "no clipping");
    assert_close(gf_clip_coef(-1, 5), 1, 0, 0, "no clipping (negative)");
    assert_close(gf_clip_coef(10, 5), 1, 0, 0, "norm below the max");
    assert_close(gf_clip_coef(1, 5), (float)1 / (5.0f + 1e-6f), 0, 0, "clipped");
    assert_close(gf_clip_coef(1, 0), 1, 0, 0, "a zero gradient");
}

static void schedules(void **state)
{
    (void)state;
    /* constant with 4 warmup steps: lr * (s+1) / 4, then lr */
    assert_close(gf_lr_at(GF_LR_CONSTANT, 0.1, 0, 4, 100, 0), 0.025, 1e-12, 0, "warmup 0");
    assert_close(gf_lr_at(GF_LR_CONSTANT, 0.1, 0, 4, 100, 3), 0.1, 1e-12, 0, "warmup 3");
    assert_close(gf_lr_at(GF_LR_CONSTANT, 0.1, 0, 4, 100, 50), 0.1, 1e-12, 0, "constant");
    assert_close(gf_lr_at(GF_LR_CONSTANT, 0.1, 0, 0, 100, 0), 0.1, 1e-12, 0, "no warmup");
    /* cosine, warmup 10 of 110, 1.0 -> 0.1: half way at step 60 */
    assert_close(gf_lr_at(GF_LR_COSINE, 1.0, 0.1, 10, 110, 9), 1.0, 1e-12, 0, "end of warmup");
    assert_close(gf_lr_at(GF_LR_COSINE, 1.0, 0.1, 10, 110, 10), 1.0, 1e-12, 0, "cosine start");
    assert_close(gf_lr_at(GF_LR_COSINE, 1.0, 0.1, 10, 110, 60), 0.55, 1e-12, 0, "cosine middle");
    assert_close(gf_lr_at(GF_LR_COSINE, 1.0, 0.1, 10, 110, 35),
                 0.1 + 0.9 * 0.5 * (1 + cos(M_PI / 4)), 1e-12, 0, "cosine quarter");
    assert_close(gf_lr_at(GF_LR_COSINE, 1.0, 0.1, 10, 110, 110), 0.1, 1e-12, 0, "cosine end");
    assert_close(gf_lr_at(GF_LR_COSINE, 1.0, 0.0, 0, 8, 4), 0.5, 1e-12, 0, "cosine to 0");
}

/* ---- hand-differentiated models ------------------------------------------------- */

static struct gf_model *new_model(void)
{
    struct gf_model *m = gf_model_new(8, "train_test");
    assert_non_null(m);
    assert_int_equal(gf_model_set_opset(m, "", 13), GF_OK);
    return m;
}

static struct gf_value *input(struct gf_model *m, const char *name, int rank,
                              const int64_t *dims)
{
    struct gf_dim d[4];
    for (int i = 0; i < rank; i++)
        d[i] = (struct gf_dim){dims[i], NULL, NULL};
    struct gf_value *v = gf_graph_new_value(m->graph, name, NULL);
    assert_non_null(v);
    gf_value_set_tensor_type(v, GF_FLOAT, rank, d);
    assert_int_equal(gf_graph_add_input(m->graph, v), GF_OK);
    return v;
}

/* A constant (is_param false) or a parameter: an initializer that is
 * also a graph input. */
static struct gf_value *init(struct gf_model *m, const char *name, enum gf_dtype dt,
                             int rank, const int64_t *dims, const void *data, bool is_param)
{
    struct gf_tensor *t = gf_tensor_new(m, name, dt, rank, dims, data);
    assert_non_null(t);
    struct gf_value *v = gf_graph_add_initializer(m->graph, name, t);
    assert_non_null(v);
    if (is_param)
        assert_int_equal(gf_graph_add_input(m->graph, v), GF_OK);
    return v;
}

/* One node with one output named `out` (NULL: a fresh name). */
static struct gf_value *op(struct gf_model *m, const char *type, const char *out,
                           size_t n_in, struct gf_value *a, struct gf_value *b)
{
    struct gf_value *ins[2] = {a, b};
    struct gf_value *y = gf_graph_new_value(m->graph, out, out ? NULL : type);
    assert_non_null(y);
    char name[64];
    snprintf(name, sizeof(name), "the_%s", out ? out : type);
    for (char *c = name; *c; c++)
        *c = (char)(*c >= 'A' && *c <= 'Z' ? *c + 32 : *c);
    assert_non_null(gf_graph_add_node(m->graph, type, "", name, n_in, ins, 1, &y));
    return y;
}

static void output(struct gf_model *m, struct gf_value *v)
{
    assert_int_equal(gf_graph_add_output(m->graph, v), GF_OK);
}

#define NB 5 /* rows per batch */
#define ND 3 /* features */
#define NO 2 /* outputs */

/* pred = (x @ w.weight + b.bias) * s.scale;  loss = mean((pred - y)^2)
 * and its gradients, written out:
 *   dpred = (pred - y) * 2 / (NB*NO);  dh = dpred * s
 *   w.weight_grad = x^T @ dh;  b.bias_grad = sum_rows(dh);  s.scale_grad = sum(dpred * h) */
static struct gf_model *linear_model(const float *w, const float *b, float s)
{
    struct gf_model *m = new_model();
    int64_t xd[2] = {NB, ND}, yd[2] = {NB, NO}, wd[2] = {ND, NO}, bd[1] = {NO}, one[1] = {1};
    struct gf_value *x = input(m, "x", 2, xd), *y = input(m, "y", 2, yd);
    struct gf_value *W = init(m, "w.weight", GF_FLOAT, 2, wd, w, true);
    struct gf_value *B = init(m, "b.bias", GF_FLOAT, 1, bd, b, true);
    struct gf_value *S = init(m, "s.scale", GF_FLOAT, 1, one, &s, true);
    float c = 2.0f / (NB * NO);
    int64_t axis0 = 0;
    struct gf_value *C = init(m, "two_over_n", GF_FLOAT, 0, NULL, &c, false);
    struct gf_value *A0 = init(m, "axis0", GF_INT64, 1, one, &axis0, false);
    struct gf_value *S1 = init(m, "shape1", GF_INT64, 1, one, one, false);
    struct gf_value *h = op(m, "Add", "h", 2, op(m, "MatMul", NULL, 2, x, W), B);
    struct gf_value *d = op(m, "Sub", "d", 2, op(m, "Mul", "pred", 2, h, S), y);
    struct gf_value *loss = op(m, "ReduceMean", "loss", 1, op(m, "Mul", "sq", 2, d, d), NULL);
    assert_int_equal(gf_node_set_attr_int(loss->producer, "keepdims", 0), GF_OK);
    output(m, loss);
    struct gf_value *dpred = op(m, "Mul", "dpred", 2, d, C);
    struct gf_value *dh = op(m, "Mul", "dh", 2, dpred, S);
    output(m, op(m, "MatMul", "w.weight_grad", 2, op(m, "Transpose", "xt", 1, x, NULL), dh));
    struct gf_value *db = op(m, "ReduceSum", "b.bias_grad", 2, dh, A0);
    assert_int_equal(gf_node_set_attr_int(db->producer, "keepdims", 0), GF_OK);
    output(m, db);
    struct gf_value *ds = op(m, "ReduceSum", "ds_all", 1, op(m, "Mul", NULL, 2, dpred, h), NULL);
    output(m, op(m, "Reshape", "s.scale_grad", 2, ds, S1));
    assert_int_equal(gf_graph_validate(m->graph), GF_OK);
    return m;
}

struct batch {
    float x[NB * ND], y[NB * NO];
};

/* Writes batches as DIR/test_data_set_K/input_{0,1}.pb, named x and y (or
 * unnamed: then matched by position). */
static void write_batches(const char *dir, const struct batch *bs, int n, bool named)
{
    struct gf_model *a = gf_model_new(8, "data");
    int64_t xd[2] = {NB, ND}, yd[2] = {NB, NO};
    char path[512];
    for (int k = 0; k < n; k++) {
        snprintf(path, sizeof(path), "%s/test_data_set_%d", dir, k);
        assert_int_equal(mkdir(path, 0755), 0);
        struct gf_tensor *x = gf_tensor_new(a, named ? "x" : "", GF_FLOAT, 2, xd, bs[k].x);
        struct gf_tensor *y = gf_tensor_new(a, named ? "y" : "", GF_FLOAT, 2, yd, bs[k].y);
        snprintf(path, sizeof(path), "%s/test_data_set_%d/input_0.pb", dir, k);
        assert_int_equal(gf_tensor_save(x, path), GF_OK);
        snprintf(path, sizeof(path), "%s/test_data_set_%d/input_1.pb", dir, k);
        assert_int_equal(gf_tensor_save(y, path), GF_OK);
    }
    gf_model_free(a);
}

struct linear {
    float w[ND * NO], b[NO], s;
    struct batch batches[3];
    char dir[64];
};

static int linear_setup(void **state)
{
    static struct linear L;
    rng_state = 777;
    for (int i = 0; i < ND * NO; i++)
        L.w[i] = frand();
    for (int i = 0; i < NO; i++)
        L.b[i] = frand() * 0.1f;
    L.s = 1.25f;
    for (int k = 0; k < 3; k++) {
        for (int i = 0; i < NB * ND; i++)
            L.batches[k].x[i] = frand();
        for (int i = 0; i < NB * NO; i++)
            L.batches[k].y[i] = frand();
    }
    snprintf(L.dir, sizeof(L.dir), "/tmp/gf_test_optim_XXXXXX");
    assert_non_null(mkdtemp(L.dir));
    write_batches(L.dir, L.batches, 3, true);
    *state = &L;
    return 0;
}

static int linear_teardown(void **state)
{
    struct linear *L = *state;
    char cmd[200];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", L->dir);
    return system(cmd) == 0 ? 0 : -1;
}

/* The linear model's loss and gradients in double. */
struct lin_ref {
    double w[ND * NO], b[NO], s;
};

static double ref_loss_grad(const struct lin_ref *p, const struct batch *bt, struct lin_ref *g)
{
    double loss = 0;
    memset(g, 0, sizeof(*g));
    for (int r = 0; r < NB; r++)
        for (int o = 0; o < NO; o++) {
            double h = p->b[o];
            for (int k = 0; k < ND; k++)
                h += (double)bt->x[r * ND + k] * p->w[k * NO + o];
            double d = h * p->s - bt->y[r * NO + o];
            loss += d * d / (NB * NO);
            double dpred = 2 * d / (NB * NO), dh = dpred * p->s;
            for (int k = 0; k < ND; k++)
                g->w[k * NO + o] += bt->x[r * ND + k] * dh;
            g->b[o] += dh;
            g->s += dpred * h;
        }
    return loss;
}

static struct gf_trainer *new_trainer(struct gf_model *m, struct gf_trainer_opts *o)
{
    struct gf_trainer *t = NULL;
    o->differentiated = true;
    if (gf_trainer_new(m, o, &t) != GF_OK)
        fail_msg("gf_trainer_new: %s", gf_last_error());
    return t;
}

static const float *param_data(struct gf_trainer *t, const char *name)
{
    struct gf_param_info p;
    for (size_t i = 0; i < gf_trainer_param_count(t); i++) {
        gf_trainer_get_param(t, i, &p);
        if (strcmp(p.name, name) == 0)
            return p.data;
    }
    fail_msg("no parameter '%s'", name);
    return NULL;
}

/* SGD with momentum on the linear model, batches cycled: loss, gradient
 * norm and parameters against the double reference. */
static void trainer_matches_reference(void **state)
{
    struct linear *L = *state;
    struct gf_model *m = linear_model(L->w, L->b, L->s);
    struct gf_trainer_opts o;
    gf_trainer_opts_init(&o, GF_OPTIM_SGD);
    o.optim.lr = 0.05;
    o.optim.momentum = 0.9;
    o.steps = 7;
    o.trainable = "."; /* s.scale has one element: only an explicit regex trains it */
    struct gf_trainer *t = new_trainer(m, &o);
    assert_int_equal(gf_trainer_param_count(t), 3);
    assert_string_equal(gf_trainer_loss_name(t), "loss");
    struct gf_data *d;
    assert_int_equal(gf_data_open_dir(t, L->dir, &d), GF_OK);
    struct lin_ref p, g, buf;
    memset(&buf, 0, sizeof(buf));
    for (int i = 0; i < ND * NO; i++)
        p.w[i] = L->w[i];
    for (int i = 0; i < NO; i++)
        p.b[i] = L->b[i];
    p.s = L->s;
    for (int s = 0; s < 7; s++) {
        struct gf_train_stats st;
        assert_int_equal(gf_trainer_step(t, d, &st), GF_OK);
        double want = ref_loss_grad(&p, &L->batches[s % 3], &g), norm = g.s * g.s;
        for (int i = 0; i < ND * NO; i++)
            norm += g.w[i] * g.w[i];
        for (int i = 0; i < NO; i++)
            norm += g.b[i] * g.b[i];
        assert_int_equal(st.step, s);
        assert_int_equal(st.tokens, NB); /* float inputs: samples */
        assert_close(st.lr, 0.05, 0, 0, "lr");
        assert_close(st.loss, want, 1e-5, 0, "loss");
        assert_close(st.grad_norm, sqrt(norm), 1e-5, 0, "gradient norm");
        double *pp = (double *)&p, *gg = (double *)&g, *bb = (double *)&buf;
        for (size_t i = 0; i < sizeof(p) / sizeof(double); i++) {
            bb[i] = s == 0 ? gg[i] : 0.9 * bb[i] + gg[i];
            pp[i] -= 0.05 * bb[i];
        }
    }
    const float *w = param_data(t, "w.weight"), *b = param_data(t, "b.bias");
    for (int i = 0; i < ND * NO; i++)
        assert_close(w[i], p.w[i], 1e-5, 1e-6, "w.weight");
    for (int i = 0; i < NO; i++)
        assert_close(b[i], p.b[i], 1e-5, 1e-6, "b.bias");
    assert_close(*param_data(t, "s.scale"), p.s, 1e-5, 0, "s.scale");
    gf_data_free(d);
    gf_trainer_free(t);
    gf_model_free(m);
}

/* --accumulate 3: one step = the mean gradient of 3 micro-batches, the
 * mean of their losses; files unnamed, so matched by position. */
static void accumulation(void **state)
{
    struct linear *L = *state;
    char dir[128];
    snprintf(dir, sizeof(dir), "%s/unnamed", L->dir);
    assert_int_equal(mkdir(dir, 0755), 0);
    write_batches(dir, L->batches, 3, false);
    struct gf_model *m = linear_model(L->w, L->b, L->s);
    struct gf_trainer_opts o;
    gf_trainer_opts_init(&o, GF_OPTIM_SGD);
    o.optim.lr = 0.1;
    o.accumulate = 3;
    o.steps = 2;
    struct gf_trainer *t = new_trainer(m, &o);
    assert_int_equal(gf_trainer_param_count(t), 2); /* w.weight, b.bias */
    struct gf_data *d;
    assert_int_equal(gf_data_open_dir(t, dir, &d), GF_OK);
    struct lin_ref p = {.s = L->s}, g, mean;
    for (int i = 0; i < ND * NO; i++)
        p.w[i] = L->w[i];
    for (int i = 0; i < NO; i++)
        p.b[i] = L->b[i];
    for (int s = 0; s < 2; s++) {
        struct gf_train_stats st;
        assert_int_equal(gf_trainer_step(t, d, &st), GF_OK);
        double want = 0;
        memset(&mean, 0, sizeof(mean));
        for (int k = 0; k < 3; k++) {
            want += ref_loss_grad(&p, &L->batches[k], &g) / 3;
            for (int i = 0; i < ND * NO; i++)
                mean.w[i] += g.w[i] / 3;
            for (int i = 0; i < NO; i++)
                mean.b[i] += g.b[i] / 3;
        }
        assert_close(st.loss, want, 1e-5, 0, "mean loss of the micro-batches");
        assert_int_equal(st.tokens, 3 * NB);
        for (int i = 0; i < ND * NO; i++)
            p.w[i] -= 0.1 * mean.w[i];
        for (int i = 0; i < NO; i++)
            p.b[i] -= 0.1 * mean.b[i];
    }
    const float *w = param_data(t, "w.weight");
    for (int i = 0; i < ND * NO; i++)
        assert_close(w[i], p.w[i], 1e-5, 1e-6, "w.weight after accumulation");
    gf_data_free(d);
    gf_trainer_free(t);
    gf_model_free(m);
}

static size_t selected_count(struct gf_model *m, const char *trainable, const char *freeze,
                             enum gf_status *st)
{
    struct gf_trainer_opts o;
    gf_trainer_opts_init(&o, GF_OPTIM_SGD);
    o.differentiated = true;
    o.trainable = trainable;
    o.freeze = freeze;
    struct gf_trainer *t = NULL;
    *st = gf_trainer_new(m, &o, &t);
    size_t n = t ? gf_trainer_param_count(t) : 0;
    gf_trainer_free(t);
    return n;
}

/* Default: float initializers of 2+ elements; --trainable / --freeze are
 * POSIX extended regexes searched in the name. */
static void selection(void **state)
{
    struct linear *L = *state;
    struct gf_model *m = linear_model(L->w, L->b, L->s);
    enum gf_status st;
    assert_int_equal(selected_count(m, NULL, NULL, &st), 2);
    assert_int_equal(selected_count(m, "scale", NULL, &st), 1);
    assert_int_equal(selected_count(m, "^(w|s)\\.", NULL, &st), 2);
    assert_int_equal(selected_count(m, NULL, "bias$", &st), 1);
    assert_int_equal(selected_count(m, ".", "weight|bias", &st), 1);
    selected_count(m, "^nothing$", NULL, &st);
    assert_int_equal(st, GF_ERR_INVALID);
    assert_non_null(strstr(gf_last_error(), "no trainable parameter"));
    selected_count(m, NULL, "(", &st);
    assert_int_equal(st, GF_ERR_ARG);
    assert_non_null(strstr(gf_last_error(), "--freeze"));
    /* a frozen parameter keeps its values; the others move */
    struct gf_trainer_opts o;
    gf_trainer_opts_init(&o, GF_OPTIM_ADAMW);
    o.freeze = "^b\\.";
    struct gf_trainer *t = new_trainer(m, &o);
    struct gf_data *d;
    struct gf_train_stats s;
    assert_int_equal(gf_data_open_dir(t, L->dir, &d), GF_OK);
    assert_int_equal(gf_trainer_step(t, d, &s), GF_OK);
    const float *w = param_data(t, "w.weight");
    assert_true(w[0] != L->w[0]);
    gf_data_free(d);
    gf_trainer_save(t, "/tmp/gf_test_optim_frozen.onnx");
    gf_trainer_free(t);
    struct gf_model *saved;
    assert_int_equal(gf_model_load("/tmp/gf_test_optim_frozen.onnx", NULL, &saved), GF_OK);
    const struct gf_tensor *b = gf_graph_find(saved->graph, "b.bias")->init;
    const struct gf_tensor *sw = gf_graph_find(saved->graph, "w.weight")->init;
    assert_memory_equal(b->data, L->b, sizeof(L->b));
    assert_memory_not_equal(sw->data, L->w, sizeof(L->w));
    gf_model_free(saved);
    unlink("/tmp/gf_test_optim_frozen.onnx");
    gf_model_free(m);
}

struct run_result {
    double loss[8];
    float w[ND * NO], b[NO];
};

static void train_steps(struct gf_trainer *t, struct gf_data *d, int n, double *loss)
{
    for (int s = 0; s < n; s++) {
        struct gf_train_stats st;
        assert_int_equal(gf_trainer_step(t, d, &st), GF_OK);
        loss[s] = st.loss;
    }
}

static struct gf_trainer *adamw_trainer(struct gf_model *m, const char *dir,
                                        struct gf_data **d)
{
    struct gf_trainer_opts o;
    gf_trainer_opts_init(&o, GF_OPTIM_ADAMW);
    o.optim.lr = 0.01;
    o.schedule = GF_LR_COSINE;
    o.warmup = 2;
    o.steps = 6;
    o.clip_grad_norm = 0.5;
    struct gf_trainer *t = new_trainer(m, &o);
    assert_int_equal(gf_data_open_dir(t, dir, d), GF_OK);
    return t;
}

/* 6 steps straight, or 2 steps + checkpoint + a new trainer resuming for
 * 4: the same losses and weights, bit for bit. */
static void checkpoint_resume(void **state)
{
    struct linear *L = *state;
    struct gf_model *m = linear_model(L->w, L->b, L->s);
    char ckpt[160];
    snprintf(ckpt, sizeof(ckpt), "%s/ckpt.onnx", L->dir);
    struct gf_data *d;
    struct gf_trainer *t = adamw_trainer(m, L->dir, &d);
    double straight[6], resumed[6];
    train_steps(t, d, 6, straight);
    float w[ND * NO], b[NO];
    memcpy(w, param_data(t, "w.weight"), sizeof(w));
    memcpy(b, param_data(t, "b.bias"), sizeof(b));
    gf_data_free(d);
    gf_trainer_free(t);

    t = adamw_trainer(m, L->dir, &d);
    train_steps(t, d, 2, resumed);
    assert_int_equal(gf_trainer_save_checkpoint(t, d, ckpt), GF_OK);
    gf_data_free(d);
    gf_trainer_free(t);
    t = adamw_trainer(m, L->dir, &d);
    assert_int_equal(gf_trainer_load_checkpoint(t, d, ckpt), GF_OK);
    assert_int_equal(gf_trainer_get_step(t), 2);
    train_steps(t, d, 4, resumed + 2);
    assert_memory_equal(straight, resumed, sizeof(straight));
    assert_memory_equal(w, param_data(t, "w.weight"), sizeof(w));
    assert_memory_equal(b, param_data(t, "b.bias"), sizeof(b));
    gf_data_free(d);
    gf_trainer_free(t);

    /* another optimizer, or a file that is no checkpoint: refused */
    struct gf_trainer_opts o;
    gf_trainer_opts_init(&o, GF_OPTIM_SGD);
    t = new_trainer(m, &o);
    assert_int_equal(gf_trainer_load_checkpoint(t, NULL, ckpt), GF_ERR_ARG);
    assert_non_null(strstr(gf_last_error(), "adamw"));
    assert_int_equal(gf_trainer_save(t, ckpt), GF_OK);
    assert_int_equal(gf_trainer_load_checkpoint(t, NULL, ckpt), GF_ERR_INVALID);
    assert_non_null(strstr(gf_last_error(), "not a graphfuse checkpoint"));
    gf_trainer_free(t);
    gf_model_free(m);
}

/* loss = mean(sqrt(x @ w)) with x @ w < 0: the step stops, names the
 * Sqrt node, and leaves the parameters alone. */
static void nan_names_the_op(void **state)
{
    struct linear *L = *state;
    struct gf_model *m = new_model();
    int64_t xd[2] = {NB, ND}, yd[2] = {NB, NO}, wd[2] = {ND, NO};
    float w[ND * NO];
    for (int i = 0; i < ND * NO; i++)
        w[i] = 1.0f;
    w[1] = 2.0f; /* not uniform */
    struct gf_value *x = input(m, "x", 2, xd);
    input(m, "y", 2, yd);
    struct gf_value *W = init(m, "w.weight", GF_FLOAT, 2, wd, w, true);
    struct gf_value *p = op(m, "MatMul", "p", 2, x, W);
    struct gf_value *r = op(m, "Sqrt", "root", 1, op(m, "Neg", "negp", 1, p, NULL), NULL);
    struct gf_value *loss = op(m, "ReduceMean", "loss", 1, r, NULL);
    gf_node_set_attr_int(loss->producer, "keepdims", 0);
    output(m, loss);
    output(m, op(m, "Identity", "w.weight_grad", 1, W, NULL));
    struct gf_trainer_opts o;
    gf_trainer_opts_init(&o, GF_OPTIM_SGD);
    struct gf_trainer *t = new_trainer(m, &o);
    struct gf_data *d;
    assert_int_equal(gf_data_open_dir(t, L->dir, &d), GF_OK);
    struct gf_train_stats st;
    assert_int_equal(gf_trainer_step(t, d, &st), GF_ERR_INVALID);
    assert_true(st.diverged);
    const char *msg = gf_last_error();
    if (!strstr(msg, "'the_root' (Sqrt)") || !strstr(msg, "NaN") || !strstr(msg, "loss"))
        fail_msg("message does not name the Sqrt node: %s", msg);
    assert_memory_equal(param_data(t, "w.weight"), w, sizeof(w));
    assert_int_equal(gf_trainer_get_step(t), 0);
    gf_data_free(d);
    gf_trainer_free(t);
    gf_model_free(m);
}

/* a [2,3] and b = a^T [3,2] are one parameter: its gradient is
 * da + db^T, and b is rewritten as the transpose of the updated a.  Equal
 * tensors of one repeated value (z1, z2 zeros) are not taken for copies.
 * loss = sum(a*ca) + sum(b*cb) + sum(z1*c1) + sum(z2*c2) + sum(x). */
static struct gf_model *tied_model(const float *a, const float *ca, const float *cb)
{
    struct gf_model *m = new_model();
    int64_t ad[2] = {2, 3}, bd[2] = {3, 2}, zd[1] = {4}, xd[2] = {NB, ND}, yd[2] = {NB, NO};
    float at[6], z[4] = {0}, c1[4] = {1, 2, 3, 4}, c2[4] = {-1, 0, 1, 2};
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++)
            at[j * 2 + i] = a[i * 3 + j];
    struct gf_value *x = input(m, "x", 2, xd);
    input(m, "y", 2, yd);
    struct gf_value *A = init(m, "a", GF_FLOAT, 2, ad, a, true);
    struct gf_value *B = init(m, "b", GF_FLOAT, 2, bd, at, true);
    struct gf_value *Z1 = init(m, "z1", GF_FLOAT, 1, zd, z, true);
    struct gf_value *Z2 = init(m, "z2", GF_FLOAT, 1, zd, z, true);
    struct gf_value *CA = init(m, "ca", GF_FLOAT, 2, ad, ca, false);
    struct gf_value *CB = init(m, "cb", GF_FLOAT, 2, bd, cb, false);
    struct gf_value *C1 = init(m, "c1", GF_FLOAT, 1, zd, c1, false);
    struct gf_value *C2 = init(m, "c2", GF_FLOAT, 1, zd, c2, false);
    struct gf_value *terms[5] = {op(m, "Mul", "ta", 2, A, CA), op(m, "Mul", "tb", 2, B, CB),
                                 op(m, "Mul", "t1", 2, Z1, C1), op(m, "Mul", "t2", 2, Z2, C2),
                                 x};
    struct gf_value *sum = NULL;
    for (int i = 0; i < 5; i++) {
        char name[16];
        snprintf(name, sizeof(name), "s%d", i);
        struct gf_value *r = op(m, "ReduceSum", name, 1, terms[i], NULL);
        gf_node_set_attr_int(r->producer, "keepdims", 0);
        snprintf(name, sizeof(name), "acc%d", i);
        sum = sum ? op(m, "Add", i == 4 ? "loss" : name, 2, sum, r) : r;
    }
    output(m, sum);
    output(m, op(m, "Identity", "a_grad", 1, CA, NULL));
    output(m, op(m, "Identity", "b_grad", 1, CB, NULL));
    output(m, op(m, "Identity", "z1_grad", 1, C1, NULL));
    output(m, op(m, "Identity", "z2_grad", 1, C2, NULL));
    return m;
}

static void one_sgd_step(struct gf_model *m, bool no_tie, const char *dir,
                         struct gf_trainer **out)
{
    struct gf_trainer_opts o;
    gf_trainer_opts_init(&o, GF_OPTIM_SGD);
    o.optim.lr = 0.5;
    o.no_tie = no_tie;
    struct gf_trainer *t = new_trainer(m, &o);
    struct gf_data *d;
    struct gf_train_stats st;
    assert_int_equal(gf_data_open_dir(t, dir, &d), GF_OK);
    assert_int_equal(gf_trainer_step(t, d, &st), GF_OK);
    gf_data_free(d);
    *out = t;
}

static void tied_copies(void **state)
{
    struct linear *L = *state;
    float a[6] = {0.5f, -1, 2, 0.25f, 3, -0.75f}, ca[6] = {1, 2, 3, 4, 5, 6};
    float cb[6] = {0.5f, -0.5f, 1.5f, 2.5f, -1, 0}; /* [3,2] */
    struct gf_model *m = tied_model(a, ca, cb);
    struct gf_trainer *t;
    one_sgd_step(m, false, L->dir, &t);
    struct gf_param_info p;
    assert_int_equal(gf_trainer_param_count(t), 4);
    gf_trainer_get_param(t, 1, &p);
    assert_string_equal(p.name, "b");
    assert_non_null(p.tied_to);
    assert_string_equal(p.tied_to, "a");
    assert_true(p.transposed);
    gf_trainer_get_param(t, 3, &p);
    assert_null(p.tied_to); /* z2 equals z1, but it is all zeros */
    const float *na = param_data(t, "a"), *nb = param_data(t, "b");
    for (int i = 0; i < 2; i++)
        for (int j = 0; j < 3; j++) {
            double g = (double)ca[i * 3 + j] + cb[j * 2 + i];
            assert_close(na[i * 3 + j], a[i * 3 + j] - 0.5 * g, 1e-6, 1e-7, "tied a");
            assert_true(nb[j * 2 + i] == na[i * 3 + j]);
        }
    assert_close(param_data(t, "z1")[3], -2.0, 0, 0, "z1 on its own");
    assert_close(param_data(t, "z2")[3], -1.0, 0, 0, "z2 on its own");
    gf_trainer_free(t);
    one_sgd_step(m, true, L->dir, &t); /* no_tie: two parameters */
    gf_trainer_get_param(t, 1, &p);
    assert_null(p.tied_to);
    assert_close(param_data(t, "a")[1], a[1] - 0.5 * ca[1], 1e-6, 0, "untied a");
    assert_close(param_data(t, "b")[1], a[3] - 0.5 * cb[1], 1e-6, 0, "untied b");
    gf_trainer_free(t);
    gf_model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(sgd_matches_torch),
        cmocka_unit_test(adamw_matches_torch),
        cmocka_unit_test(bad_hyperparameters),
        cmocka_unit_test(clipping),
        cmocka_unit_test(schedules),
        cmocka_unit_test_setup_teardown(trainer_matches_reference, linear_setup,
                                        linear_teardown),
        cmocka_unit_test_setup_teardown(accumulation, linear_setup, linear_teardown),
        cmocka_unit_test_setup_teardown(selection, linear_setup, linear_teardown),
        cmocka_unit_test_setup_teardown(checkpoint_resume, linear_setup, linear_teardown),
        cmocka_unit_test_setup_teardown(nan_names_the_op, linear_setup, linear_teardown),
        cmocka_unit_test_setup_teardown(tied_copies, linear_setup, linear_teardown),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
