/*
 * gen_bad.c — writes the malformed-model corpus of tests/bad/.
 *
 *     build/tests/gen_bad tests/bad       (make bad-corpus)
 *
 * Each case starts from a small valid model built with protobuf-c structs
 * and breaks one thing, or writes raw wire bytes for damage protobuf-c
 * could not produce itself.  tests/bad/expected.tsv holds, per file, the
 * exit code and the part of the message `graphfuse info` must print;
 * tests/run_bad.sh checks them.  Besides the models it writes
 * weights.bin (16 bytes of external data) and the symlink escape_link.
 */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "onnx.pb-c.h"

/* ---- allocation: everything of one case lives in a pool freed after it -- */

static void **pool;
static size_t n_pool, cap_pool;

static void *new0(size_t size)
{
    void *p = calloc(1, size ? size : 1);
    if (!p || (n_pool == cap_pool &&
               !(pool = realloc(pool, (cap_pool = cap_pool * 2 + 64) * sizeof(*pool))))) {
        fprintf(stderr, "gen_bad: out of memory\n");
        exit(1);
    }
    pool[n_pool++] = p;
    return p;
}

static void pool_free(void)
{
    for (size_t i = 0; i < n_pool; i++)
        free(pool[i]);
    n_pool = 0;
}

/* protobuf-c wants `char *`; the strings are never written through. */
static char *S(const char *s)
{
    size_t n = strlen(s);
    char *p = new0(n + 1);
    memcpy(p, s, n);
    return p;
}

/* Appends `item` to the protobuf-c array `arr` of count `n`; the capacity
 * doubles at each power of two, so the old copies left in the pool stay O(n). */
#define PUSH(n, arr, item)                                             \
    do {                                                               \
        if (((n) & ((n) - 1)) == 0) {                                  \
            void *grown_ = new0(((n) ? 2 * (n) : 1) * sizeof(*(arr))); \
            if (n)                                                     \
                memcpy(grown_, (arr), (n) * sizeof(*(arr)));           \
            (arr) = grown_;                                            \
        }                                                              \
        (arr)[(n)++] = (item);                                         \
    } while (0)

/* An int64 list literal: count, pointer. */
#define I64S(...) (sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)), (int64_t[]){__VA_ARGS__}

#define NEW(type, init) (memcpy(new0(sizeof(type)), &(type)init, sizeof(type)))

/* ---- builders ------------------------------------------------------------- */

enum { T_FLOAT = 1, T_STRING = 8, T_BOOL = 9 };

/* Splits "a,b,c" into a string array; "" gives zero entries. */
static size_t split(const char *list, char ***out)
{
    size_t n = 0;
    *out = NULL;
    for (const char *p = list; *p;) {
        size_t k = strcspn(p, ",");
        char *s = new0(k + 1);
        memcpy(s, p, k);
        PUSH(n, *out, s);
        p += k + (p[k] == ',');
    }
    return n;
}

/* A tensor type: elem_type and dims (rank 0: a scalar). */
static Onnx__TypeProto *tensor_type(int elem, size_t rank, const int64_t *dims)
{
    Onnx__TypeProto *tp = NEW(Onnx__TypeProto, ONNX__TYPE_PROTO__INIT);
    Onnx__TypeProto__Tensor *tt = NEW(Onnx__TypeProto__Tensor, ONNX__TYPE_PROTO__TENSOR__INIT);
    tt->has_elem_type = 1;
    tt->elem_type = elem;
    tt->shape = NEW(Onnx__TensorShapeProto, ONNX__TENSOR_SHAPE_PROTO__INIT);
    for (size_t i = 0; i < rank; i++) {
        Onnx__TensorShapeProto__Dimension *d =
            NEW(Onnx__TensorShapeProto__Dimension, ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT);
        d->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
        d->dim_value = dims[i];
        PUSH(tt->shape->n_dim, tt->shape->dim, d);
    }
    tp->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
    tp->tensor_type = tt;
    return tp;
}

static Onnx__ValueInfoProto *value(const char *name, Onnx__TypeProto *type)
{
    Onnx__ValueInfoProto *vi = NEW(Onnx__ValueInfoProto, ONNX__VALUE_INFO_PROTO__INIT);
    vi->name = name ? S(name) : NULL;
    vi->type = type;
    return vi;
}

/* float[2] value. */
static Onnx__ValueInfoProto *fvalue(const char *name)
{
    return value(name, tensor_type(T_FLOAT, I64S(2)));
}

/* A node: inputs and outputs as comma-separated lists. */
static Onnx__NodeProto *node(const char *op, const char *name, const char *ins,
                             const char *outs)
{
    Onnx__NodeProto *n = NEW(Onnx__NodeProto, ONNX__NODE_PROTO__INIT);
    n->op_type = op ? S(op) : NULL;
    n->name = name ? S(name) : NULL;
    n->n_input = split(ins, &n->input);
    n->n_output = split(outs, &n->output);
    return n;
}

static Onnx__AttributeProto *attr(const char *name, int type)
{
    Onnx__AttributeProto *a = NEW(Onnx__AttributeProto, ONNX__ATTRIBUTE_PROTO__INIT);
    a->name = name ? S(name) : NULL;
    a->has_type = type != 0;
    a->type = (Onnx__AttributeProto__AttributeType)type;
    return a;
}

