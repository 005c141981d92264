/*
 * The autotuner (executor/autotune.c) and its cache (executor/tune_cache.c).
 *
 * Tuning runs over fake kernels of one Add node, declared here: a plain
 * kernel (the default, slowed by spinning), a tunable one whose knob
 * values are fast, slow, wrong or failing, and one that never writes its
 * output.  The expected winner and counts follow from how the fakes are
 * written, and the reference sum is checked by a loop here.  The cache
 * tests write, reread, damage and share files in a temporary folder.
 */
#include <errno.h>
#include <glob.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "gf_exec.h"
#include "gf_tune.h"

static char dir[256];

/* ---- fake kernels of Add (float a + b, same shapes) ------------------------------------------ */

static void spin_ms(double ms)
{
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    do
        clock_gettime(CLOCK_MONOTONIC, &t);
    while ((double)(t.tv_sec - t0.tv_sec) * 1e3 + (double)(t.tv_nsec - t0.tv_nsec) * 1e-6 < ms);
}

static void add(const struct gf_kernel_args *a, float bias)
{
    const float *x = a->in[0].data, *y = a->in[1].data;
    float *z = a->out[0].data;
    for (size_t i = 0; i < a->out[0].nelem; i++)
        z[i] = x[i] + y[i] + bias;
}

static enum gf_status plain_run(const struct gf_kernel_args *a)
{
    spin_ms(2);
    add(a, 0);
    return GF_OK;
}

/* tile: 1 slow, 2 fast, 3 wrong, 4 fails, 5 fast but off by 1e-6 (accepted) */
static enum gf_status tiled_run(const struct gf_kernel_args *a)
{
    int tile = a->config ? a->config[0] : 1;
    if (tile == 4)
        return gf_error(GF_ERR_UNSUPPORTED, "tile 4 needs more local memory");
    if (tile == 1)
        spin_ms(4);
    if (tile == 5)
        spin_ms(1);
    add(a, tile == 3 ? 0.5f : tile == 5 ? 1e-6f : 0);
    return GF_OK;
}

static enum gf_status lazy_run(const struct gf_kernel_args *a)
{
    (void)a;
    return GF_OK;
}

static const int tile_values[] = {1, 2, 3, 4, 5};
static const struct gf_config_knob tile_knob[] = {{"tile", 5, tile_values}};

static const struct gf_kernel k_plain = {.op = GF_OP_ADD, .backend = "cpu", .impl = "plain",
                                         .run = plain_run};
static const struct gf_kernel k_tiled = {.op = GF_OP_ADD, .backend = "cpu", .impl = "tiled",
                                         .run = tiled_run, .n_knobs = 1, .knobs = tile_knob};
static const struct gf_kernel k_lazy = {.op = GF_OP_ADD, .backend = "cpu", .impl = "lazy",
                                        .run = lazy_run};

/* A kernel with a space of 10 x 10 x 10 configurations, all correct. */
static const int ten[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};
static const struct gf_config_knob big_knobs[] = {{"a", 10, ten}, {"b", 10, ten}, {"c", 10, ten}};
static enum gf_status big_run(const struct gf_kernel_args *a)
{
    add(a, 0);
    return GF_OK;
}
static const struct gf_kernel k_big = {.op = GF_OP_ADD, .backend = "cpu", .impl = "big",
                                       .run = big_run, .n_knobs = 3, .knobs = big_knobs};

/* ---- one Add node and its views -------------------------------------------------------------- */

struct fixture {
    struct gf_model *m;
    struct gf_node *n;
    struct gf_tview in[2], out[1];
};

