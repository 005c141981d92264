/* Parameter discovery (passes/params.c) against the ground truth the
 * export scripts record: every row of models/hf/<arch>/<export>/ and
 * models/<model>/<export>/initializers.txt that is a torch parameter is
 * classified as trained, every buffer and constant is not.  Training with
 * --untie all then leaves every folded constant (masks, RoPE tables,
 * scalars) byte-identical in the exported model, changes the parameters,
 * and gives each merged parameter's uses copies named after their modules.
 * Reads the committed files; runs from the repository root. */
#include <dirent.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "gf_exec.h"
#include "gf_passes.h"

/* The classification of initializer `name`, or -1 when it is not a float one. */
static int kind_of(const struct gf_param_class *c, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++)
        if (strcmp(c[i].name, name) == 0)
            return (int)c[i].kind;
    return -1;
}

/* Checks one export folder; returns the number of rows compared. */
static size_t check_folder(const char *dir)
{
    char path[1100], line[4096];
    snprintf(path, sizeof(path), "%s/model.onnx", dir);
    struct gf_model *m;
    assert_int_equal(gf_model_load(path, NULL, &m), GF_OK);
    assert_int_equal(gf_graph_infer_shapes(m->graph), GF_OK);
    struct gf_param_class *c;
    size_t n, rows = 0;
    assert_int_equal(gf_params_classify(m->graph, &c, &n), GF_OK);
    snprintf(path, sizeof(path), "%s/initializers.txt", dir);
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    while (fgets(line, sizeof(line), f)) {
        char name[1024], dtype[32], shape[128], kind[32];
        if (line[0] == '#' || sscanf(line, "%1023s %31s %127s %31s", name, dtype, shape, kind) != 4)
            continue;
        if (strcmp(dtype, "float32") != 0)
            continue;
        int k = kind_of(c, n, name);
        bool scalar = strcmp(shape, "scalar") == 0 || strcmp(shape, "1") == 0;
        if (strcmp(kind, "param") == 0 && !scalar) {
            if (k != GF_PARAM_TRAINED)
                fail_msg("%s: '%s' is a torch parameter, classified '%s'", dir, name,
                         k < 0 ? "missing" : gf_param_kind_name((enum gf_param_kind)k));
        } else if (k == GF_PARAM_TRAINED) {
            fail_msg("%s: '%s' is a torch %s, classified trained", dir, name, kind);
        }
        rows++;
    }
    fclose(f);
    free(c);
    gf_model_free(m);
    return rows;
}

static void test_against_exports(void **state)
{
    (void)state;
    static const char *const roots[] = {"models/hf", "models"};
    size_t folders = 0, rows = 0;
    for (int r = 0; r < 2; r++) {
        DIR *top = opendir(roots[r]);
        assert_non_null(top);
        struct dirent *a;
        while ((a = readdir(top))) {
            if (a->d_name[0] == '.' || strcmp(a->d_name, "hf") == 0)
                continue;
            static const char *const exps[] = {"legacy", "dynamo", "legacy-labels",
                                               "dynamo-labels"};
            for (int e = 0; e < 4; e++) {
                char dir[512], probe[600];
                snprintf(dir, sizeof(dir), "%s/%s/%s", roots[r], a->d_name, exps[e]);
                snprintf(probe, sizeof(probe), "%s/initializers.txt", dir);
                FILE *p = fopen(probe, "r");
                if (!p)
                    continue;
                fclose(p);
                rows += check_folder(dir);
                folders++;
            }
        }
        closedir(top);
    }
    printf("parameters: %zu float initializers of %zu exports as initializers.txt says\n", rows,
           folders);
    assert_true(folders >= 34); /* 28 in models/hf, 6 bundled */
}

static const struct gf_tensor *init_of(const struct gf_model *m, const char *name)
{
    const struct gf_value *v = gf_graph_find(m->graph, name);
    return v ? v->init : NULL;
}

/* 3 SGD steps with --untie all on an export with folded tables (dynamo) and
 * one with Identity aliases (legacy): constants keep their bytes. */
static void check_trained(const char *dir, const char *untied_name)
{
    char path[1100];
    snprintf(path, sizeof(path), "%s/model.onnx", dir);
    struct gf_model *m, *out;
    assert_int_equal(gf_model_load(path, NULL, &m), GF_OK);
    struct gf_trainer_opts o;
    gf_trainer_opts_init(&o, GF_OPTIM_SGD);
    o.optim.lr = 0.1;
    o.untie = "all";
    o.fuse = true;
    o.steps = 3;
    struct gf_trainer *t;
    struct gf_data *d;
    struct gf_train_stats st;
    assert_int_equal(gf_trainer_new(m, &o, &t), GF_OK);
    assert_int_equal(gf_data_open_dir(t, dir, &d), GF_OK);
    for (int s = 0; s < 3; s++)
        assert_int_equal(gf_trainer_step(t, d, &st), GF_OK);
    assert_int_equal(gf_trainer_export(t, &out), GF_OK);
    size_t same = 0, changed = 0;
    for (size_t i = 0; i < m->graph->n_inits; i++) {
        const struct gf_value *v = m->graph->inits[i];
        const struct gf_tensor *a = v->init, *b = init_of(out, v->name);
        assert_non_null(b);
        bool eq = a->nbytes == b->nbytes && memcmp(a->data, b->data, a->nbytes) == 0;
        if (a->dtype != GF_FLOAT || !gf_trainer_is_trained(t, v->name)) {
            if (!eq)
                fail_msg("%s: constant '%s' changed in training", dir, v->name);
            same++;
        } else {
            changed += !eq;
        }
    }
    assert_true(changed > 10);
    assert_non_null(init_of(out, untied_name)); /* a merged norm's own copy */
    assert_true(gf_trainer_is_trained(t, untied_name));
    printf("%s: %zu constants byte-identical, %zu parameters changed\n", dir, same, changed);
    gf_data_free(d);
    gf_trainer_free(t);
    gf_model_free(out);
    gf_model_free(m);
}

static void test_constants_survive_training(void **state)
{
    (void)state;
    check_trained("models/hf/llama/dynamo-labels", "model.layers.1.input_layernorm.weight");
    check_trained("models/hf/llama/legacy-labels", "model.norm.weight");
    check_trained("models/hf/gpt2/dynamo-labels", "transformer.h.1.ln_2.weight");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_exports),
        cmocka_unit_test(test_constants_survive_training),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
