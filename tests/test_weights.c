/*
 * Weights back to PyTorch (executor/weights.c).
 *
 * The safetensors writer byte for byte on hand-made tensors (header length,
 * the JSON with escaped names, padding to 8, offsets, dtype strings, data,
 * a transposed matrix) and its refusals (no file left behind); the mapping
 * on a hand-built model (a folded MatMul weight, an own-named bias, an
 * initializer shared through Identity, constants, checkpoint state); and
 * the mapping against every models/.../initializers.txt there is (the
 * bundled models, and models/hf when present): each `param` row's torch
 * names are written, from that initializer or another holding the same
 * name, in the row's layout, and nothing else is.  Rows whose values are
 * not the parameter's (layout "sliced": rows of a position table folded
 * for a static shape; "plus_one": Gemma's 1 + weight folded) cannot give
 * the parameter back: nothing is written from them.
 * Run from the repository root (make test does).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>
#include <dirent.h>
#include <glob.h>

#include "gf_exec.h"

static char dir[] = "/tmp/gf_test_weights.XXXXXX";

static int setup(void **state)
{
    (void)state;
    return mkdtemp(dir) ? 0 : -1;
}

static int teardown(void **state)
{
    (void)state;
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    return system(cmd) == 0 ? 0 : -1;
}

static uint8_t *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    assert_non_null(f);
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    rewind(f);
    uint8_t *buf = malloc(*len + 1);
    assert_non_null(buf);
    assert_int_equal(fread(buf, 1, *len, f), *len);
    fclose(f);
    buf[*len] = 0;
    return buf;
}

/* Files in dir whose name contains ".tmp." (a write that left a temp behind). */
static int temp_files(void)
{
    DIR *d = opendir(dir);
    int n = 0;
    for (struct dirent *e; d && (e = readdir(d));)
        n += strstr(e->d_name, ".tmp.") != NULL;
    if (d)
        closedir(d);
    return n;
}

/* ---- the writer ---------------------------------------------------------------- */

static void test_writer_format(void **state)
{
    (void)state;
    const float a[6] = {0, 1, 2, 3, 4, 5}; /* [2, 3], written transposed: [3, 2] */
    const int64_t b[3] = {1, -2, 3};
    const uint16_t c[2] = {0x3f80, 0x4000}; /* bf16 1, 2 */
    const uint16_t d[2] = {0x3c00, 0xc000}; /* fp16 1, -2 */
    const int32_t e = 7;
    const int64_t da[2] = {2, 3}, db[1] = {3}, dc[1] = {2}, dd[2] = {1, 2}, df[1] = {0};
    const struct gf_safetensor t[] = {
        {"a.weight", GF_FLOAT, 2, da, a, true},
        {"b", GF_INT64, 1, db, b, false},
        {"c\"q\\\n", GF_BFLOAT16, 1, dc, c, false},
        {"d", GF_FLOAT16, 2, dd, d, false},
        {"e", GF_INT32, 0, NULL, &e, false},
        {"f", GF_UINT8, 1, df, NULL, false},
    };
    const struct gf_kv meta[] = {{"format", "pt"}};
    char path[256];
    snprintf(path, sizeof(path), "%s/w.safetensors", dir);
    size_t bytes = 0;
    assert_int_equal(gf_safetensors_write(path, 6, t, 1, meta, &bytes), GF_OK);

    /* largest elements first, then by name: b (8), a.weight, e (4), c, d (2), f (1) */
    const char *want = "{\"__metadata__\":{\"format\":\"pt\"},"
        "\"b\":{\"dtype\":\"I64\",\"shape\":[3],\"data_offsets\":[0,24]},"
        "\"a.weight\":{\"dtype\":\"F32\",\"shape\":[3,2],\"data_offsets\":[24,48]},"
        "\"e\":{\"dtype\":\"I32\",\"shape\":[],\"data_offsets\":[48,52]},"
        "\"c\\\"q\\\\\\u000a\":{\"dtype\":\"BF16\",\"shape\":[2],\"data_offsets\":[52,56]},"
        "\"d\":{\"dtype\":\"F16\",\"shape\":[1,2],\"data_offsets\":[56,60]},"
        "\"f\":{\"dtype\":\"U8\",\"shape\":[0],\"data_offsets\":[60,60]}}";
    size_t len;
    uint8_t *buf = read_all(path, &len);
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        n |= (uint64_t)buf[i] << (8 * i);
    assert_int_equal(n % 8, 0);
    assert_true(n >= strlen(want) && n < strlen(want) + 8);
    assert_memory_equal(buf + 8, want, strlen(want));
    for (size_t i = strlen(want); i < n; i++)
        assert_int_equal(buf[8 + i], ' ');
    assert_int_equal(len, 8 + n + 60);
    assert_int_equal(bytes, len);
    const uint8_t *data = buf + 8 + n;
    assert_memory_equal(data, b, 24);
    const float at[6] = {0, 3, 1, 4, 2, 5};
    assert_memory_equal(data + 24, at, 24);
    assert_memory_equal(data + 48, &e, 4);
    assert_memory_equal(data + 52, c, 4);
    assert_memory_equal(data + 56, d, 4);
    free(buf);
    assert_int_equal(temp_files(), 0);
}