static void make_node(struct fixture *f, int64_t rows, int64_t cols)
{
    f->m = gf_model_new(8, "g");
    assert_non_null(f->m);
    struct gf_graph *g = f->m->graph;
    struct gf_value *x = gf_graph_new_value(g, "x", NULL), *y = gf_graph_new_value(g, "y", NULL);
    struct gf_value *z = gf_graph_new_value(g, "z", NULL);
    f->n = gf_graph_add_node(g, "Add", NULL, "add0", 2, (struct gf_value *[]){x, y}, 1, &z);
    assert_non_null(f->n);
    int64_t dims[2] = {rows, cols};
    for (int i = 0; i < 3; i++) {
        struct gf_tview *t = i < 2 ? &f->in[i] : &f->out[0];
        memset(t, 0, sizeof(*t));
        t->dtype = GF_FLOAT;
        gf_tview_set_shape(t, 2, dims);
    }
}

static void path_of(char *buf, size_t len, const char *name)
{
    snprintf(buf, len, "%s/%s", dir, name);
}

static bool has_warning(const struct gf_tuner *t, const char *text)
{
    for (size_t i = 0; i < gf_tuner_warning_count(t); i++)
        if (strstr(gf_tuner_warning(t, i), text))
            return true;
    return false;
}

static const struct gf_tune_opts quick = {.repeats = 3, .warmup = 1, .sample_ms = 0.5};

/* ---- configuration spaces -------------------------------------------------------------------- */

static void test_space(void **state)
{
    (void)state;
    static const int a[] = {1, 2, 3}, b[] = {10, 20};
    static const struct gf_config_knob knobs[] = {{"a", 3, a}, {"b", 2, b}};
    struct gf_kernel k = {.op = GF_OP_ADD, .n_knobs = 2, .knobs = knobs};
    assert_int_equal(gf_tune_space_size(&k), 6);
    assert_int_equal(gf_tune_space_size(&k_plain), 1);
    assert_int_equal(gf_tune_space_size(&k_big), 1000);
    bool seen[4][21] = {{0}};
    for (size_t i = 0; i < 6; i++) {
        int c[GF_TUNE_MAX_KNOBS];
        gf_tune_config_at(&k, i, c);
        assert_true(c[0] >= 1 && c[0] <= 3 && (c[1] == 10 || c[1] == 20));
        assert_false(seen[c[0]][c[1]]); /* every configuration once */
        seen[c[0]][c[1]] = true;
        if (i == 0) /* configuration 0: the defaults */
            assert_true(c[0] == 1 && c[1] == 10);
    }
    char buf[64];
    int c[GF_TUNE_MAX_KNOBS];
    gf_tune_config_at(&k, 5, c);
    assert_string_equal(gf_tune_format_config(&k, c, buf, sizeof(buf)), "a=3 b=20");
    assert_string_equal(gf_tune_format_config(&k_plain, NULL, buf, sizeof(buf)), "default");
}

/* ---- the tuning core ------------------------------------------------------------------------- */

static void test_choose_fastest_correct(void **state)
{
    (void)state;
    struct fixture f;
    make_node(&f, 7, 33);
    struct gf_backend *cpu = gf_backend_get("cpu");
    const struct gf_kernel *ks[] = {&k_plain, &k_tiled, &k_lazy};
    struct gf_tune_result r;
    assert_int_equal(gf_tune_node(cpu, f.n, f.in, 2, f.out, 1, ks, 3, &k_plain, &quick, &r),
                     GF_OK);
    assert_int_equal(r.n_space, 7);
    assert_int_equal(r.n_tried, 7);      /* plain, tile 1..5, lazy */
    assert_int_equal(r.n_rejected, 2);   /* tile 3 (off by 0.5) and lazy (no output) */
    assert_int_equal(r.n_failed, 1);     /* tile 4 */
    assert_ptr_equal(r.choice.kernel, &k_tiled);
    assert_int_equal(r.choice.config[0], 2);
    assert_ptr_equal(r.fallback.kernel, &k_plain);
    assert_true(r.default_ms >= 2.0 && r.best_ms < 1.0);
    assert_true(r.worst_err > 0 && r.worst_err < 1e-4); /* tile 5's 1e-6 */
    gf_model_free(f.m);
}

static void count_progress(void *ctx, size_t done, size_t total)
{
    size_t *seen = ctx;
    assert_int_equal(done, seen[0] + 1);
    seen[0] = done;
    seen[1] = total;
}