static Onnx__AttributeProto *attr_float(const char *name, float f)
{
    Onnx__AttributeProto *a = attr(name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    a->has_f = 1;
    a->f = f;
    return a;
}

static Onnx__AttributeProto *attr_graph(const char *name, Onnx__GraphProto *g)
{
    Onnx__AttributeProto *a = attr(name, ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH);
    a->g = g;
    return a;
}

static Onnx__TensorProto *tensor(const char *name, int dtype, size_t rank, const int64_t *dims)
{
    Onnx__TensorProto *t = NEW(Onnx__TensorProto, ONNX__TENSOR_PROTO__INIT);
    t->name = name ? S(name) : NULL;
    t->has_data_type = dtype != 0;
    t->data_type = dtype;
    t->n_dims = rank;
    t->dims = new0(rank * sizeof(int64_t));
    if (rank)
        memcpy(t->dims, dims, rank * sizeof(int64_t));
    return t;
}

static void set_raw(Onnx__TensorProto *t, const void *data, size_t len)
{
    t->has_raw_data = 1;
    t->raw_data.len = len;
    t->raw_data.data = new0(len);
    memcpy(t->raw_data.data, data, len);
}

static void set_floats(Onnx__TensorProto *t, size_t n, const float *v)
{
    t->n_float_data = n;
    t->float_data = new0(n * sizeof(float));
    memcpy(t->float_data, v, n * sizeof(float));
}

/* float[2] tensor with valid raw data. */
static Onnx__TensorProto *ftensor(const char *name)
{
    Onnx__TensorProto *t = tensor(name, T_FLOAT, I64S(2));
    set_raw(t, (float[]){1.0f, 2.0f}, 8);
    return t;
}

/* Adds the external_data entry key=value to `t`. */
static void ext_entry(Onnx__TensorProto *t, const char *key, const char *value)
{
    Onnx__StringStringEntryProto *e =
        NEW(Onnx__StringStringEntryProto, ONNX__STRING_STRING_ENTRY_PROTO__INIT);
    e->key = S(key);
    e->value = S(value);
    PUSH(t->n_external_data, t->external_data, e);
}

static Onnx__OperatorSetIdProto *opset(const char *domain, int64_t version)
{
    Onnx__OperatorSetIdProto *o =
        NEW(Onnx__OperatorSetIdProto, ONNX__OPERATOR_SET_ID_PROTO__INIT);
    o->domain = S(domain);
    o->has_version = 1;
    o->version = version;
    return o;
}

static Onnx__GraphProto *graph(const char *name)
{
    Onnx__GraphProto *g = NEW(Onnx__GraphProto, ONNX__GRAPH_PROTO__INIT);
    g->name = name ? S(name) : NULL;
    return g;
}

/* IR 8, opset ai.onnx 17, the given graph. */
static Onnx__ModelProto *model(Onnx__GraphProto *g)
{
    Onnx__ModelProto *m = NEW(Onnx__ModelProto, ONNX__MODEL_PROTO__INIT);
    m->has_ir_version = 1;
    m->ir_version = 8;
    m->producer_name = S("gen_bad");
    PUSH(m->n_opset_import, m->opset_import, opset("", 17));
    m->graph = g;
    return m;
}

/* The base model: x: float[2] -> Relu 'relu0' -> y. */
static Onnx__ModelProto *base(void)
{
    Onnx__GraphProto *g = graph("g");
    PUSH(g->n_input, g->input, fvalue("x"));
    PUSH(g->n_node, g->node, node("Relu", "relu0", "x", "y"));
    PUSH(g->n_output, g->output, fvalue("y"));
    return model(g);
}

/* x + w -> y, with initializer `w` (the tensor under test). */
static Onnx__ModelProto *with_init(Onnx__TensorProto *w)
{
    Onnx__GraphProto *g = graph("g");
    PUSH(g->n_input, g->input, fvalue("x"));
    PUSH(g->n_initializer, g->initializer, w);
    PUSH(g->n_node, g->node, node("Add", "add0", "x,w", "y"));
    PUSH(g->n_output, g->output, fvalue("y"));
    return model(g);
}

/* Base model whose Relu carries attribute `a`. */
static Onnx__ModelProto *with_attr(Onnx__AttributeProto *a)
{
    Onnx__ModelProto *m = base();
    PUSH(m->graph->node[0]->n_attribute, m->graph->node[0]->attribute, a);
    return m;
}

/* Model whose main graph is `cond: bool -> If 'if0' -> r`; both branches are
 * `sub` (so only the case's own defect is wrong). */
static Onnx__ModelProto *with_if(Onnx__GraphProto *sub)
{
    Onnx__GraphProto *g = graph("g");
    PUSH(g->n_input, g->input, value("cond", tensor_type(T_BOOL, 0, NULL)));
    Onnx__NodeProto *n = node("If", "if0", "cond", "r");
    PUSH(n->n_attribute, n->attribute, attr_graph("then_branch", sub));
    PUSH(n->n_attribute, n->attribute, attr_graph("else_branch", sub));
    PUSH(g->n_node, g->node, n);
    PUSH(g->n_output, g->output, value("r", NULL));
    return model(g);
}

/* A chain of `levels` nested If subgraphs below the main graph. */
static Onnx__ModelProto *if_chain(int levels)
{
    Onnx__GraphProto *inner = graph("g_last");
    for (int k = levels - 1; k >= 1; k--) {
        char gname[32], nname[32], out[32];
        snprintf(gname, sizeof(gname), "g%d", k);
        snprintf(nname, sizeof(nname), "if%d", k);
        snprintf(out, sizeof(out), "r%d", k);
        Onnx__GraphProto *g = graph(gname);
        Onnx__NodeProto *n = node("If", nname, "cond", out);
        PUSH(n->n_attribute, n->attribute, attr_graph("then_branch", inner));
        PUSH(n->n_attribute, n->attribute, attr_graph("else_branch", graph("empty")));
        PUSH(g->n_node, g->node, n);
        inner = g;
    }
    return with_if(inner);
}

/* ---- raw wire bytes ----------------------------------------------------- */

enum { W_VARINT = 0, W_I64 = 1, W_LEN = 2, W_SGROUP = 3, W_I32 = 5 };

struct buf {
    uint8_t *p;
    size_t n, cap;
};

static void put(struct buf *b, const void *data, size_t len)
{
    if (b->n + len > b->cap) {
        b->cap = (b->n + len) * 2 + 64;
        uint8_t *p = new0(b->cap);
        if (b->n)
            memcpy(p, b->p, b->n);
        b->p = p;
    }
    if (len)
        memcpy(b->p + b->n, data, len);
    b->n += len;
}

static void put_varint(struct buf *b, uint64_t v)
{
    do {
        uint8_t c = (uint8_t)((v & 0x7f) | (v > 0x7f ? 0x80 : 0));
        put(b, &c, 1);
        v >>= 7;
    } while (v);
}

static void put_key(struct buf *b, unsigned field, int wire)
{
    put_varint(b, (uint64_t)field << 3 | (unsigned)wire);
}

/* A length-delimited field holding `inner`. */
static void put_len(struct buf *b, unsigned field, const struct buf *inner)
{
    put_key(b, field, W_LEN);
    put_varint(b, inner->n);
    put(b, inner->p, inner->n);
}

static void put_model(struct buf *b, const Onnx__ModelProto *m)
{
    size_t n = onnx__model_proto__get_packed_size(m);
    uint8_t *p = new0(n);
    onnx__model_proto__pack(m, p);
    put(b, p, n);
}

/* ir_version 8 and opset_import { version 17 }: a valid model prefix. */
static void put_header(struct buf *b)
{
    Onnx__ModelProto m = ONNX__MODEL_PROTO__INIT;
    Onnx__OperatorSetIdProto *op = opset("", 17);
    m.has_ir_version = 1;
    m.ir_version = 8;
    m.n_opset_import = 1;
    m.opset_import = &op;
    put_model(b, &m);
}

/* ---- the cases: wire level ------------------------------------------------ */

/* An empty file. */
static void raw_empty(struct buf *b) { (void)b; }

/* 256 bytes of pseudo-random garbage (fixed seed). */
static void raw_garbage(struct buf *b)
{
    uint32_t s = 0x2545f491u;
    for (int i = 0; i < 256; i++) {
        s = s * 1664525u + 1013904223u;
        uint8_t c = (uint8_t)(s >> 24);
        put(b, &c, 1);
    }
}

/* A JSON text file given as a model. */
static void raw_json(struct buf *b)
{
    const char *s = "{\"ir_version\": 8, \"graph\": {}}\n";
    put(b, s, strlen(s));
}

/* The base model cut in half, inside the graph field. */
static void raw_truncated_half(struct buf *b)
{
    put_model(b, base());
    b->n /= 2;
}

/* A valid model followed by ir_version whose varint stops mid-way. */
static void raw_truncated_varint(struct buf *b)
{
    put_model(b, base());
    put(b, (uint8_t[]){0x08, 0x96}, 2);
}

/* A valid model followed by half a field key. */
static void raw_truncated_key(struct buf *b)
{
    put_model(b, base());
    put(b, (uint8_t[]){0x80}, 1);
}

/* ModelProto.graph (a message) sent as a varint. */
static void raw_graph_as_varint(struct buf *b)
{
    put_header(b);
    put_key(b, 7, W_VARINT);
    put_varint(b, 1);
}

/* graph.node.op_type (a string) sent as a varint, three levels down. */
static void raw_nested_wrong_wire(struct buf *b)
{
    struct buf nd = {0}, g = {0};
    put_key(&nd, 4, W_VARINT);
    put_varint(&nd, 1);
    put_len(&g, 1, &nd);
    put_header(b);
    put_len(b, 7, &g);
}

/* graph declaring 2^40 bytes. */
static void raw_huge_length(struct buf *b)
{
    put_header(b);
    put_key(b, 7, W_LEN);
    put_varint(b, (uint64_t)1 << 40);
    put(b, "\x0a\x00", 2);
}

/* graph declaring length -1 (ten-byte varint). */
static void raw_negative_length(struct buf *b)
{
    put_header(b);
    put_key(b, 7, W_LEN);
    put_varint(b, UINT64_MAX);
}

/* ir_version as an 11-byte varint. */
static void raw_varint_too_long(struct buf *b)
{
    put_key(b, 1, W_VARINT);
    for (int i = 0; i < 10; i++)
        put(b, "\xff", 1);
    put(b, "\x01", 1);
}

/* An unknown field (100) with the deprecated group wire type. */
static void raw_group(struct buf *b)
{
    put_header(b);
    put_key(b, 100, W_SGROUP);
    put_key(b, 100, 4);
}

/* An unknown field with wire type 7, which does not exist. */
static void raw_wire_type_7(struct buf *b)
{
    put_header(b);
    put_key(b, 100, 7);
    put_varint(b, 0);
}

/* A field key with number 0. */
static void raw_field_zero(struct buf *b)
{
    put_header(b);
    put_key(b, 0, W_VARINT);
    put_varint(b, 1);
}

/* An initializer whose packed dims end in an unterminated varint. */
static void raw_packed_bad_varint(struct buf *b)
{
    struct buf t = {0}, g = {0};
    put_key(&t, 1, W_LEN); /* dims, packed */
    put_varint(&t, 2);
    put(&t, "\xff\xff", 2);
    put_key(&t, 2, W_VARINT); /* data_type float */
    put_varint(&t, 1);
    put_len(&g, 5, &t); /* graph.initializer */
    put_header(b);
    put_len(b, 7, &g);
}

/* An initializer whose packed float_data is 7 bytes (not a multiple of 4). */
static void raw_packed_bad_fixed32(struct buf *b)
{
    struct buf t = {0}, g = {0};
    put_key(&t, 2, W_VARINT);
    put_varint(&t, 1);
    put_key(&t, 4, W_LEN); /* float_data, packed */
    put_varint(&t, 7);
    put(&t, "\0\0\x80\x3f\0\0\x80", 7);
    put_len(&g, 5, &t);
    put_header(b);
    put_len(b, 7, &g);
}

/* A valid TensorProto file (as in ONNX test data) given as a model. */
static void raw_tensor_as_model(struct buf *b)
{
    Onnx__TensorProto *t = tensor("t", T_FLOAT, I64S(2));
    set_floats(t, 2, (float[]){1.0f, 2.0f});
    size_t n = onnx__tensor_proto__get_packed_size(t);
    uint8_t *p = new0(n);
    onnx__tensor_proto__pack(t, p);
    put(b, p, n);
}

/* ---- the cases: model structure ---------------------------------------------- */

/* No graph at all. */
static Onnx__ModelProto *no_graph(void)
{
    Onnx__ModelProto *m = base();
    m->graph = NULL;
    return m;
}

/* No ir_version. */
static Onnx__ModelProto *no_ir_version(void)
{
    Onnx__ModelProto *m = base();
    m->has_ir_version = 0;
    return m;
}

/* ir_version -1. */
static Onnx__ModelProto *negative_ir_version(void)
{
    Onnx__ModelProto *m = base();
    m->ir_version = -1;
    return m;
}

/* No opset_import. */
static Onnx__ModelProto *no_opset_import(void)
{
    Onnx__ModelProto *m = base();
    m->n_opset_import = 0;
    return m;
}

/* opset_import lists ai.onnx ("") twice, versions 17 and 13. */
static Onnx__ModelProto *opset_twice(void)
{
    Onnx__ModelProto *m = base();
    PUSH(m->n_opset_import, m->opset_import, opset("", 13));
    return m;
}

/* opset_import lists ai.onnx twice, once as "" and once as "ai.onnx". */
static Onnx__ModelProto *opset_alias(void)
{
    Onnx__ModelProto *m = base();
    PUSH(m->n_opset_import, m->opset_import, opset("ai.onnx", 13));
    return m;
}

/* The ai.onnx opset_import entry has no version. */
static Onnx__ModelProto *opset_no_version(void)
{
    Onnx__ModelProto *m = base();
    m->opset_import[0]->has_version = 0;
    m->opset_import[0]->version = 0;
    return m;
}

/* A model-local function without a name. */
static Onnx__ModelProto *function_no_name(void)
{
    Onnx__ModelProto *m = base();
    Onnx__FunctionProto *f = NEW(Onnx__FunctionProto, ONNX__FUNCTION_PROTO__INIT);
    f->domain = S("local");
    PUSH(m->n_functions, m->functions, f);
    return m;
}

/* A function whose body reads a name it never defines. */
static Onnx__ModelProto *function_dangling(void)
{
    Onnx__ModelProto *m = base();
    Onnx__FunctionProto *f = NEW(Onnx__FunctionProto, ONNX__FUNCTION_PROTO__INIT);
    f->name = S("MyRelu");
    f->domain = S("local");
    f->n_input = split("a", &f->input);
    f->n_output = split("b", &f->output);
    PUSH(f->n_node, f->node, node("Relu", "inner", "nowhere", "b"));
    PUSH(f->n_opset_import, f->opset_import, opset("", 17));
    PUSH(m->n_functions, m->functions, f);
    return m;
}

/* A function F whose body calls F (recursion is not allowed). */
static Onnx__ModelProto *function_recursive(void)
{
    Onnx__ModelProto *m = base();
    Onnx__FunctionProto *f = NEW(Onnx__FunctionProto, ONNX__FUNCTION_PROTO__INIT);
    f->name = S("F");
    f->domain = S("local");
    f->n_input = split("a", &f->input);
    f->n_output = split("b", &f->output);
    Onnx__NodeProto *call = node("F", "again", "a", "b");
    call->domain = S("local");
    PUSH(f->n_node, f->node, call);
    PUSH(f->n_opset_import, f->opset_import, opset("local", 1));
    PUSH(m->n_functions, m->functions, f);
    PUSH(m->n_opset_import, m->opset_import, opset("local", 1));
    m->graph->node[0]->op_type = S("F");
    m->graph->node[0]->domain = S("local");
    return m;
}

/* ---- the cases: graph structure ------------------------------------------------ */

/* A node reads a name nothing defines. */
static Onnx__ModelProto *dangling_input(void)
{
    Onnx__ModelProto *m = base();
    m->graph->node[0]->input[0] = S("nowhere");
    return m;
}

/* Two nodes feed each other: a: y -> z, b: z -> y. */
static Onnx__ModelProto *cycle(void)
{
    Onnx__GraphProto *g = graph("g");
    PUSH(g->n_input, g->input, fvalue("x"));
    PUSH(g->n_node, g->node, node("Relu", "a", "y", "z"));
    PUSH(g->n_node, g->node, node("Relu", "b", "z", "y"));
    PUSH(g->n_output, g->output, fvalue("z"));
    return model(g);
}

/* A node reads its own output. */
static Onnx__ModelProto *self_loop(void)
{
    Onnx__ModelProto *m = base();
    m->graph->node[0]->input[0] = S("y");
    return m;
}

/* A cycle closed through a subgraph's outer-scope read:
 * If 'if0' -> r -> Relu 'after' -> s, and the then_branch reads s. */
static Onnx__ModelProto *cycle_through_subgraph(void)
{
    Onnx__GraphProto *sub = graph("then");
    PUSH(sub->n_node, sub->node, node("Identity", "inner", "s", "t"));
    PUSH(sub->n_output, sub->output, value("t", NULL));
    Onnx__ModelProto *m = with_if(sub);
    PUSH(m->graph->n_node, m->graph->node, node("Relu", "after", "r", "s"));
    return m;
}

/* Two nodes write the same output. */
static Onnx__ModelProto *duplicate_producer(void)
{
    Onnx__ModelProto *m = base();
    PUSH(m->graph->n_node, m->graph->node, node("Sigmoid", "sig0", "x", "y"));
    return m;
}

/* A node output overwrites the graph input 'x'. */
static Onnx__ModelProto *output_redefines_input(void)
{
    Onnx__ModelProto *m = base();
    PUSH(m->graph->n_node, m->graph->node, node("Neg", "neg0", "y", "x"));
    return m;
}

/* Initializer 'w' listed twice. */
static Onnx__ModelProto *initializer_twice(void)
{
    Onnx__ModelProto *m = with_init(ftensor("w"));
    PUSH(m->graph->n_initializer, m->graph->initializer, ftensor("w"));
    return m;
}

/* Graph input 'x' listed twice. */
static Onnx__ModelProto *input_twice(void)
{
    Onnx__ModelProto *m = base();
    PUSH(m->graph->n_input, m->graph->input, fvalue("x"));
    return m;
}

/* A graph input without a name. */
static Onnx__ModelProto *input_no_name(void)
{
    Onnx__ModelProto *m = base();
    PUSH(m->graph->n_input, m->graph->input, fvalue(NULL));
    return m;
}

/* A graph output without a name. */
static Onnx__ModelProto *output_no_name(void)
{
    Onnx__ModelProto *m = base();
    PUSH(m->graph->n_output, m->graph->output, fvalue(NULL));
    return m;
}

/* A graph output nothing produces. */
static Onnx__ModelProto *output_not_produced(void)
{
    Onnx__ModelProto *m = base();
    PUSH(m->graph->n_output, m->graph->output, fvalue("ghost"));
    return m;
}

/* A node without op_type. */
static Onnx__ModelProto *node_no_op_type(void)
{
    Onnx__ModelProto *m = base();
    m->graph->node[0]->op_type = NULL;
    return m;
}

/* A node in domain 'com.example', which no opset_import names. */
static Onnx__ModelProto *domain_not_imported(void)
{
    Onnx__ModelProto *m = base();
    m->graph->node[0]->op_type = S("Gelu");
    m->graph->node[0]->domain = S("com.example");
    return m;
}

/* A graph input of rank 65. */
static Onnx__ModelProto *input_rank_65(void)
{
    Onnx__ModelProto *m = base();
    int64_t dims[65];
    for (int i = 0; i < 65; i++)
        dims[i] = 1;
    m->graph->input[0]->type = tensor_type(T_FLOAT, 65, dims);
    return m;
}

/* A graph input with element type 99 (no ONNX type has that number). */
static Onnx__ModelProto *input_unknown_elem_type(void)
{
    Onnx__ModelProto *m = base();
    m->graph->input[0]->type = tensor_type(99, I64S(2));
    return m;
}

/* A graph input type nesting sequence_type 1000 deep. */
static Onnx__ModelProto *deep_type_nesting(void)
{
    Onnx__TypeProto *t = tensor_type(T_FLOAT, I64S(2));
    for (int i = 0; i < 1000; i++) {
        Onnx__TypeProto__Sequence *s =
            NEW(Onnx__TypeProto__Sequence, ONNX__TYPE_PROTO__SEQUENCE__INIT);
        s->elem_type = t;
        t = NEW(Onnx__TypeProto, ONNX__TYPE_PROTO__INIT);
        t->value_case = ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE;
        t->sequence_type = s;
    }
    Onnx__ModelProto *m = base();
    PUSH(m->graph->n_input, m->graph->input, value("seq", t));
    return m;
}

/* 33 nested If subgraphs: one over the default limit of 32. */
static Onnx__ModelProto *deep_if_33(void) { return if_chain(33); }

/* 40 nested If subgraphs: deep enough for the wire check to stop it. */
static Onnx__ModelProto *deep_if_40(void) { return if_chain(40); }

/* A then_branch reading a name defined nowhere. */
static Onnx__ModelProto *subgraph_dangling(void)
{
    Onnx__GraphProto *sub = graph("then");
    PUSH(sub->n_node, sub->node, node("Identity", "inner", "nowhere", "t"));
    PUSH(sub->n_output, sub->output, value("t", NULL));
    return with_if(sub);
}

/* A then_branch node output redefines the outer graph input 'x'. */
static Onnx__ModelProto *subgraph_shadow(void)
{
    Onnx__GraphProto *sub = graph("then");
    PUSH(sub->n_node, sub->node, node("Not", "inner", "cond", "x"));
    PUSH(sub->n_output, sub->output, value("x", NULL));
    Onnx__ModelProto *m = with_if(sub);
    PUSH(m->graph->n_input, m->graph->input, fvalue("x"));
    return m;
}

/* An If without its branch attributes. */
static Onnx__ModelProto *if_no_branch(void)
{
    Onnx__ModelProto *m = with_if(graph("then"));
    m->graph->node[0]->n_attribute = 0;
    return m;
}

/* Relu with three inputs (it takes one). */
static Onnx__ModelProto *node_arity(void)
{
    Onnx__ModelProto *m = base();
    m->graph->node[0]->n_input = split("x,x,x", &m->graph->node[0]->input);
    return m;
}

/* value_info lists 'y' twice, with different types. */
static Onnx__ModelProto *value_info_twice(void)
{
    Onnx__ModelProto *m = base();
    PUSH(m->graph->n_value_info, m->graph->value_info, fvalue("y"));
    PUSH(m->graph->n_value_info, m->graph->value_info, value("y", tensor_type(7, I64S(9))));
    return m;
}

/* A node input whose name holds a newline: the message must stay one line. */
static Onnx__ModelProto *name_newline(void)
{
    Onnx__ModelProto *m = base();
    m->graph->node[0]->input[0] = S("bad\nname");
    return m;
}

/* A sparse initializer with no values (hence no name). */
static Onnx__ModelProto *sparse_no_values(void)
{
    Onnx__ModelProto *m = base();
    Onnx__SparseTensorProto *sp = NEW(Onnx__SparseTensorProto, ONNX__SPARSE_TENSOR_PROTO__INIT);
    PUSH(m->graph->n_sparse_initializer, m->graph->sparse_initializer, sp);
    return m;
}

/* ---- the cases: attributes ---------------------------------------------------- */

/* Declared INT, but only `f` is set. */
static Onnx__ModelProto *attr_int_holds_float(void)
{
    Onnx__AttributeProto *a = attr_float("alpha", 0.5f);
    a->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    return with_attr(a);
}

/* Both `f` and `i` set. */
static Onnx__ModelProto *attr_two_values(void)
{
    Onnx__AttributeProto *a = attr_float("alpha", 0.5f);
    a->has_i = 1;
    a->i = 3;
    return with_attr(a);
}

/* Declared FLOAT with no value at all. */
static Onnx__ModelProto *attr_no_value(void)
{
    return with_attr(attr("alpha", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT));
}

/* An attribute without a name. */
static Onnx__ModelProto *attr_no_name(void) { return with_attr(attr_float(NULL, 0.5f)); }

/* An attribute without a type. */
static Onnx__ModelProto *attr_no_type(void)
{
    Onnx__AttributeProto *a = attr_float("alpha", 0.5f);
    a->has_type = 0;
    return with_attr(a);
}

/* Attribute type 99. */
static Onnx__ModelProto *attr_unknown_type(void)
{
    Onnx__AttributeProto *a = attr_float("alpha", 0.5f);
    a->type = (Onnx__AttributeProto__AttributeType)99;
    return with_attr(a);
}

/* ref_attr_name (for function bodies only) in the main graph. */
static Onnx__ModelProto *attr_ref_in_main(void)
{
    Onnx__AttributeProto *a = attr("alpha", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT);
    a->ref_attr_name = S("outer");
    return with_attr(a);
}

/* The same attribute name twice on one node. */
static Onnx__ModelProto *attr_duplicate(void)
{
    Onnx__ModelProto *m = with_attr(attr_float("alpha", 0.5f));
    Onnx__NodeProto *n = m->graph->node[0];
    PUSH(n->n_attribute, n->attribute, attr_float("alpha", 0.25f));
    return m;
}

/* A Constant whose tensor attribute has too little raw_data. */
static Onnx__ModelProto *attr_tensor_bad(void)
{
    Onnx__TensorProto *t = tensor("value", T_FLOAT, I64S(4));
    set_raw(t, (float[]){1.0f}, 4);
    Onnx__AttributeProto *a = attr("value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
    a->t = t;
    Onnx__ModelProto *m = base();
    Onnx__NodeProto *n = node("Constant", "const0", "", "c");
    PUSH(n->n_attribute, n->attribute, a);
    PUSH(m->graph->n_node, m->graph->node, n);
    return m;
}

/* ---- the cases: tensors --------------------------------------------------------- */

/* An initializer without data_type. */
static Onnx__ModelProto *tensor_no_data_type(void)
{
    Onnx__TensorProto *t = ftensor("w");
    t->has_data_type = 0;
    return with_init(t);
}

/* An initializer with data_type 99. */
static Onnx__ModelProto *tensor_unknown_data_type(void)
{
    Onnx__TensorProto *t = ftensor("w");
    t->data_type = 99;
    return with_init(t);
}

/* float[2] with 4 bytes of raw_data. */
static Onnx__ModelProto *raw_data_short(void)
{
    Onnx__TensorProto *t = tensor("w", T_FLOAT, I64S(2));
    set_raw(t, (float[]){1.0f}, 4);
    return with_init(t);
}

/* float[2, 2] with 3 float_data values. */
static Onnx__ModelProto *float_data_count(void)
{
    Onnx__TensorProto *t = tensor("w", T_FLOAT, I64S(2, 2));
    set_floats(t, 3, (float[]){1.0f, 2.0f, 3.0f});
    return with_init(t);
}

/* Both raw_data and float_data. */
static Onnx__ModelProto *two_data_fields(void)
{
    Onnx__TensorProto *t = ftensor("w");
    set_floats(t, 2, (float[]){1.0f, 2.0f});
    return with_init(t);
}

/* dims [2, -3]. */
static Onnx__ModelProto *negative_dim(void)
{
    return with_init(tensor("w", T_FLOAT, I64S(2, -3)));
}

/* dims [2^32, 2^32]: the element count overflows int64. */
static Onnx__ModelProto *dims_overflow(void)
{
    return with_init(tensor("w", T_FLOAT, I64S(INT64_C(1) << 32, INT64_C(1) << 32)));
}

/* dims [2^62] of complex128: fits int64, but not in bytes. */
static Onnx__ModelProto *dims_bytes_overflow(void)
{
    return with_init(tensor("w", 15, I64S(INT64_C(1) << 62)));
}

/* ---- sizes: outputs whose element or byte count overflows ------------- */

enum { T_INT64 = 7, T_DOUBLE = 11 };

/* An int64 initializer of the given dims and values. */
static Onnx__TensorProto *i64_init(const char *name, size_t rank, const int64_t *dims,
                                   size_t n, const int64_t *v)
{
    Onnx__TensorProto *t = tensor(name, T_INT64, rank, dims);
    set_raw(t, v, n * sizeof(int64_t));
    return t;
}

/* A graph of one node `n` whose output y is the graph output, and the
 * initializers it reads. */
static Onnx__ModelProto *one_node(Onnx__NodeProto *n, Onnx__TensorProto *a,
                                  Onnx__TensorProto *b, Onnx__TensorProto *c)
{
    Onnx__GraphProto *g = graph("g");
    Onnx__TensorProto *inits[3] = {a, b, c};
    for (int i = 0; i < 3; i++)
        if (inits[i])
            PUSH(g->n_initializer, g->initializer, inits[i]);
    PUSH(g->n_node, g->node, n);
    PUSH(g->n_output, g->output, value("y", NULL));
    return model(g);
}

/* ConstantOfShape 'cos0' of shape s (int64[n]) and value `value` (or none). */
static Onnx__ModelProto *cos_model(size_t n, const int64_t *s, Onnx__TensorProto *value)
{
    Onnx__NodeProto *nd = node("ConstantOfShape", "cos0", "s", "y");
    if (value) {
        Onnx__AttributeProto *a = attr("value", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR);
        a->t = value;
        PUSH(nd->n_attribute, nd->attribute, a);
    }
    return one_node(nd, i64_init("s", 1, (int64_t[]){(int64_t)n}, n, s), NULL, NULL);
}

/* ConstantOfShape [2^62] of float: 2^64 bytes wrap to 0 in size_t. */
static Onnx__ModelProto *cos_float_2_62(void)
{
    return cos_model(I64S(INT64_C(1) << 62), NULL);
}

/* ConstantOfShape [2^61] of int64 (value attribute). */
static Onnx__ModelProto *cos_int64_2_61(void)
{
    return cos_model(I64S(INT64_C(1) << 61), i64_init("v", I64S(1), I64S(7)));
}

/* ConstantOfShape [2^61 + 1] of double (value attribute). */
static Onnx__ModelProto *cos_double_2_61(void)
{
    Onnx__TensorProto *v = tensor("v", T_DOUBLE, I64S(1));
    set_raw(v, (double[]){1.0}, sizeof(double));
    return cos_model(I64S((INT64_C(1) << 61) + 1), v);
}

/* ConstantOfShape [2^32, 2^32, 2^32]: the element count overflows int64. */
static Onnx__ModelProto *cos_elements(void)
{
    int64_t d = INT64_C(1) << 32;
    return cos_model(I64S(d, d, d), NULL);
}

/* Range(0, 2^62, 1) of int64. */
static Onnx__ModelProto *range_2_62(void)
{
    return one_node(node("Range", "range0", "a,b,d", "y"), i64_init("a", 0, NULL, I64S(0)),
                    i64_init("b", 0, NULL, I64S(INT64_C(1) << 62)),
                    i64_init("d", 0, NULL, I64S(1)));
}

/* Expand of a float scalar to [2^62]. */
static Onnx__ModelProto *expand_2_62(void)
{
    Onnx__TensorProto *x = tensor("x", T_FLOAT, 0, NULL);
    set_raw(x, (float[]){1.0f}, 4);
    return one_node(node("Expand", "expand0", "x,s", "y"), x,
                    i64_init("s", I64S(1), I64S(INT64_C(1) << 62)), NULL);
}

/* Tile of float[2] by 2^61. */
static Onnx__ModelProto *tile_2_62(void)
{
    return one_node(node("Tile", "tile0", "x,r", "y"), ftensor("x"),
                    i64_init("r", I64S(1), I64S(INT64_C(1) << 61)), NULL);
}

/* Pad of float[2] by 2^62 at the end. */
static Onnx__ModelProto *pad_2_62(void)
{
    return one_node(node("Pad", "pad0", "x,p", "y"), ftensor("x"),
                    i64_init("p", I64S(2), I64S(0, INT64_C(1) << 62)), NULL);
}

/* Scan 'scan0' with num_scan_inputs 3 but one input. */
static Onnx__ModelProto *scan_too_many(void)
{
    Onnx__GraphProto *g = graph("g");
    PUSH(g->n_input, g->input, fvalue("x"));
    Onnx__NodeProto *n = node("Scan", "scan0", "x", "y");
    Onnx__AttributeProto *m = attr("num_scan_inputs", ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT);
    m->has_i = 1;
    m->i = 3;
    PUSH(n->n_attribute, n->attribute, m);
    PUSH(n->n_attribute, n->attribute, attr_graph("body", graph("body")));
    PUSH(g->n_node, g->node, n);
    PUSH(g->n_output, g->output, value("y", NULL));
    return model(g);
}

/* Reshape of x to [4] / [0]: an integer division by zero in a shape. */
static Onnx__ModelProto *shape_div_zero(void)
{
    Onnx__GraphProto *g = graph("g");
    PUSH(g->n_input, g->input, fvalue("x"));
    PUSH(g->n_initializer, g->initializer, i64_init("a", I64S(1), I64S(4)));
    PUSH(g->n_initializer, g->initializer, i64_init("z", I64S(1), I64S(0)));
    PUSH(g->n_node, g->node, node("Div", "div0", "a,z", "q"));
    PUSH(g->n_node, g->node, node("Reshape", "reshape0", "x,q", "y"));
    PUSH(g->n_output, g->output, value("y", NULL));
    return model(g);
}

/* A tensor of rank 65. */
static Onnx__ModelProto *tensor_rank_65(void)
{
    int64_t dims[65];
    for (int i = 0; i < 65; i++)
        dims[i] = 1;
    return with_init(tensor("w", T_FLOAT, 65, dims));
}

/* A string tensor carrying raw_data. */
static Onnx__ModelProto *string_raw_data(void)
{
    Onnx__TensorProto *t = tensor("w", T_STRING, I64S(1));
    set_raw(t, "abc", 3);
    return with_init(t);
}

/* ---- the cases: external data (weights.bin holds 16 bytes) --------------------- */

/* Initializer w: float[2] stored externally; NULL entries are left out. */
static Onnx__ModelProto *ext_model(const char *location, const char *offset,
                                   const char *length)
{
    Onnx__TensorProto *t = tensor("w", T_FLOAT, I64S(2));
    t->has_data_location = 1;
    t->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
    if (location)
        ext_entry(t, "location", location);
    if (offset)
        ext_entry(t, "offset", offset);
    if (length)
        ext_entry(t, "length", length);
    return with_init(t);
}

/* location '../bad/weights.bin': refused for the '..' even though it would
 * lead back inside. */
static Onnx__ModelProto *ext_dotdot(void) { return ext_model("../bad/weights.bin", "0", "8"); }

/* location is the absolute path /etc/passwd. */
static Onnx__ModelProto *ext_absolute(void) { return ext_model("/etc/passwd", "0", "8"); }

/* location is the symlink escape_link, which points to /etc/passwd. */
static Onnx__ModelProto *ext_symlink(void) { return ext_model("escape_link", "0", "8"); }

/* offset 1000 in a 16-byte file, no length. */
static Onnx__ModelProto *ext_offset_past_end(void)
{
    return ext_model("weights.bin", "1000", NULL);
}

/* offset 12 + length 8 in a 16-byte file. */
static Onnx__ModelProto *ext_range_past_end(void)
{
    return ext_model("weights.bin", "12", "8");
}

/* length 12 where float[2] needs 8. */
static Onnx__ModelProto *ext_length_mismatch(void)
{
    return ext_model("weights.bin", "0", "12");
}

/* location names a file that does not exist. */
static Onnx__ModelProto *ext_missing_file(void) { return ext_model("missing.bin", "0", "8"); }

/* No location entry. */
static Onnx__ModelProto *ext_no_location(void) { return ext_model(NULL, "0", "8"); }

/* offset "-8". */
static Onnx__ModelProto *ext_negative_offset(void)
{
    return ext_model("weights.bin", "-8", "8");
}

/* location "." is the model folder itself, not a file. */
static Onnx__ModelProto *ext_directory(void) { return ext_model(".", "0", "8"); }

/* A string tensor stored as external data. */
static Onnx__ModelProto *ext_string(void)
{
    Onnx__ModelProto *m = ext_model("weights.bin", "0", "8");
    m->graph->initializer[0]->data_type = T_STRING;
    return m;
}

/* ---- the table ------------------------------------------------------------------ */

struct bad_case {
    const char *file;
    Onnx__ModelProto *(*model)(void); /* a broken model ... */
    void (*raw)(struct buf *);        /* ... or raw bytes */
};

static const struct bad_case cases[] = {
    {"empty.onnx", NULL, raw_empty},
    {"garbage.onnx", NULL, raw_garbage},
    {"json_text.onnx", NULL, raw_json},
    {"truncated_half.onnx", NULL, raw_truncated_half},
    {"truncated_varint.onnx", NULL, raw_truncated_varint},
    {"truncated_key.onnx", NULL, raw_truncated_key},
    {"graph_as_varint.onnx", NULL, raw_graph_as_varint},
    {"nested_wrong_wire.onnx", NULL, raw_nested_wrong_wire},
    {"huge_length.onnx", NULL, raw_huge_length},
    {"negative_length.onnx", NULL, raw_negative_length},
    {"varint_too_long.onnx", NULL, raw_varint_too_long},
    {"group_wire_type.onnx", NULL, raw_group},
    {"wire_type_7.onnx", NULL, raw_wire_type_7},
    {"field_zero.onnx", NULL, raw_field_zero},
    {"packed_bad_varint.onnx", NULL, raw_packed_bad_varint},
    {"packed_bad_fixed32.onnx", NULL, raw_packed_bad_fixed32},
    {"tensor_as_model.onnx", NULL, raw_tensor_as_model},
    {"deep_type_nesting.onnx", deep_type_nesting, NULL},
    {"no_graph.onnx", no_graph, NULL},
    {"no_ir_version.onnx", no_ir_version, NULL},
    {"negative_ir_version.onnx", negative_ir_version, NULL},
    {"no_opset_import.onnx", no_opset_import, NULL},
    {"opset_twice.onnx", opset_twice, NULL},
    {"opset_alias.onnx", opset_alias, NULL},
    {"opset_no_version.onnx", opset_no_version, NULL},
    {"function_no_name.onnx", function_no_name, NULL},
    {"function_dangling.onnx", function_dangling, NULL},
    {"function_recursive.onnx", function_recursive, NULL},
    {"dangling_input.onnx", dangling_input, NULL},
    {"cycle.onnx", cycle, NULL},
    {"self_loop.onnx", self_loop, NULL},
    {"cycle_through_subgraph.onnx", cycle_through_subgraph, NULL},
    {"duplicate_producer.onnx", duplicate_producer, NULL},
    {"output_redefines_input.onnx", output_redefines_input, NULL},
    {"initializer_twice.onnx", initializer_twice, NULL},
    {"input_twice.onnx", input_twice, NULL},
    {"input_no_name.onnx", input_no_name, NULL},
    {"output_no_name.onnx", output_no_name, NULL},
    {"output_not_produced.onnx", output_not_produced, NULL},
    {"node_no_op_type.onnx", node_no_op_type, NULL},
    {"domain_not_imported.onnx", domain_not_imported, NULL},
    {"input_rank_65.onnx", input_rank_65, NULL},
    {"input_unknown_elem_type.onnx", input_unknown_elem_type, NULL},
    {"deep_if_33.onnx", deep_if_33, NULL},
    {"deep_if_40.onnx", deep_if_40, NULL},
    {"subgraph_dangling.onnx", subgraph_dangling, NULL},
    {"subgraph_shadow.onnx", subgraph_shadow, NULL},
    {"if_no_branch.onnx", if_no_branch, NULL},
    {"node_arity.onnx", node_arity, NULL},
    {"value_info_twice.onnx", value_info_twice, NULL},
    {"name_newline.onnx", name_newline, NULL},
    {"sparse_no_values.onnx", sparse_no_values, NULL},
    {"attr_int_holds_float.onnx", attr_int_holds_float, NULL},
    {"attr_two_values.onnx", attr_two_values, NULL},
    {"attr_no_value.onnx", attr_no_value, NULL},
    {"attr_no_name.onnx", attr_no_name, NULL},
    {"attr_no_type.onnx", attr_no_type, NULL},
    {"attr_unknown_type.onnx", attr_unknown_type, NULL},
    {"attr_ref_in_main.onnx", attr_ref_in_main, NULL},
    {"attr_duplicate.onnx", attr_duplicate, NULL},
    {"attr_tensor_bad.onnx", attr_tensor_bad, NULL},
    {"tensor_no_data_type.onnx", tensor_no_data_type, NULL},
    {"tensor_unknown_data_type.onnx", tensor_unknown_data_type, NULL},
    {"raw_data_short.onnx", raw_data_short, NULL},
    {"float_data_count.onnx", float_data_count, NULL},
    {"two_data_fields.onnx", two_data_fields, NULL},
    {"negative_dim.onnx", negative_dim, NULL},
    {"dims_overflow.onnx", dims_overflow, NULL},
    {"dims_bytes_overflow.onnx", dims_bytes_overflow, NULL},
    {"tensor_rank_65.onnx", tensor_rank_65, NULL},
    {"string_raw_data.onnx", string_raw_data, NULL},
    {"cos_float_2_62.onnx", cos_float_2_62, NULL},
    {"cos_int64_2_61.onnx", cos_int64_2_61, NULL},
    {"cos_double_2_61.onnx", cos_double_2_61, NULL},
    {"cos_elements.onnx", cos_elements, NULL},
    {"range_2_62.onnx", range_2_62, NULL},
    {"expand_2_62.onnx", expand_2_62, NULL},
    {"tile_2_62.onnx", tile_2_62, NULL},
    {"pad_2_62.onnx", pad_2_62, NULL},
    {"scan_too_many.onnx", scan_too_many, NULL},
    {"shape_div_zero.onnx", shape_div_zero, NULL},
    {"ext_dotdot.onnx", ext_dotdot, NULL},
    {"ext_absolute.onnx", ext_absolute, NULL},
    {"ext_symlink.onnx", ext_symlink, NULL},
    {"ext_offset_past_end.onnx", ext_offset_past_end, NULL},
    {"ext_range_past_end.onnx", ext_range_past_end, NULL},
    {"ext_length_mismatch.onnx", ext_length_mismatch, NULL},
    {"ext_missing_file.onnx", ext_missing_file, NULL},
    {"ext_no_location.onnx", ext_no_location, NULL},
    {"ext_negative_offset.onnx", ext_negative_offset, NULL},
    {"ext_directory.onnx", ext_directory, NULL},
    {"ext_string.onnx", ext_string, NULL},
};

/* ---- main ---------------------------------------------------------------------- */

static const char *out_dir;

static void write_file(const char *name, const void *data, size_t len)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", out_dir, name);
    FILE *f = fopen(path, "wb");
    if (!f || (len && fwrite(data, 1, len, f) != len) || fclose(f) != 0) {
        fprintf(stderr, "gen_bad: cannot write %s: %s\n", path, strerror(errno));
        exit(1);
    }
}

/* The data files the external-data cases point at. */
static void write_data_files(void)
{
    float w[4] = {1.0f, 2.0f, 3.0f, 4.0f}; /* 16 bytes */
    write_file("weights.bin", w, sizeof(w));
    char path[4096];
    snprintf(path, sizeof(path), "%s/escape_link", out_dir);
    if ((unlink(path) != 0 && errno != ENOENT) || symlink("/etc/passwd", path) != 0) {
        fprintf(stderr, "gen_bad: cannot create symlink %s: %s\n", path, strerror(errno));
        exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc != 2) {
        fprintf(stderr, "usage: gen_bad DIR\n");
        return 2;
    }
    out_dir = argv[1];
    write_data_files();
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct buf b = {0};
        if (cases[i].raw)
            cases[i].raw(&b);
        else
            put_model(&b, cases[i].model());
        write_file(cases[i].file, b.p, b.n);
        pool_free();
    }
    free(pool);
    printf("gen_bad: wrote %zu cases and 2 data files to %s\n",
           sizeof(cases) / sizeof(cases[0]), out_dir);
    return 0;
}