static void test_writer_refuses(void **state)
{
    (void)state;
    const float x[2] = {1, 2};
    const int64_t d1[1] = {2}, d3[3] = {1, 1, 2};
    char path[256];
    snprintf(path, sizeof(path), "%s/bad.safetensors", dir);
    const struct gf_safetensor dup[] = {{"x", GF_FLOAT, 1, d1, x, false},
                                        {"x", GF_FLOAT, 1, d1, x, false}};
    assert_int_equal(gf_safetensors_write(path, 2, dup, 0, NULL, NULL), GF_ERR_ARG);
    assert_non_null(strstr(gf_last_error(), "'x'"));
    const struct gf_safetensor str[] = {{"s", GF_STRING, 1, d1, x, false}};
    assert_int_equal(gf_safetensors_write(path, 1, str, 0, NULL, NULL), GF_ERR_UNSUPPORTED);
    assert_non_null(strstr(gf_last_error(), "'s'"));
    const struct gf_safetensor rank3[] = {{"t", GF_FLOAT, 3, d3, x, true}};
    assert_int_equal(gf_safetensors_write(path, 1, rank3, 0, NULL, NULL), GF_ERR_ARG);
    assert_int_equal(access(path, F_OK), -1);
    char nodir[300];
    snprintf(nodir, sizeof(nodir), "%s/none/x.safetensors", dir);
    const struct gf_safetensor ok[] = {{"x", GF_FLOAT, 1, d1, x, false}};
    assert_int_equal(gf_safetensors_write(nodir, 1, ok, 0, NULL, NULL), GF_ERR_IO);
    assert_non_null(strstr(gf_last_error(), nodir));
    assert_int_equal(temp_files(), 0);
}

/* ---- the mapping on a hand-built model -------------------------------------------- */

static struct gf_value *init(struct gf_model *m, const char *name, enum gf_dtype dt, int rank,
                             const int64_t *dims)
{
    struct gf_tensor *t = gf_tensor_new(m, NULL, dt, rank, dims, NULL);
    assert_non_null(t);
    for (size_t i = 0; dt == GF_FLOAT && i < t->nelem; i++)
        ((float *)t->data)[i] = (float)i;
    struct gf_value *v = gf_graph_add_initializer(m->graph, name, t);
    assert_non_null(v);
    return v;
}

