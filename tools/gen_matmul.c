/*
 * gen_matmul — writes a one-node ONNX model Y = A @ B with symbolic dims,
 * A [M, K], B [K, N] and Y [M, N] in float, for `graphfuse tune` and
 * benchmarks (the Makefile builds build/models/matmul.onnx with it):
 *
 *     gen_matmul OUT.onnx
 *     graphfuse tune OUT.onnx --backend opencl --dim M=4096 --dim K=4096 --dim N=4096
 */
#include <stdio.h>

#include "gf_graph.h"

static struct gf_value *tensor(struct gf_graph *g, const char *name, const char *d0,
                               const char *d1)
{
    struct gf_value *v = gf_graph_new_value(g, name, NULL);
    struct gf_dim dims[2] = {{-1, d0, NULL}, {-1, d1, NULL}};
    if (v)
        gf_value_set_tensor_type(v, GF_FLOAT, 2, dims);
    return v;
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen_matmul OUT.onnx\n");
        return 2;
    }
    struct gf_model *m = gf_model_new(8, "matmul");
    struct gf_graph *g = m ? m->graph : NULL;
    struct gf_value *a = g ? tensor(g, "A", "M", "K") : NULL;
    struct gf_value *b = g ? tensor(g, "B", "K", "N") : NULL;
    struct gf_value *y = g ? tensor(g, "Y", "M", "N") : NULL;
    enum gf_status st = a && b && y ? GF_OK : GF_ERR_NOMEM;
    if (st == GF_OK)
        st = gf_model_set_opset(m, "", 17);
    if (st == GF_OK && !gf_graph_add_node(g, "MatMul", NULL, "matmul", 2,
                                          (struct gf_value *[]){a, b}, 1, &y))
        st = GF_ERR_NOMEM;
    if (st == GF_OK && (st = gf_graph_add_input(g, a)) == GF_OK &&
        (st = gf_graph_add_input(g, b)) == GF_OK && (st = gf_graph_add_output(g, y)) == GF_OK)
        st = gf_model_save(m, argv[1], NULL);
    if (st != GF_OK)
        fprintf(stderr, "gen_matmul: %s\n", gf_last_error());
    gf_model_free(m);
    return st == GF_OK ? 0 : 1;
}