static void test_budget(void **state)
{
    (void)state;
    struct fixture f;
    make_node(&f, 3, 5);
    const struct gf_kernel *ks[] = {&k_plain, &k_big};
    size_t seen[2] = {0, 0};
    struct gf_tune_opts o = quick;
    o.budget = 16;
    o.progress = count_progress;
    o.progress_ctx = seen;
    struct gf_tune_result r;
    assert_int_equal(gf_tune_node(gf_backend_get("cpu"), f.n, f.in, 2, f.out, 1, ks, 2,
                                  &k_plain, &o, &r), GF_OK);
    assert_int_equal(r.n_space, 1001);
    assert_int_equal(r.n_tried, 16);
    assert_int_equal(seen[0], 16);
    assert_int_equal(seen[1], 16);
    assert_int_equal(r.n_rejected + r.n_failed, 0);
    gf_model_free(f.m);
}

/* The default kernel itself failing is an error naming the node. */
static void test_default_fails(void **state)
{
    (void)state;
    struct fixture f;
    make_node(&f, 2, 2);
    static const int four[] = {4};
    static const struct gf_config_knob knob[] = {{"tile", 1, four}};
    struct gf_kernel bad = k_tiled;
    bad.knobs = knob;
    const struct gf_kernel *ks[] = {&bad};
    struct gf_tune_result r;
    assert_int_not_equal(gf_tune_node(gf_backend_get("cpu"), f.n, f.in, 2, f.out, 1, ks, 1,
                                      &bad, &quick, &r), GF_OK);
    assert_non_null(strstr(gf_last_error(), "tile 4"));
    gf_model_free(f.m);
}

/* The public path on the real CPU registry: MatMul has one kernel. */
static void test_registry_matmul(void **state)
{
    (void)state;
    struct fixture f;
    make_node(&f, 4, 4);
    f.n->op = GF_OP_MATMUL;
    f.n->op_type = "MatMul";
    struct gf_backend *cpu = gf_backend_get("cpu");
    assert_int_equal(gf_tune_count_candidates(cpu, f.n, f.in, 2), 1);
    char path[300];
    path_of(path, sizeof(path), "registry.yaml");
    struct gf_tuner *t;
    assert_int_equal(gf_tuner_open(path, &t), GF_OK);
    struct gf_tune_result r;
    assert_int_equal(gf_tuner_tune(t, cpu, f.n, f.in, 2, f.out, 1, &quick, &r), GF_OK);
    assert_int_equal(r.n_tried, 1);
    assert_string_equal(r.choice.kernel->impl, "openblas");
    struct gf_tune_choice c;
    assert_true(gf_tuner_lookup(t, cpu, f.n, f.in, 2, f.out, 1, &c, NULL));
    assert_ptr_equal(c.kernel, r.choice.kernel);
    gf_tuner_free(t);
    gf_model_free(f.m);
}

/* ---- the cache ------------------------------------------------------------------------------- */

static const char *other_device(const struct gf_backend *be)
{
    (void)be;
    return "another CPU";
}

static const char *other_driver(const struct gf_backend *be)
{
    (void)be;
    return "driver 2";
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    static char buf[1 << 16];
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    buf[n] = 0;
    fclose(f);
    return buf;
}

static void spit(const char *path, const char *text, size_t len)
{
    FILE *f = fopen(path, "wb");
    assert_non_null(f);
    assert_int_equal(fwrite(text, 1, len, f), len);
    fclose(f);
}

/* Tunes the fake node into a new file at path; returns the result. */
static struct gf_tune_result tune_into(const char *path, struct fixture *f)
{
    struct gf_tuner *t;
    const struct gf_kernel *ks[] = {&k_plain, &k_tiled};
    struct gf_tune_result r;
    assert_int_equal(gf_tuner_open(path, &t), GF_OK);
    assert_int_equal(gf_tune_node(gf_backend_get("cpu"), f->n, f->in, 2, f->out, 1, ks, 2,
                                  &k_plain, &quick, &r), GF_OK);
    assert_int_equal(gf_tuner_record(t, gf_backend_get("cpu"), f->n, f->in, 2, f->out, 1, &r),
                     GF_OK);
    assert_int_equal(gf_tuner_save(t), GF_OK);
    gf_tuner_free(t);
    return r;
}