static struct gf_value *node(struct gf_model *m, const char *op, const char *name,
                             struct gf_value *a, struct gf_value *b)
{
    struct gf_value *in[2] = {a, b}, *out = gf_graph_new_value(m->graph, NULL, "y");
    assert_non_null(out);
    assert_non_null(gf_graph_add_node(m->graph, op, "", name, b ? 2 : 1, in, 1, &out));
    return out;
}

static void test_map_hand_built(void **state)
{
    (void)state;
    struct gf_model *m = gf_model_new(8, "g");
    struct gf_graph *g = m->graph;
    const int64_t dx[2] = {2, 3}, dw[2] = {3, 4}, d4[1] = {4}, dm[4] = {1, 1, 2, 2};
    struct gf_value *x = gf_graph_new_value(g, "x", NULL);
    gf_value_set_tensor_type(x, GF_FLOAT, 2, (struct gf_dim[]){{2, NULL, NULL}, {3, NULL, NULL}});
    assert_int_equal(gf_graph_add_input(g, x), GF_OK);
    (void)dx;
    struct gf_value *w = init(m, "onnx::MatMul_7", GF_FLOAT, 2, dw); /* [in, out] */
    struct gf_value *bias = init(m, "encoder.fc.bias", GF_FLOAT, 1, d4);
    struct gf_value *nw = init(m, "norm.weight", GF_FLOAT, 1, d4);
    struct gf_value *mask = init(m, "onnx::Mul_9", GF_FLOAT, 4, dm);
    struct gf_value *scale = init(m, "scale", GF_FLOAT, 0, NULL);
    init(m, "graphfuse.optim.exp_avg.norm.weight", GF_FLOAT, 1, d4);
    init(m, "val_3", GF_INT64, 1, d4);
    struct gf_value *y = node(m, "MatMul", "/encoder/fc/MatMul", x, w);
    y = node(m, "Add", "/encoder/fc/Add", bias, y);
    y = node(m, "Mul", "/norm/Mul_1", nw, y);
    struct gf_value *alias = node(m, "Identity", "Identity_1", nw, NULL);
    struct gf_value *other = gf_graph_new_value(g, "other.norm.weight", NULL);
    gf_node_set_output(alias->producer, 0, other);
    y = node(m, "Mul", "/other/norm/Mul_1", other, y);
    y = node(m, "Mul", "/attn/Mul", y, mask);
    y = node(m, "Mul", "/attn/Mul_2", y, scale);
    assert_int_equal(gf_graph_add_output(g, y), GF_OK);

    struct gf_weights *wm;
    assert_int_equal(gf_weights_map(m, &wm), GF_OK);
    const char *want[][3] = {{"encoder.fc.bias", "encoder.fc.bias", "same"},
                             {"encoder.fc.weight", "onnx::MatMul_7", "transposed"},
                             {"norm.weight", "norm.weight", "same"},
                             {"other.norm.weight", "norm.weight", "same"}};
    assert_int_equal(gf_weights_count(wm), 4);
    for (size_t i = 0; i < 4; i++) {
        struct gf_weight_info wi;
        gf_weights_get(wm, i, &wi);
        assert_string_equal(wi.torch_name, want[i][0]);
        assert_string_equal(wi.onnx_name, want[i][1]);
        assert_int_equal(wi.transposed, strcmp(want[i][2], "transposed") == 0);
    }
    assert_int_equal(gf_weights_skipped_count(wm), 2);
    assert_string_equal(gf_weights_get_skipped(wm, 0), "onnx::Mul_9");
    assert_string_equal(gf_weights_get_skipped(wm, 1), "scale");
    assert_int_equal(gf_weights_state_count(wm), 1);
    assert_int_equal(gf_weights_copy_count(wm), 0);

    /* the file: four tensors, the MatMul weight as torch's [out, in] */
    char path[256];
    snprintf(path, sizeof(path), "%s/m.safetensors", dir);
    size_t bytes, len;
    assert_int_equal(gf_weights_save_safetensors(wm, path, &bytes), GF_OK);
    uint8_t *buf = read_all(path, &len);
    assert_int_equal(bytes, len);
    assert_non_null(strstr((char *)buf + 8, "\"encoder.fc.weight\":{\"dtype\":\"F32\","
                                            "\"shape\":[4,3],\"data_offsets\":[16,64]}"));
    assert_non_null(strstr((char *)buf + 8, "\"__metadata__\":{\"format\":\"pt\""));
    uint64_t n = 0;
    for (int i = 0; i < 8; i++)
        n |= (uint64_t)buf[i] << (8 * i);
    const float *wt = (const float *)(buf + 8 + n + 16); /* sorted: encoder.fc.bias first */
    for (int o = 0; o < 4; o++)
        for (int i = 0; i < 3; i++)
            assert_float_equal(wt[o * 3 + i], (float)(i * 4 + o), 0);
    free(buf);
    gf_weights_free(wm);

    /* no parameter at all: refused, naming what was looked for */
    struct gf_model *e = gf_model_new(8, "empty");
    init(e, "onnx::Mul_1", GF_FLOAT, 4, dm);
    assert_int_equal(gf_weights_map(e, &wm), GF_ERR_INVALID);
    assert_null(wm);
    assert_non_null(strstr(gf_last_error(), "PyTorch"));
    gf_model_free(e);
    gf_model_free(m);
}

