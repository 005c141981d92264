/*
 * make bench: load / validate / save speed of a generated ~100 MB model,
 * next to protobuf-c's bare unpack of the same bytes, measured in the same
 * run (medians of several repeats).
 *
 *   bench_load DIR     writes DIR/bench100.onnx, then times
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "bench_util.h"
#include "gf_graph.h"
#include "onnx.pb-c.h"

#define REPEATS 7

/* A transformer-shaped graph: `layers` blocks of MatMul/Add/Mul/Softmax
 * over [batch, seq, hidden] with hidden x hidden weights. */
static struct gf_model *make_model(int layers, int hidden)
{
    struct gf_model *m = gf_model_new(8, "bench");
    gf_model_set_opset(m, "", 17);
    struct gf_graph *g = m->graph;
    struct gf_value *x = gf_graph_new_value(g, "x", NULL);
    struct gf_dim d[3] = {{-1, "batch", NULL}, {-1, "seq", NULL}, {hidden, NULL, NULL}};
    gf_value_set_tensor_type(x, GF_FLOAT, 3, d);
    gf_graph_add_input(g, x);
    int64_t wd[2] = {hidden, hidden}, bd[1] = {hidden};
    size_t n = (size_t)hidden * hidden;
    float *w = malloc(n * sizeof(float));
    for (size_t i = 0; i < n; i++)
        w[i] = (float)((i * 2654435761u) % 1000) / 1000.0f - 0.5f;
    char name[64];
    for (int l = 0; l < layers; l++) {
        for (int k = 0; k < 4; k++) {
            snprintf(name, sizeof(name), "layer%d.w%d", l, k);
            struct gf_value *W = gf_graph_add_initializer(
                g, name, gf_tensor_new(m, NULL, GF_FLOAT, 2, wd, w));
            snprintf(name, sizeof(name), "layer%d.b%d", l, k);
            struct gf_value *B = gf_graph_add_initializer(
                g, name, gf_tensor_new(m, NULL, GF_FLOAT, 1, bd, w));
            struct gf_value *mm = gf_graph_new_value(g, NULL, "mm");
            struct gf_value *ad = gf_graph_new_value(g, NULL, "add");
            struct gf_value *ac = gf_graph_new_value(g, NULL, "act");
            struct gf_value *in1[2] = {x, W}, *in2[2] = {mm, B};
            gf_graph_add_node(g, "MatMul", NULL, NULL, 2, in1, 1, &mm);
            gf_graph_add_node(g, "Add", NULL, NULL, 2, in2, 1, &ad);
            struct gf_node *sm = gf_graph_add_node(g, "Softmax", NULL, NULL, 1, &ad, 1, &ac);
            gf_node_set_attr_int(sm, "axis", -1);
            x = ac;
        }
    }
    gf_graph_add_output(g, x);
    free(w);
    return m;
}

static unsigned char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    *len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *buf = malloc(*len);
    if (fread(buf, 1, *len, f) != *len) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    return buf;
}

int main(int argc, char **argv)
{
    const char *dir = argc > 1 ? argv[1] : ".";
    mkdir(dir, 0755);
    char path[4096], out[4096];
    snprintf(path, sizeof(path), "%s/bench100.onnx", dir);
    snprintf(out, sizeof(out), "%s/bench100.saved.onnx", dir);
    struct gf_model *m = make_model(24, 512); /* 24 x 4 x 1 MiB weights */
    if (gf_model_save(m, path, NULL) != GF_OK) {
        fprintf(stderr, "bench_load: %s\n", gf_last_error());
        return 2;
    }
    gf_model_free(m);
    size_t len;
    unsigned char *buf = read_all(path, &len);
    if (!buf)
        return 2;
    double t_unpack[REPEATS], t_load[REPEATS], t_file[REPEATS], t_save[REPEATS];
    for (int r = 0; r < REPEATS; r++) {
        double t0 = bench_now_s();
        Onnx__ModelProto *mp = onnx__model_proto__unpack(NULL, len, buf);
        t_unpack[r] = bench_now_s() - t0;
        if (!mp)
            return 2;
        onnx__model_proto__free_unpacked(mp, NULL);

        t0 = bench_now_s();
        if (gf_model_load_buffer(buf, len, dir, NULL, &m) != GF_OK) {
            fprintf(stderr, "bench_load: %s\n", gf_last_error());
            return 2;
        }
        t_load[r] = bench_now_s() - t0;
        t0 = bench_now_s();
        gf_model_save(m, out, NULL);
        t_save[r] = bench_now_s() - t0;
        gf_model_free(m);

        t0 = bench_now_s();
        if (gf_model_load(path, NULL, &m) != GF_OK)
            return 2;
        t_file[r] = bench_now_s() - t0;
        gf_model_free(m);
    }
    double u = bench_median_upper(t_unpack, REPEATS), l = bench_median_upper(t_load, REPEATS);
    double fl = bench_median_upper(t_file, REPEATS), s = bench_median_upper(t_save, REPEATS);
    double mb = (double)len / 1e6;
    printf("model: %s, %.1f MB, 96 initializers, 288 nodes (median of %d)\n", path, mb,
           REPEATS);
    printf("%-44s %9s %9s %7s\n", "", "ms", "MB/s", "ratio");
    printf("%-44s %9.1f %9.0f %7.2f\n", "protobuf-c bare unpack (bytes in memory)", u * 1e3,
           mb / u, 1.0);
    printf("%-44s %9.1f %9.0f %7.2f\n", "graphfuse load + validate (bytes in memory)", l * 1e3,
           mb / l, l / u);
    printf("%-44s %9.1f %9.0f %7.2f\n", "graphfuse load + validate (from the file)", fl * 1e3,
           mb / fl, fl / u);
    printf("%-44s %9.1f %9.0f %7.2f\n", "graphfuse save (atomic, fsync)", s * 1e3, mb / s,
           s / u);
    printf("load + validate / bare unpack = %.2f (target < 2): %s\n", l / u,
           l / u < 2 ? "ok" : "OVER TARGET");
    free(buf);
    remove(out);
    return 0;
}