static bool hit(const char *path, struct gf_backend *be, struct fixture *f,
                struct gf_tune_choice *c, size_t *warnings)
{
    struct gf_tuner *t;
    const struct gf_kernel *ks[] = {&k_plain, &k_tiled};
    assert_int_equal(gf_tuner_open(path, &t), GF_OK);
    bool found = gf_tuner_lookup_in(t, be, f->n, f->in, 2, f->out, 1, ks, 2, c, NULL);
    if (warnings)
        *warnings = gf_tuner_warning_count(t);
    gf_tuner_free(t);
    return found;
}

static void test_round_trip(void **state)
{
    (void)state;
    char path[300];
    path_of(path, sizeof(path), "sub/dir/round.yaml"); /* folders are created */
    struct fixture f;
    make_node(&f, 3, 5);
    struct gf_tune_result r = tune_into(path, &f);
    assert_int_equal(r.choice.config[0], 2);
    const char *text = slurp(path);
    assert_non_null(strstr(text, "format: 1"));
    assert_non_null(strstr(text, "op: Add"));
    assert_non_null(strstr(text, "shapes: 3x5,3x5->3x5"));
    assert_non_null(strstr(text, "impl: tiled"));
    assert_non_null(strstr(text, "config: {tile: 2}"));
    struct gf_backend *cpu = gf_backend_get("cpu");
    struct gf_tune_choice c;
    size_t nw;
    assert_true(hit(path, cpu, &f, &c, &nw));
    assert_int_equal(nw, 0);
    assert_ptr_equal(c.kernel, &k_tiled);
    assert_int_equal(c.config[0], 2);

    /* another shape, attribute, device, driver: misses */
    struct fixture g;
    make_node(&g, 3, 6);
    assert_false(hit(path, cpu, &g, &c, NULL));
    gf_model_free(g.m);
    f.out[0].dims[1] = 6; /* an output shape (what Reshape's shape input decides) */
    assert_false(hit(path, cpu, &f, &c, NULL));
    f.out[0].dims[1] = 5;
    assert_true(hit(path, cpu, &f, &c, NULL));
    assert_int_equal(gf_node_set_attr_int(f.n, "broadcast", 1), GF_OK);
    assert_false(hit(path, cpu, &f, &c, NULL));
    f.n->n_attrs = 0;
    assert_true(hit(path, cpu, &f, &c, NULL));
    struct gf_backend_ops ops = *cpu->ops;
    struct gf_backend other = *cpu;
    other.ops = &ops;
    ops.device_name = other_device;
    assert_false(hit(path, &other, &f, &c, NULL));
    ops.device_name = cpu->ops->device_name;
    ops.driver_version = other_driver;
    assert_false(hit(path, &other, &f, &c, NULL));
    ops.driver_version = cpu->ops->driver_version;
    assert_true(hit(path, &other, &f, &c, NULL));

    /* another graphfuse version: stale, one warning, ignored */
    char *p = strstr(text, "  graphfuse: " GF_VERSION);
    assert_non_null(p);
    memcpy(p, "  graphfuse: 0.0.0", strlen("  graphfuse: 0.0.0"));
    spit(path, text, strlen(text));
    assert_false(hit(path, cpu, &f, &c, &nw));
    assert_int_equal(nw, 1);
    /* ... but kept when this version saves its own entry */
    tune_into(path, &f);
    text = slurp(path);
    assert_non_null(strstr(text, "graphfuse: 0.0.0"));
    assert_true(hit(path, cpu, &f, &c, NULL));

    /* a cached config the kernel no longer has: warning, miss */
    for (char *q = strstr(text, "{tile: 2}"); q; q = strstr(q, "{tile: 2}"))
        q[7] = '9';
    spit(path, text, strlen(text));
    struct gf_tuner *t;
    const struct gf_kernel *ks[] = {&k_plain, &k_tiled};
    assert_int_equal(gf_tuner_open(path, &t), GF_OK);
    assert_false(gf_tuner_lookup_in(t, cpu, f.n, f.in, 2, f.out, 1, ks, 2, &c, NULL));
    assert_true(has_warning(t, "no cpu kernel 'tiled'"));
    gf_tuner_free(t);
    gf_model_free(f.m);
}