/* ---- the mapping against initializers.txt ------------------------------------------ */

struct row {
    char onnx[512], kind[32], torch[2048], layout[32];
};

/* The rows of an initializers.txt (tab-separated: onnx_name dtype shape kind
 * torch_name layout); *n rows. */
static struct row *read_rows(const char *path, size_t *n)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    struct row *rows = NULL;
    char line[4096];
    *n = 0;
    while (fgets(line, sizeof(line), f)) {
        if (line[0] == '#' || line[0] == '\n')
            continue;
        line[strcspn(line, "\r\n")] = 0;
        char *col[6] = {0}, *save = NULL, *p = line;
        for (int i = 0; i < 6; i++, p = NULL)
            col[i] = strtok_r(p, "\t", &save);
        if (!col[5])
            fail_msg("%s: a row with fewer than 6 columns: %s", path, line);
        rows = realloc(rows, (*n + 1) * sizeof(*rows));
        assert_non_null(rows);
        struct row *r = &rows[(*n)++];
        snprintf(r->onnx, sizeof(r->onnx), "%s", col[0]);
        snprintf(r->kind, sizeof(r->kind), "%s", col[3]);
        snprintf(r->torch, sizeof(r->torch), "%s", col[4]);
        snprintf(r->layout, sizeof(r->layout), "%s", col[5]);
    }
    fclose(f);
    return rows;
}

/* Whether name is one of the '='-joined names of r. */
static bool row_names(const struct row *r, const char *name)
{
    size_t len = strlen(name);
    for (const char *p = r->torch; *p;) {
        const char *eq = strchr(p, '=');
        size_t l = eq ? (size_t)(eq - p) : strlen(p);
        if (l == len && strncmp(p, name, len) == 0)
            return true;
        p += l + (eq != NULL);
    }
    return false;
}

/* A param row whose initializer holds the parameter itself, maybe transposed. */
static bool writable(const struct row *r)
{
    return !strcmp(r->kind, "param") &&
           (!strcmp(r->layout, "same") || !strcmp(r->layout, "transposed"));
}

/* Failures for one model folder (print_message each). */
static int check_folder(const char *txt)
{
    char model[4096];
    snprintf(model, sizeof(model), "%.*s/model.onnx", (int)(strrchr(txt, '/') - txt), txt);
    size_t n_rows, fails = 0, excused = 0;
    struct row *rows = read_rows(txt, &n_rows);
    struct gf_model *m;
    struct gf_weights *w;
    if (gf_model_load(model, NULL, &m) != GF_OK) {
        print_message("FAIL %s: %s\n", model, gf_last_error());
        free(rows);
        return 1;
    }
    assert_int_equal(gf_weights_map(m, &w), GF_OK);
    size_t n = gf_weights_count(w);
    for (size_t i = 0; i < n; i++) { /* every name written comes from a param row naming it */
        struct gf_weight_info wi;
        gf_weights_get(w, i, &wi);
        const struct row *r = NULL;
        for (size_t k = 0; k < n_rows && !r; k++)
            r = strcmp(rows[k].onnx, wi.onnx_name) == 0 ? &rows[k] : NULL;
        const char *why = !r ? "not listed" : strcmp(r->kind, "param") ? r->kind
                        : !writable(r) ? r->layout
                        : !row_names(r, wi.torch_name) ? "stands for other names"
                        : wi.transposed != (strcmp(r->layout, "transposed") == 0) ? "layout"
                        : NULL;
        if (why) {
            print_message("FAIL %s: wrote '%s' from '%s' (%s): %s (row: %s %s)\n", model,
                          wi.torch_name, wi.onnx_name, wi.transposed ? "transposed" : "same",
                          why, r ? r->torch : "-", r ? r->layout : "-");
            fails++;
        }
    }
    for (size_t k = 0; k < n_rows; k++) { /* every param row's names are written */
        if (!writable(&rows[k]))
            continue;
        for (const char *p = rows[k].torch; *p;) {
            size_t l = strcspn(p, "=");
            bool found = false;
            for (size_t i = 0; i < n && !found; i++) {
                struct gf_weight_info wi;
                gf_weights_get(w, i, &wi);
                found = strlen(wi.torch_name) == l && !strncmp(wi.torch_name, p, l);
            }
            /* excused: the exported program's parameter that no initializer holds,
             * when the row's initializer is written under another name (a zero
             * bias dropped, listed for its equal values; a tied name) */
            bool unread = false, other = false;
            for (size_t i = 0; i < gf_weights_unread_count(w); i++)
                unread |= strlen(gf_weights_get_unread(w, i)) == l &&
                          !strncmp(gf_weights_get_unread(w, i), p, l);
            for (size_t i = 0; i < n && unread; i++) {
                struct gf_weight_info wi;
                gf_weights_get(w, i, &wi);
                other |= strcmp(wi.onnx_name, rows[k].onnx) == 0;
            }
            if (!found && unread && other) {
                excused++;
            } else if (!found) {
                print_message("FAIL %s: '%.*s' (row %s) not written\n", model, (int)l, p,
                              rows[k].onnx);
                fails++;
            }
            p += l + (p[l] == '=');
        }
    }
    print_message("%-48s %3zu names, %2zu skipped, %2zu not in the graph: %s\n", model, n,
                  gf_weights_skipped_count(w), excused, fails ? "FAIL" : "ok");
    gf_weights_free(w);
    gf_model_free(m);
    free(rows);
    return (int)fails;
}

static void test_map_initializers_txt(void **state)
{
    (void)state;
    glob_t gl;
    int fails = 0;
    size_t bundled = 0;
    if (glob("models/*/*/initializers.txt", 0, NULL, &gl) == 0) {
        bundled = gl.gl_pathc;
        for (size_t i = 0; i < gl.gl_pathc; i++)
            fails += check_folder(gl.gl_pathv[i]);
        globfree(&gl);
    }
    if (glob("models/hf/*/*/initializers.txt", 0, NULL, &gl) == 0) {
        for (size_t i = 0; i < gl.gl_pathc; i++)
            fails += check_folder(gl.gl_pathv[i]);
        globfree(&gl);
    }
    if (bundled < 6)
        skip(); /* not run from the repository root */
    assert_int_equal(fails, 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_writer_format),
        cmocka_unit_test(test_writer_refuses),
        cmocka_unit_test(test_map_hand_built),
        cmocka_unit_test(test_map_initializers_txt),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