/* A file that cannot be used: one warning naming it, an empty cache, no
 * crash; saving replaces it and keeps a .bak. */
static void damaged(const char *name, const char *text, size_t len, const char *why)
{
    char path[300], bak[310];
    path_of(path, sizeof(path), name);
    snprintf(bak, sizeof(bak), "%s.bak", path);
    spit(path, text, len);
    struct fixture f;
    make_node(&f, 3, 5);
    struct gf_tuner *t;
    struct gf_tune_choice c;
    const struct gf_kernel *ks[] = {&k_plain, &k_tiled};
    assert_int_equal(gf_tuner_open(path, &t), GF_OK);
    if (gf_tuner_warning_count(t) != 1 || !has_warning(t, path) || !has_warning(t, why))
        fail_msg("%s: expected one warning with '%s', got %zu: %s", name, why,
                 gf_tuner_warning_count(t), gf_tuner_warning(t, 0));
    assert_false(gf_tuner_lookup_in(t, gf_backend_get("cpu"), f.n, f.in, 2, f.out, 1, ks, 2, &c,
                                    NULL));
    assert_int_equal(gf_tuner_save(t), GF_OK); /* nothing recorded: the file stays */
    assert_int_equal(access(bak, F_OK), -1);
    gf_tuner_free(t);
    tune_into(path, &f);
    assert_int_equal(access(bak, F_OK), 0);
    size_t nw;
    assert_true(hit(path, gf_backend_get("cpu"), &f, &c, &nw));
    assert_int_equal(nw, 0);
    gf_model_free(f.m);
}

static void test_damaged(void **state)
{
    (void)state;
    char good[300];
    path_of(good, sizeof(good), "good.yaml");
    struct fixture f;
    make_node(&f, 3, 5);
    tune_into(good, &f);
    gf_model_free(f.m);
    char text[8192];
    snprintf(text, sizeof(text), "%s", slurp(good));
    char *cut = strstr(text, "  impl:");
    assert_non_null(cut);
    damaged("truncated.yaml", text, (size_t)(cut - text), "entry has no 'impl'");
    damaged("mid_token.yaml", text, (size_t)(strstr(text, "config: {") - text) + 12, ":");
#define DAMAGED(name, text, why) damaged(name, text, strlen(text), why)
    DAMAGED("empty.yaml", "", "empty");
    DAMAGED("types1.yaml", "format: 1\nentries:\n- {device: a, driver: b, graphfuse: c, "
            "backend: d, op: e, dtype: f, shapes: g, attrs: h, impl: i, config: 5}\n",
            ":3: 'config' must be a mapping");
    DAMAGED("types2.yaml", "format: 1\nentries: {a: 1}\n", ":2: 'entries' must be a list");
    DAMAGED("types3.yaml", "format: 1\nentries:\n- device: [1, 2]\n",
            ":3: 'device' must be a string");
    DAMAGED("types4.yaml", "format: 1\nentries:\n- {device: a, driver: b, graphfuse: c, "
            "backend: d, op: e, dtype: f, shapes: g, attrs: h, impl: i, config: {},\n"
            "   best_ms: fast}\n", ":4: 'best_ms' must be a non-negative number");
    char bin[512];
    for (size_t i = 0; i < sizeof(bin); i++)
        bin[i] = (char)(i * 37 + 11);
    damaged("binary.yaml", bin, sizeof(bin), "binary.yaml:");
    DAMAGED("foreign.yaml", "name: my project\nversion: 3\n", "not a graphfuse autotune cache");
    DAMAGED("future.yaml", "format: 7\nentries: []\n", "cache format 7");
}

static void test_bad_paths(void **state)
{
    (void)state;
    struct fixture f;
    make_node(&f, 3, 5);
    struct gf_tuner *t;
    char path[300];
    const struct gf_kernel *ks[] = {&k_plain, &k_tiled};
    struct gf_tune_result r;
    /* a directory in place of the file */
    path_of(path, sizeof(path), "adir.yaml");
    assert_int_equal(mkdir(path, 0755), 0);
    assert_int_equal(gf_tuner_open(path, &t), GF_OK);
    assert_true(has_warning(t, "is a directory"));
    assert_int_equal(gf_tune_node(gf_backend_get("cpu"), f.n, f.in, 2, f.out, 1, ks, 2,
                                  &k_plain, &quick, &r), GF_OK);
    assert_int_equal(gf_tuner_record(t, gf_backend_get("cpu"), f.n, f.in, 2, f.out, 1, &r), GF_OK);
    assert_int_equal(gf_tuner_save(t), GF_ERR_IO);
    assert_non_null(strstr(gf_last_error(), path));
    struct stat st;
    assert_int_equal(stat(path, &st), 0);
    assert_true(S_ISDIR(st.st_mode)); /* left alone */
    gf_tuner_free(t);
    /* a path below a regular file: cannot be created */
    path_of(path, sizeof(path), "good.yaml/autotune.yaml");
    assert_int_equal(gf_tuner_open(path, &t), GF_OK);
    assert_int_equal(gf_tuner_warning_count(t), 1);
    assert_int_equal(gf_tuner_record(t, gf_backend_get("cpu"), f.n, f.in, 2, f.out, 1, &r), GF_OK);
    assert_int_equal(gf_tuner_save(t), GF_ERR_IO);
    assert_non_null(strstr(gf_last_error(), path));
    gf_tuner_free(t);
    gf_model_free(f.m);
}

/* ---- two processes saving into one file ------------------------------------------------------ */

#define PER_PROC 12

static void writer(const char *path, int who)
{
    struct fixture f;
    struct gf_tuner *t;
    struct gf_tune_result r = {.default_ms = 1, .best_ms = 1, .n_tried = 1};
    r.choice.kernel = &k_tiled;
    r.choice.config[0] = 2;
    if (gf_tuner_open(path, &t) != GF_OK)
        _exit(1);
    for (int i = 0; i < PER_PROC; i++) {
        make_node(&f, 100 * who + i, 1);
        if (gf_tuner_record(t, gf_backend_get("cpu"), f.n, f.in, 2, f.out, 1, &r) != GF_OK ||
            gf_tuner_save(t) != GF_OK) /* a save per entry: many chances to collide */
            _exit(2);
        gf_model_free(f.m);
    }
    gf_tuner_free(t);
    _exit(0);
}

static void test_concurrent_writers(void **state)
{
    (void)state;
    char path[300];
    path_of(path, sizeof(path), "shared.yaml");
    pid_t pid[2];
    for (int w = 0; w < 2; w++)
        if ((pid[w] = fork()) == 0)
            writer(path, w + 1);
    for (int w = 0; w < 2; w++) {
        int status;
        assert_int_equal(waitpid(pid[w], &status, 0), pid[w]);
        assert_true(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    }
    struct gf_tuner *t;
    const struct gf_kernel *ks[] = {&k_plain, &k_tiled};
    assert_int_equal(gf_tuner_open(path, &t), GF_OK);
    assert_int_equal(gf_tuner_warning_count(t), 0);
    for (int w = 1; w <= 2; w++)
        for (int i = 0; i < PER_PROC; i++) {
            struct fixture f;
            struct gf_tune_choice c;
            make_node(&f, 100 * w + i, 1);
            if (!gf_tuner_lookup_in(t, gf_backend_get("cpu"), f.n, f.in, 2, f.out, 1, ks, 2, &c,
                                    NULL))
                fail_msg("entry %d of writer %d is lost", i, w);
            gf_model_free(f.m);
        }
    gf_tuner_free(t);
    char pat[320];
    snprintf(pat, sizeof(pat), "%s.tmp.*", path);
    glob_t g;
    assert_int_equal(glob(pat, 0, NULL, &g), GLOB_NOMATCH); /* no temporary left behind */
}

/* ---- hostile files (issue 17) ---------------------------------------------------------------- */

/* A symlink planted at the old temporary name (FILE.tmp.<pid>) is never
 * written through, and a cache of mode 0600 keeps it when replaced. */
static void test_planted_temp(void **state)
{
    (void)state;
    char path[300], victim[300], link[340];
    path_of(path, sizeof(path), "planted.yaml");
    path_of(victim, sizeof(victim), "victim.txt");
    spit(victim, "precious\n", 9);
    snprintf(link, sizeof(link), "%s.tmp.%ld", path, (long)getpid());
    assert_int_equal(symlink(victim, link), 0);
    struct fixture f;
    make_node(&f, 3, 5);
    tune_into(path, &f);
    assert_string_equal(slurp(victim), "precious\n");
    struct stat st;
    assert_int_equal(lstat(link, &st), 0);
    assert_true(S_ISLNK(st.st_mode)); /* left alone */
    assert_int_equal(chmod(path, 0600), 0);
    gf_model_free(f.m);
    make_node(&f, 4, 6);
    tune_into(path, &f);
    assert_int_equal(stat(path, &st), 0);
    assert_int_equal(st.st_mode & 07777, 0600);
    gf_model_free(f.m);
}

/* A knob value past int is refused, not wrapped (4294967424 is 2^32 + 128). */
static void test_knob_range(void **state)
{
    (void)state;
    DAMAGED("range.yaml", "format: 1\nentries:\n- {device: a, driver: b, graphfuse: c, "
            "backend: d, op: e, dtype: f, shapes: g, attrs: h, impl: i, "
            "config: {tile: 4294967424}}\n", ":3: 'tile' is out of range");
    DAMAGED("range2.yaml", "format: 1\nentries:\n- {device: a, driver: b, graphfuse: c, "
            "backend: d, op: e, dtype: f, shapes: g, attrs: h, impl: i, "
            "config: {tile: 99999999999999999999999}}\n", ":3: 'tile' is out of range");
}

/* 20,000 entries load in linear time (the quadratic merge took 133 s). */
static void test_many_entries(void **state)
{
    (void)state;
    char path[300];
    path_of(path, sizeof(path), "many.yaml");
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fprintf(f, "format: 1\nentries:\n");
    for (int i = 0; i < 20000; i++)
        fprintf(f, "- {device: dev, driver: '1', graphfuse: %s, backend: cpu, op: MatMul, "
                "dtype: float, shapes: '%dx8,8x8->%dx8', attrs: '', impl: plain, "
                "config: {tile: 8}}\n", GF_VERSION, i + 1, i + 1);
    fclose(f);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    struct gf_tuner *t;
    assert_int_equal(gf_tuner_open(path, &t), GF_OK);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double s = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-9;
    assert_int_equal(gf_tuner_warning_count(t), 0);
    gf_tuner_free(t);
    if (s > 2.0)
        fail_msg("20,000 entries took %.2f s to load", s);
}

static int setup(void **state)
{
    (void)state;
    snprintf(dir, sizeof(dir), "/tmp/gf_autotune_XXXXXX");
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_space),
        cmocka_unit_test(test_choose_fastest_correct),
        cmocka_unit_test(test_budget),
        cmocka_unit_test(test_default_fails),
        cmocka_unit_test(test_registry_matmul),
        cmocka_unit_test(test_round_trip),
        cmocka_unit_test(test_damaged),
        cmocka_unit_test(test_bad_paths),
        cmocka_unit_test(test_concurrent_writers),
        cmocka_unit_test(test_planted_temp),
        cmocka_unit_test(test_knob_range),
        cmocka_unit_test(test_many_entries),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
