/*
 * Dumps of a model for people and scripts: text (one line per node),
 * Graphviz DOT and JSON (schema in docs/dump-json.md).
 *
 * Every name comes from an untrusted file, so every string goes through
 * the escaper of its format: the output is always well-formed text, DOT
 * or JSON, whatever bytes the model holds.
 */
#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "internal.h"

#define MAX_DEPTH 128       /* subgraph nesting we follow */
#define JSON_MAX_LEVEL 1024 /* > MAX_DEPTH * 6 levels per graph + 10 */
#define TEXT_MAX_LIST 64    /* list elements shown on a text line */
#define SMALL_TENSOR 8      /* tensors up to this many elements show values */
#define DOT_MAX_INITS 64    /* more initializers than this are not drawn */
#define DOT_MAX_LABEL 48    /* longer names are shortened in the middle */

/* ---- dump state ---------------------------------------------------------- */

/* Pointer -> serial number, open addressing (DOT node identifiers). */
struct ptrmap {
    const void **keys;
    int *vals;
    size_t cap, n;
};

struct dump {
    FILE *out;
    const struct gf_model *m;
    enum gf_status st; /* first failure other than I/O (which ferror keeps) */
    struct ptrmap ids;
    int next_id;
    /* JSON writer: per open container, "nothing written yet" and "inline" */
    int level;
    bool after_key;
    bool first[JSON_MAX_LEVEL];
    bool inl[JSON_MAX_LEVEL];
};

static void fail(struct dump *d, enum gf_status st)
{
    if (d->st == GF_OK)
        d->st = st;
}

static bool depth_ok(struct dump *d, int depth)
{
    if (depth <= MAX_DEPTH)
        return true;
    if (d->st == GF_OK)
        fail(d, gf_error(GF_ERR_INVALID, "dump: subgraphs nested deeper than %d",
                         MAX_DEPTH));
    return false;
}

static size_t ptr_hash(const void *p, size_t cap)
{
    uint64_t x = (uint64_t)(uintptr_t)p;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdULL;
    x ^= x >> 33;
    return (size_t)x & (cap - 1);
}

static bool ptrmap_grow(struct ptrmap *pm)
{
    size_t cap = pm->cap ? pm->cap * 2 : 256;
    const void **keys = calloc(cap, sizeof(*keys));
    int *vals = calloc(cap, sizeof(*vals));
    if (!keys || !vals) {
        free(keys);
        free(vals);
        return false;
    }
    for (size_t i = 0; i < pm->cap; i++) {
        if (!pm->keys[i])
            continue;
        size_t h = ptr_hash(pm->keys[i], cap);
        while (keys[h])
            h = (h + 1) & (cap - 1);
        keys[h] = pm->keys[i];
        vals[h] = pm->vals[i];
    }
    free(pm->keys);
    free(pm->vals);
    pm->keys = keys;
    pm->vals = vals;
    pm->cap = cap;
    return true;
}

/* Serial of `p`, or -1 when it has none. */
static int id_get(const struct dump *d, const void *p)
{
    const struct ptrmap *pm = &d->ids;
    if (!pm->cap || !p)
        return -1;
    for (size_t h = ptr_hash(p, pm->cap); pm->keys[h]; h = (h + 1) & (pm->cap - 1))
        if (pm->keys[h] == p)
            return pm->vals[h];
    return -1;
}

/* Serial of `p`, given a new one when it has none (-1 when out of memory). */
static int id_add(struct dump *d, const void *p)
{
    struct ptrmap *pm = &d->ids;
    int id = id_get(d, p);
    if (id >= 0)
        return id;
    if ((pm->n + 1) * 2 > pm->cap && !ptrmap_grow(pm)) {
        fail(d, gf_error(GF_ERR_NOMEM, "dump: out of memory"));
        return -1;
    }
    size_t h = ptr_hash(p, pm->cap);
    while (pm->keys[h])
        h = (h + 1) & (pm->cap - 1);
    pm->keys[h] = p;
    pm->vals[h] = d->next_id++;
    pm->n++;
    return pm->vals[h];
}

/* ---- helpers shared by the formats ---------------------------------------- */

/* Length (1..4) of the well-formed UTF-8 sequence at p, 0 if ill-formed
 * (overlong forms, surrogates and code points above U+10FFFF included). */
static size_t utf8_len(const uint8_t *p, size_t n)
{
    uint8_t c = p[0];
    if (c < 0x80)
        return 1;
    size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2;
    if (c < 0xC2 || c > 0xF4 || n < len)
        return 0;
    uint8_t lo = 0x80, hi = 0xBF; /* bounds of the second byte */
    if (c == 0xE0)
        lo = 0xA0;
    else if (c == 0xED)
        hi = 0x9F;
    else if (c == 0xF0)
        lo = 0x90;
    else if (c == 0xF4)
        hi = 0x8F;
    if (p[1] < lo || p[1] > hi)
        return 0;
    for (size_t i = 2; i < len; i++)
        if ((p[i] & 0xC0) != 0x80)
            return 0;
    return len;
}

static const char *str_or_empty(const char *s)
{
    return s ? s : "";
}

static bool is_onnx_domain(const char *domain)
{
    return !domain || !domain[0] || strcmp(domain, "ai.onnx") == 0;
}

/* Shortest "%g" form that reads back as the same float (or double), so
 * 1e-5 prints as 1e-05 and not 9.99999975e-06. */
static void fmt_real(char *buf, size_t len, double v, bool is_double)
{
    if (isnan(v)) {
        snprintf(buf, len, "NaN");
        return;
    }
    if (isinf(v)) {
        snprintf(buf, len, v < 0 ? "-Infinity" : "Infinity");
        return;
    }
    int prec = is_double ? 15 : 6, max = is_double ? 17 : 9;
    for (; prec <= max; prec++) {
        snprintf(buf, len, "%.*g", prec, v);
        if (is_double ? strtod(buf, NULL) == v : strtof(buf, NULL) == (float)v)
            break;
    }
    /* A caller's setlocale() may have made the decimal point a comma. */
    for (char *p = buf; *p; p++)
        if (*p == ',')
            *p = '.';
}

enum elem_kind { ELEM_NONE, ELEM_REAL, ELEM_INT, ELEM_UINT64, ELEM_BOOL, ELEM_STRING };

static enum elem_kind elem_kind(enum gf_dtype t)
{
    switch (t) {
    case GF_FLOAT: case GF_DOUBLE: case GF_FLOAT16: case GF_BFLOAT16:
        return ELEM_REAL;
    case GF_UINT8: case GF_INT8: case GF_UINT16: case GF_INT16: case GF_INT32:
    case GF_INT64: case GF_UINT32:
        return ELEM_INT;
    case GF_UINT64:
        return ELEM_UINT64;
    case GF_BOOL:
        return ELEM_BOOL;
    case GF_STRING:
        return ELEM_STRING;
    default:
        return ELEM_NONE; /* undefined, complex, float8 and 4-bit types */
    }
}

/* True when the dumps show the tensor's values: few, and readable. */
static bool tensor_small(const struct gf_tensor *t)
{
    if (t->nelem > SMALL_TENSOR || elem_kind(t->dtype) == ELEM_NONE)
        return false;
    if (t->nelem == 0)
        return true;
    if (t->dtype == GF_STRING)
        return t->strings != NULL;
    return t->data && t->nbytes >= gf_dtype_bytes(t->dtype, t->nelem);
}

/* Element i of a small tensor as text (numbers only). */
static void fmt_elem(char *buf, size_t len, const struct gf_tensor *t, size_t i)
{
    switch (elem_kind(t->dtype)) {
    case ELEM_REAL:
        fmt_real(buf, len, gf_tensor_get_f64(t, i), t->dtype == GF_DOUBLE);
        break;
    case ELEM_UINT64: {
        const uint8_t *p = (const uint8_t *)t->data + 8 * i;
        uint64_t u = 0;
        for (int k = 7; k >= 0; k--)
            u = u << 8 | p[k]; /* little-endian, as ONNX stores it */
        snprintf(buf, len, "%" PRIu64, u);
        break;
    }
    case ELEM_BOOL:
        snprintf(buf, len, "%s", ((const uint8_t *)t->data)[i] ? "true" : "false");
        break;
    default:
        snprintf(buf, len, "%" PRId64, gf_tensor_get_i64(t, i));
        break;
    }
}

/* ---- op categories (DOT colors, JSON "category") ------------------------- */

enum category {
    CAT_MATMUL, CAT_NORM, CAT_ACTIVATION, CAT_ELEMWISE, CAT_LAYOUT,
    CAT_REDUCTION, CAT_LOSS, CAT_CONTROL, CAT_FUSED, CAT_UNKNOWN, CAT_COUNT
};

static const struct {
    const char *name, *color;
    const char *ops; /* op types, each surrounded by spaces */
} categories[CAT_COUNT] = {
    [CAT_MATMUL] = {"matmul", "#f4a582",
        " MatMul Gemm Einsum MatMulInteger QLinearMatMul MatMulNBits FusedMatMul"
        " FusedGemm Conv ConvTranspose ConvInteger QLinearConv DeformConv"
        " FusedConv Attention MultiHeadAttention GroupQueryAttention "},
    [CAT_NORM] = {"normalization", "#b2abd2",
        " LayerNormalization RMSNormalization BatchNormalization"
        " InstanceNormalization GroupNormalization LpNormalization"
        " MeanVarianceNormalization SimplifiedLayerNormalization"
        " SkipLayerNormalization SkipSimplifiedLayerNormalization LRN"
        " Softmax LogSoftmax Hardmax "},
    [CAT_ACTIVATION] = {"activation", "#fee08b",
        " Relu LeakyRelu PRelu Elu Selu Celu Sigmoid HardSigmoid Tanh Softplus"
        " Softsign HardSwish Mish Gelu FastGelu BiasGelu QuickGelu"
        " ThresholdedRelu Shrink Swish "},
    [CAT_ELEMWISE] = {"elementwise", "#d9f0d3",
        " Add Sub Mul Div Pow Mod And Or Xor Not Equal Less LessOrEqual Greater"
        " GreaterOrEqual Sqrt Reciprocal Neg Abs Exp Log Sin Cos Tan Asin Acos"
        " Atan Sinh Cosh Asinh Acosh Atanh Erf Floor Ceil Round Sign IsNaN IsInf"
        " Clip Max Min Mean Sum Where Cast CastLike BitShift BitwiseAnd"
        " BitwiseOr BitwiseXor BitwiseNot QuantizeLinear DequantizeLinear"
        " DynamicQuantizeLinear Dropout Det "},
    [CAT_LAYOUT] = {"layout", "#c6dbef",
        " Transpose Reshape Flatten Squeeze Unsqueeze Concat Split Slice Gather"
        " GatherElements GatherND Scatter ScatterND ScatterElements Expand Tile"
        " Pad Shape Size ConstantOfShape Range Identity Constant DepthToSpace"
        " SpaceToDepth Resize Upsample Trilu OneHot Compress NonZero Unique"
        " ReverseSequence CenterCropPad Col2Im EyeLike SplitToSequence"
        " ConcatFromSequence SequenceAt SequenceConstruct SequenceEmpty"
        " SequenceErase SequenceInsert SequenceLength Optional"
        " OptionalGetElement OptionalHasElement "},
    [CAT_REDUCTION] = {"reduction", "#a6dba0",
        " ArgMax ArgMin TopK CumSum MaxPool AveragePool GlobalAveragePool"
        " GlobalMaxPool GlobalLpPool LpPool MaxRoiPool RoiAlign MaxUnpool "},
    [CAT_LOSS] = {"loss", "#f28e8e",
        " SoftmaxCrossEntropyLoss NegativeLogLikelihoodLoss "},
    [CAT_CONTROL] = {"control", "#e0e0e0", " If Loop Scan SequenceMap "},
    [CAT_FUSED] = {"fused", "#ff69b4", ""},
    [CAT_UNKNOWN] = {"unknown", "#ffffff", ""},
};

static enum category op_category(const struct gf_node *n)
{
    const char *op = str_or_empty(n->op_type);
    size_t len = strlen(op);
    if (n->domain && strcmp(n->domain, "graphfuse") == 0)
        return CAT_FUSED;
    if (len > 0 && len < 64 && !strchr(op, ' ')) {
        char key[68];
        snprintf(key, sizeof(key), " %s ", op);
        for (int c = 0; c < CAT_COUNT; c++)
            if (strstr(categories[c].ops, key))
                return (enum category)c;
    }
    if (len >= 4 && strcmp(op + len - 4, "Loss") == 0)
        return CAT_LOSS;
    if (strncmp(op, "Reduce", 6) == 0)
        return CAT_REDUCTION;
    if (strstr(op, "Norm"))
        return CAT_NORM;
    if (strstr(op, "MatMul") || strstr(op, "Gemm") || strstr(op, "Conv"))
        return CAT_MATMUL;
    return CAT_UNKNOWN;
}

/* ---- type descriptions ------------------------------------------------------ */

struct sbuf {
    char *buf;
    size_t len, pos;
};

static void sb_add(struct sbuf *sb, const char *s)
{
    while (*s && sb->pos + 1 < sb->len)
        sb->buf[sb->pos++] = *s++;
    sb->buf[sb->pos] = 0;
}

static void type_proto_desc(struct sbuf *sb, const Onnx__TypeProto *tp, int depth)
{
    if (!tp || depth > 16) {
        sb_add(sb, "?");
        return;
    }
    switch (tp->value_case) {
    case ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE:
        sb_add(sb, "tensor(");
        sb_add(sb, gf_dtype_name(tp->tensor_type->elem_type));
        sb_add(sb, ")");
        break;
    case ONNX__TYPE_PROTO__VALUE_SPARSE_TENSOR_TYPE:
        sb_add(sb, "sparse_tensor(");
        sb_add(sb, gf_dtype_name(tp->sparse_tensor_type->elem_type));
        sb_add(sb, ")");
        break;
    case ONNX__TYPE_PROTO__VALUE_SEQUENCE_TYPE:
        sb_add(sb, "seq(");
        type_proto_desc(sb, tp->sequence_type->elem_type, depth + 1);
        sb_add(sb, ")");
        break;
    case ONNX__TYPE_PROTO__VALUE_OPTIONAL_TYPE:
        sb_add(sb, "optional(");
        type_proto_desc(sb, tp->optional_type->elem_type, depth + 1);
        sb_add(sb, ")");
        break;
    case ONNX__TYPE_PROTO__VALUE_MAP_TYPE:
        sb_add(sb, "map(");
        sb_add(sb, gf_dtype_name(tp->map_type->key_type));
        sb_add(sb, ", ");
        type_proto_desc(sb, tp->map_type->value_type, depth + 1);
        sb_add(sb, ")");
        break;
    default:
        sb_add(sb, "?");
        break;
    }
}

/* "seq(tensor(float))", "map(int64, tensor(float))"... from a packed
 * TypeProto; "?" when the bytes do not decode. */
static const char *packed_type_desc(struct gf_bytes packed, char *buf, size_t len)
{
    struct sbuf sb = {buf, len, 0};
    buf[0] = 0;
    Onnx__TypeProto *tp = packed.len
        ? onnx__type_proto__unpack(NULL, packed.len, packed.data) : NULL;
    type_proto_desc(&sb, tp, 0);
    if (tp)
        onnx__type_proto__free_unpacked(tp, NULL);
    return buf;
}

/* Shape of a tensor type as gf_type_format writes it ("[batch,128,?]"),
 * or "" when the rank is unknown. */
static const char *shape_str(const struct gf_type *t, char *buf, size_t len)
{
    buf[0] = 0;
    if (t->kind == GF_TYPE_TENSOR && t->rank >= 0 && (t->dims || t->rank == 0))
        gf_type_format(t, buf, len);
    return buf;
}

/* ---- text ------------------------------------------------------------------- */

/* Writes bytes quoted, C-style: \" \\ \n \t \r and \xNN for other control
 * bytes and bytes that are not well-formed UTF-8. */
static void text_quoted(struct dump *d, const uint8_t *p, size_t n)
{
    fputc('"', d->out);
    for (size_t i = 0; i < n;) {
        uint8_t c = p[i];
        size_t k = utf8_len(p + i, n - i);
        if (c == '"' || c == '\\')
            fprintf(d->out, "\\%c", c);
        else if (c == '\n')
            fputs("\\n", d->out);
        else if (c == '\t')
            fputs("\\t", d->out);
        else if (c == '\r')
            fputs("\\r", d->out);
        else if (c < 0x20 || c == 0x7f || k == 0)
            fprintf(d->out, "\\x%02x", c);
        else {
            fwrite(p + i, 1, k, d->out);
            i += k;
            continue;
        }
        i++;
    }
    fputc('"', d->out);
}

static bool text_plain_ok(const char *s)
{
    const uint8_t *p = (const uint8_t *)s;
    size_t n = strlen(s);
    if (n == 0 || s[0] == '#')
        return false;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_len(p + i, n - i);
        if (k == 0 || p[i] <= ' ' || p[i] == 0x7f || strchr("\"\\,()[]{}=", p[i]))
            return false;
        i += k;
    }
    return true;
}

/* A name as is when it cannot be misread, quoted otherwise. */
static void text_name(struct dump *d, const char *s)
{
    s = str_or_empty(s);
    if (text_plain_ok(s))
        fputs(s, d->out);
    else
        text_quoted(d, (const uint8_t *)s, strlen(s));
}

/* Text made by us from untrusted parts (shapes with symbolic dims): control
 * bytes and ill-formed UTF-8 become \xNN so the line stays one line. */
static void text_sanitized(struct dump *d, const char *s)
{
    const uint8_t *p = (const uint8_t *)s;
    size_t n = strlen(s);
    for (size_t i = 0; i < n;) {
        size_t k = utf8_len(p + i, n - i);
        if (k == 0 || p[i] < 0x20 || p[i] == 0x7f) {
            fprintf(d->out, "\\x%02x", p[i]);
            k = 1;
        } else {
            fwrite(p + i, 1, k, d->out);
        }
        i += k;
    }
}

static void text_indent(struct dump *d, int n)
{
    fprintf(d->out, "%*s", n, "");
}

static void text_type(struct dump *d, const struct gf_type *t)
{
    char buf[1024];
    if (t->kind == GF_TYPE_TENSOR) {
        fputs(gf_dtype_name(t->dtype), d->out);
        text_sanitized(d, shape_str(t, buf, sizeof(buf)));
    } else if (t->kind == GF_TYPE_OTHER) {
        fputs(packed_type_desc(t->packed, buf, sizeof(buf)), d->out);
    } else {
        fputs("?", d->out);
    }
}

static void text_real(struct dump *d, double v, bool is_double)
{
    char buf[64];
    fmt_real(buf, sizeof(buf), v, is_double);
    fputs(buf, d->out);
    if (!strpbrk(buf, ".eNI")) /* 1 -> 1.0: a float should look like one */
        fputs(".0", d->out);
}

static const char *plural(size_t n)
{
    return n == 1 ? "" : "s";
}

/* "tensor<float>[2,3]", followed by "{1.0,2.0}" when small. */
static void text_tensor(struct dump *d, const struct gf_tensor *t)
{
    if (!t) {
        fputs("<null tensor>", d->out);
        return;
    }
    fprintf(d->out, "tensor<%s>[", gf_dtype_name(t->dtype));
    for (int i = 0; i < t->rank && t->dims; i++)
        fprintf(d->out, "%s%" PRId64, i ? "," : "", t->dims[i]);
    fputc(']', d->out);
    if (!tensor_small(t))
        return;
    fputc('{', d->out);
    for (size_t i = 0; i < t->nelem; i++) {
        char buf[64];
        if (i)
            fputc(',', d->out);
        if (t->dtype == GF_STRING)
            text_quoted(d, t->strings[i].data, t->strings[i].len);
        else if (elem_kind(t->dtype) == ELEM_REAL)
            text_real(d, gf_tensor_get_f64(t, i), t->dtype == GF_DOUBLE);
        else {
            fmt_elem(buf, sizeof(buf), t, i);
            fputs(buf, d->out);
        }
    }
    fputc('}', d->out);
}

static void text_graph_ref(struct dump *d, const struct gf_graph *g)
{
    if (!g) {
        fputs("<null graph>", d->out);
        return;
    }
    fputs("<graph ", d->out);
    text_name(d, g->name);
    fprintf(d->out, ": %zu node%s>", g->n_nodes, plural(g->n_nodes));
}

/* Element i of a list attribute. */
static void text_attr_elem(struct dump *d, const struct gf_attr *a, size_t i)
{
    char buf[1024];
    switch (a->type) {
    case GF_ATTR_FLOATS: text_real(d, a->floats[i], false); break;
    case GF_ATTR_INTS: fprintf(d->out, "%" PRId64, a->ints[i]); break;
    case GF_ATTR_STRINGS:
        text_quoted(d, a->strings[i].data, a->strings[i].len);
        break;
    case GF_ATTR_TENSORS: text_tensor(d, a->tensors[i]); break;
    case GF_ATTR_GRAPHS: text_graph_ref(d, a->graphs[i]); break;
    case GF_ATTR_TYPE_PROTOS:
        fputs(packed_type_desc(a->packed_list[i], buf, sizeof(buf)), d->out);
        break;
    default: fputs("<sparse_tensor>", d->out); break;
    }
}

static bool attr_is_list(enum gf_attr_type t)
{
    return t == GF_ATTR_FLOATS || t == GF_ATTR_INTS || t == GF_ATTR_STRINGS ||
           t == GF_ATTR_TENSORS || t == GF_ATTR_GRAPHS ||
           t == GF_ATTR_SPARSE_TENSORS || t == GF_ATTR_TYPE_PROTOS;
}

/* A list attribute's element array, NULL when missing (a malformed attr). */
static const void *attr_list(const struct gf_attr *a)
{
    switch (a->type) {
    case GF_ATTR_FLOATS: return a->floats;
    case GF_ATTR_INTS: return a->ints;
    case GF_ATTR_STRINGS: return a->strings;
    case GF_ATTR_TENSORS: return a->tensors;
    case GF_ATTR_GRAPHS: return a->graphs;
    default: return a->packed_list;
    }
}

/* Subgraphs held by an attribute (none for a reference in a function). */
static size_t attr_n_graphs(const struct gf_attr *a)
{
    if (a->ref_attr_name)
        return 0;
    if (a->type == GF_ATTR_GRAPH)
        return a->g ? 1 : 0;
    return a->type == GF_ATTR_GRAPHS && a->graphs ? a->n : 0;
}

/* Subgraph k of the attribute; NULL entries are possible in a list. */
static const struct gf_graph *attr_graph(const struct gf_attr *a, size_t k)
{
    return a->type == GF_ATTR_GRAPH ? a->g : a->graphs[k];
}

static void text_attr_value(struct dump *d, const struct gf_attr *a)
{
    char buf[1024];
    if (a->ref_attr_name) {
        fputc('@', d->out);
        text_name(d, a->ref_attr_name);
        return;
    }
    if (attr_is_list(a->type)) {
        size_t n = attr_list(a) ? a->n : 0;
        fputc('[', d->out);
        for (size_t i = 0; i < n && i < TEXT_MAX_LIST; i++) {
            if (i)
                fputc(',', d->out);
            text_attr_elem(d, a, i);
        }
        if (n > TEXT_MAX_LIST)
            fprintf(d->out, ",... %zu more", n - TEXT_MAX_LIST);
        fputc(']', d->out);
        return;
    }
    switch (a->type) {
    case GF_ATTR_FLOAT: text_real(d, a->f, false); break;
    case GF_ATTR_INT: fprintf(d->out, "%" PRId64, a->i); break;
    case GF_ATTR_STRING: text_quoted(d, a->s.data, a->s.len); break;
    case GF_ATTR_TENSOR: text_tensor(d, a->t); break;
    case GF_ATTR_GRAPH: text_graph_ref(d, a->g); break;
    case GF_ATTR_SPARSE_TENSOR: fputs("<sparse_tensor>", d->out); break;
    case GF_ATTR_TYPE_PROTO:
        fputs(packed_type_desc(a->packed, buf, sizeof(buf)), d->out);
        break;
    default: fputs("?", d->out); break;
    }
}

static void text_op(struct dump *d, const char *domain, const char *op_type)
{
    if (!is_onnx_domain(domain)) {
        text_name(d, domain);
        fputc('.', d->out);
    }
    text_name(d, op_type);
}

static void text_value_list(struct dump *d, size_t n, struct gf_value *const *vs)
{
    for (size_t i = 0; i < n; i++) {
        if (i)
            fputs(", ", d->out);
        if (vs[i])
            text_name(d, vs[i]->name);
        else
            fputs("\"\"", d->out); /* omitted optional input / output */
    }
}

static void text_graph(struct dump *d, const struct gf_graph *g, int indent,
                       const char *label, int depth);

/* name: Op(in1, in2) -> out1, out2 [shape of out1] {attr=value, ...} */
static void text_node(struct dump *d, const struct gf_node *n, int indent, int depth)
{
    char buf[1024];
    text_indent(d, indent);
    if (n->name && n->name[0])
        text_name(d, n->name);
    else
        fprintf(d->out, "#%d", n->id);
    fputs(": ", d->out);
    text_op(d, n->domain, n->op_type);
    fputc('(', d->out);
    text_value_list(d, n->n_inputs, n->inputs);
    fputc(')', d->out);
    if (n->n_outputs) {
        fputs(" -> ", d->out);
        text_value_list(d, n->n_outputs, n->outputs);
        const struct gf_value *o = n->outputs[0];
        if (o && shape_str(&o->type, buf, sizeof(buf))[0]) {
            fputc(' ', d->out);
            text_sanitized(d, buf);
        }
    }
    for (size_t i = 0; i < n->n_attrs; i++) {
        fputs(i ? ", " : " {", d->out);
        text_name(d, n->attrs[i].name);
        fputc('=', d->out);
        text_attr_value(d, &n->attrs[i]);
    }
    fputs(n->n_attrs ? "}\n" : "\n", d->out);
    for (size_t i = 0; i < n->n_attrs; i++)
        for (size_t k = 0; k < attr_n_graphs(&n->attrs[i]); k++)
            if (attr_graph(&n->attrs[i], k))
                text_graph(d, attr_graph(&n->attrs[i], k), indent + 4,
                           n->attrs[i].name, depth + 1);
}

static void text_value_line(struct dump *d, const char *what, const struct gf_value *v,
                            int indent)
{
    text_indent(d, indent);
    fprintf(d->out, "%s ", what);
    text_name(d, v->name);
    fputs(": ", d->out);
    text_type(d, &v->type);
    if (v->init && v->is_input)
        fputs(" (initializer)", d->out);
    fputc('\n', d->out);
}

static void text_graph(struct dump *d, const struct gf_graph *g, int indent,
                       const char *label, int depth)
{
    if (!depth_ok(d, depth))
        return;
    size_t bytes = 0;
    for (size_t i = 0; i < g->n_inits; i++)
        if (g->inits[i] && g->inits[i]->init)
            bytes += g->inits[i]->init->nbytes;
    text_indent(d, indent);
    if (label) {
        text_name(d, label);
        fputs(" = ", d->out);
    }
    fputs("graph ", d->out);
    text_name(d, g->name);
    fprintf(d->out, ": %zu node%s, %zu initializer%s (%zu bytes)\n", g->n_nodes,
            plural(g->n_nodes), g->n_inits, plural(g->n_inits), bytes);
    for (size_t i = 0; i < g->n_inputs; i++)
        if (g->inputs[i])
            text_value_line(d, "input", g->inputs[i], indent + 2);
    for (size_t i = 0; i < g->n_outputs; i++)
        if (g->outputs[i])
            text_value_line(d, "output", g->outputs[i], indent + 2);
    for (const struct gf_node *n = g->first; n; n = n->next)
        text_node(d, n, indent, depth);
}

static void text_opsets(struct dump *d, size_t n, const struct gf_opset *ops)
{
    for (size_t i = 0; i < n; i++) {
        fputs(i ? ", " : "", d->out);
        text_name(d, is_onnx_domain(ops[i].domain) ? "ai.onnx" : ops[i].domain);
        fprintf(d->out, " %" PRId64, ops[i].version);
    }
}

/* function domain.Name(x, y) -> z [attributes alpha, beta] {opset ...} */
static void text_function(struct dump *d, const struct gf_function *f)
{
    fputs("function ", d->out);
    text_op(d, f->domain, f->name);
    fputc('(', d->out);
    if (f->body)
        text_value_list(d, f->body->n_inputs, f->body->inputs);
    fputs(") -> ", d->out);
    if (f->body)
        text_value_list(d, f->body->n_outputs, f->body->outputs);
    for (size_t i = 0; i < f->n_attr_names; i++) {
        fputs(i ? ", " : " [attributes ", d->out);
        text_name(d, f->attr_names[i]);
    }
    fputs(f->n_attr_names ? "]" : "", d->out);
    if (f->n_opsets) {
        fputs(" {opset ", d->out);
        text_opsets(d, f->n_opsets, f->opsets);
        fputc('}', d->out);
    }
    fputc('\n', d->out);
    for (const struct gf_node *n = f->body ? f->body->first : NULL; n; n = n->next)
        text_node(d, n, 4, 1);
}

static void text_model(struct dump *d)
{
    const struct gf_model *m = d->m;
    fprintf(d->out, "model: ir_version %" PRId64, m->ir_version);
    if (m->n_opsets) {
        fputs(", opset ", d->out);
        text_opsets(d, m->n_opsets, m->opsets);
    }
    if (m->producer_name && m->producer_name[0]) {
        fputs(", producer ", d->out);
        text_name(d, m->producer_name);
        if (m->producer_version && m->producer_version[0]) {
            fputc(' ', d->out);
            text_name(d, m->producer_version);
        }
    }
    fputc('\n', d->out);
    text_graph(d, m->graph, 0, NULL, 0);
    for (size_t i = 0; i < m->n_functions; i++)
        if (m->functions[i])
            text_function(d, m->functions[i]);
}

/* ---- DOT ------------------------------------------------------------------- */

/* Escapes n bytes for a DOT double-quoted string.  Backslashes are doubled
 * (DOT reads \n, \l, \N... in labels), & becomes &amp; (DOT expands HTML
 * entities), control bytes and ill-formed UTF-8 show as \xNN. */
static void dot_esc_n(struct dump *d, const char *s, size_t n)
{
    const uint8_t *p = (const uint8_t *)s;
    for (size_t i = 0; i < n;) {
        size_t k = utf8_len(p + i, n - i);
        if (p[i] == '"')
            fputs("\\\"", d->out);
        else if (p[i] == '\\')
            fputs("\\\\", d->out);
        else if (p[i] == '&')
            fputs("&amp;", d->out);
        else if (k == 0 || p[i] < 0x20 || p[i] == 0x7f)
            fprintf(d->out, "\\\\x%02x", p[i]);
        else {
            fwrite(p + i, 1, k, d->out);
            i += k;
            continue;
        }
        i++;
    }
}

/* Escaped, and shortened in the middle when longer than DOT_MAX_LABEL so
 * that boxes stay narrow ("/model/layers.0/...attn/q_proj/MatMul"). */
static void dot_esc(struct dump *d, const char *s)
{
    s = str_or_empty(s);
    size_t n = strlen(s);
    if (n <= DOT_MAX_LABEL) {
        dot_esc_n(d, s, n);
        return;
    }
    size_t head = DOT_MAX_LABEL / 2, tail = n - DOT_MAX_LABEL / 2;
    while (head > 0 && ((uint8_t)s[head] & 0xC0) == 0x80)
        head--; /* cut before a UTF-8 continuation byte, never inside */
    while (tail < n && ((uint8_t)s[tail] & 0xC0) == 0x80)
        tail++;
    dot_esc_n(d, s, head);
    fputs("...", d->out);
    dot_esc_n(d, s + tail, n - tail);
}

static void dot_type(struct dump *d, const struct gf_type *t)
{
    char buf[1024];
    if (t->kind == GF_TYPE_TENSOR) {
        fputs(gf_dtype_name(t->dtype), d->out);
        dot_esc_n(d, buf, strlen(shape_str(t, buf, sizeof(buf))));
    } else if (t->kind == GF_TYPE_OTHER) {
        dot_esc(d, packed_type_desc(t->packed, buf, sizeof(buf)));
    }
}

enum dot_value_style { DV_INPUT, DV_INIT, DV_OUTPUT, DV_DANGLING };

/* A value drawn as a DOT node: `key` identifies it (the value itself, or
 * the graph-output slot, since a value may be listed as output twice). */
static void dot_value_node(struct dump *d, const void *key, const struct gf_value *v,
                           enum dot_value_style style, int indent)
{
    static const char *const attrs[] = {
        [DV_INPUT] = "shape=ellipse, fillcolor=\"#cfe2f3\"",
        [DV_INIT] = ("shape=box, fillcolor=\"#eeeeee\", fontsize=8, height=0.2, "
                     "margin=\"0.04,0.02\""),
        [DV_OUTPUT] = "shape=ellipse, peripheries=2, fillcolor=\"#d9ead3\"",
        [DV_DANGLING] = "shape=plaintext, style=\"\", fontcolor=\"#cc0000\"",
    };
    int id = id_add(d, key);
    if (id < 0)
        return;
    text_indent(d, indent);
    fprintf(d->out, "%c%d [label=\"", style == DV_OUTPUT ? 'o' : 'v', id);
    dot_esc(d, v->name);
    if (v->type.kind != GF_TYPE_NONE) {
        fputs("\\n", d->out);
        dot_type(d, &v->type);
    }
    if (style == DV_DANGLING)
        fputs("\\n(undefined)", d->out);
    fprintf(d->out, "\", %s];\n", attrs[style]);
}

static bool dot_inits_hidden(const struct gf_graph *g)
{
    return g && g->n_inits > DOT_MAX_INITS;
}

static void dot_nodes(struct dump *d, const struct gf_graph *g, int indent, int depth);

/* A subgraph as a cluster, with an invisible anchor for the edge from the
 * node that owns it. */
static void dot_cluster(struct dump *d, const struct gf_graph *g, const char *attr,
                        int indent, int depth)
{
    int id = id_add(d, g);
    if (id < 0 || !depth_ok(d, depth))
        return;
    text_indent(d, indent);
    fprintf(d->out, "subgraph cluster_%d {\n", id);
    text_indent(d, indent + 4);
    fputs("label=\"", d->out);
    dot_esc(d, attr);
    fputs(": ", d->out);
    dot_esc(d, g->name);
    if (dot_inits_hidden(g))
        fprintf(d->out, "\\n(%zu initializers not shown)", g->n_inits);
    fputs("\"; style=\"rounded,dashed\"; color=\"#888888\";\n", d->out);
    text_indent(d, indent + 4);
    fprintf(d->out, "a%d [shape=point, style=invis];\n", id);
    dot_nodes(d, g, indent + 4, depth);
    text_indent(d, indent);
    fputs("}\n", d->out);
}

static void dot_op_node(struct dump *d, const struct gf_node *n, int indent)
{
    int id = id_add(d, n);
    if (id < 0)
        return;
    text_indent(d, indent);
    fprintf(d->out, "n%d [label=\"", id);
    if (!is_onnx_domain(n->domain)) {
        dot_esc(d, n->domain);
        fputc('.', d->out);
    }
    dot_esc(d, n->op_type);
    if (n->name && n->name[0]) {
        fputs("\\n", d->out);
        dot_esc(d, n->name);
    } else {
        fprintf(d->out, "\\n#%d", n->id);
    }
    enum category c = op_category(n);
    fprintf(d->out, "\", fillcolor=\"%s\"%s];\n", categories[c].color,
            c == CAT_FUSED ? ", penwidth=2" : ""); /* what graphfuse made */
}

/* Pass 1: every DOT node of graph g (its subgraphs as nested clusters). */
static void dot_nodes(struct dump *d, const struct gf_graph *g, int indent, int depth)
{
    bool hide = dot_inits_hidden(g);
    for (size_t i = 0; i < g->n_inputs; i++) {
        const struct gf_value *v = g->inputs[i];
        if (v && !(v->init && hide) && id_get(d, v) < 0)
            dot_value_node(d, v, v, v->init ? DV_INIT : DV_INPUT, indent);
    }
    for (size_t i = 0; i < g->n_inits && !hide; i++)
        if (g->inits[i] && id_get(d, g->inits[i]) < 0)
            dot_value_node(d, g->inits[i], g->inits[i], DV_INIT, indent);
    for (const struct gf_node *n = g->first; n; n = n->next) {
        dot_op_node(d, n, indent);
        for (size_t i = 0; i < n->n_inputs; i++) {
            const struct gf_value *v = n->inputs[i];
            if (v && !v->producer && !v->init && !v->is_input && id_get(d, v) < 0)
                dot_value_node(d, v, v, DV_DANGLING, indent);
        }
        for (size_t i = 0; i < n->n_attrs; i++)
            for (size_t k = 0; k < attr_n_graphs(&n->attrs[i]); k++)
                if (attr_graph(&n->attrs[i], k))
                    dot_cluster(d, attr_graph(&n->attrs[i], k), n->attrs[i].name,
                                indent, depth + 1);
    }
    for (size_t i = 0; i < g->n_outputs; i++) {
        const struct gf_value *v = g->outputs[i];
        if (v && !v->producer && !v->init && !v->is_input && id_get(d, v) < 0)
            dot_value_node(d, v, v, DV_DANGLING, indent);
        if (v)
            dot_value_node(d, &g->outputs[i], v, DV_OUTPUT, indent);
    }
}

/* Writes "n3" or "v7", the DOT node a value comes from; false when it is
 * not drawn (a hidden initializer). */
static bool dot_source(struct dump *d, const struct gf_value *v)
{
    int id = v->producer ? id_get(d, v->producer) : -1;
    if (id >= 0) {
        fprintf(d->out, "    n%d -> ", id);
        return true;
    }
    id = id_get(d, v);
    if (id < 0)
        return false;
    fprintf(d->out, "    v%d -> ", id);
    return true;
}

static void dot_edge_attrs(struct dump *d, const struct gf_value *v, const char *style)
{
    char buf[1024];
    const char *sep = " [";
    if (!v->producer && v->init) {
        fputs(" [style=dashed", d->out); /* weights: their shape is on the box */
        sep = ", ";
    } else if (shape_str(&v->type, buf, sizeof(buf))[0]) {
        fputs(" [label=\"", d->out);
        dot_esc_n(d, buf, strlen(buf));
        fputc('"', d->out);
        sep = ", ";
    }
    if (style) {
        fprintf(d->out, "%s%s", sep, style);
        sep = ", ";
    }
    fputs(sep[0] == ',' ? "];\n" : ";\n", d->out);
}

/* Pass 2: the edges of g and of its subgraphs, all written at the top
 * level: an edge statement inside a cluster would pull both its ends into
 * that cluster. */
static void dot_edges(struct dump *d, const struct gf_graph *g, int depth)
{
    if (!depth_ok(d, depth))
        return;
    for (const struct gf_node *n = g->first; n; n = n->next) {
        int nid = id_get(d, n);
        for (size_t i = 0; i < n->n_inputs && nid >= 0; i++)
            if (n->inputs[i] && dot_source(d, n->inputs[i])) {
                fprintf(d->out, "n%d", nid);
                dot_edge_attrs(d, n->inputs[i], NULL);
            }
        for (size_t i = 0; i < n->n_attrs && nid >= 0; i++) {
            const struct gf_attr *a = &n->attrs[i];
            for (size_t k = 0; k < attr_n_graphs(a); k++) {
                const struct gf_graph *sub = attr_graph(a, k);
                int sid = sub ? id_get(d, sub) : -1;
                if (sid < 0)
                    continue;
                fprintf(d->out, "    n%d -> a%d [lhead=cluster_%d, style=dotted, "
                        "arrowhead=odiamond, label=\"", nid, sid, sid);
                dot_esc(d, a->name);
                fputs("\"];\n", d->out);
                dot_edges(d, sub, depth + 1);
            }
        }
    }
    for (size_t i = 0; i < g->n_outputs; i++) {
        int oid = id_get(d, &g->outputs[i]);
        if (oid >= 0 && dot_source(d, g->outputs[i])) {
            fprintf(d->out, "o%d", oid);
            dot_edge_attrs(d, g->outputs[i], "style=bold");
        }
    }
}

static void dot_model(struct dump *d)
{
    const struct gf_graph *g = d->m->graph;
    fputs("digraph graphfuse {\n    graph [rankdir=TB, compound=true, "
          "fontname=\"Helvetica\", fontsize=11, labelloc=t, label=\"", d->out);
    dot_esc(d, g->name);
    if (dot_inits_hidden(g))
        fprintf(d->out, "\\n(%zu initializers not shown)", g->n_inits);
    fputs("\"];\n    node [fontname=\"Helvetica\", fontsize=10, shape=box, "
          "style=\"rounded,filled\", fillcolor=\"#ffffff\"];\n"
          "    edge [fontname=\"Helvetica\", fontsize=8, color=\"#555555\"];\n",
          d->out);
    dot_nodes(d, g, 4, 0);
    dot_edges(d, g, 0);
    fputs("}\n", d->out);
}

/* ---- JSON ------------------------------------------------------------------ */

/* JSON string of n bytes: control bytes escaped, well-formed UTF-8 kept,
 * every other byte written as \u00XX (so an escape in 0080..00FF always
 * stands for a raw byte: real characters there are written unescaped). */
static void json_str_f(FILE *out, const uint8_t *p, size_t n)
{
    fputc('"', out);
    for (size_t i = 0; i < n;) {
        uint8_t c = p[i];
        size_t k = utf8_len(p + i, n - i);
        const char *esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n"
                        : c == '\t' ? "\\t" : c == '\r' ? "\\r" : c == '\b' ? "\\b"
                        : c == '\f' ? "\\f" : NULL;
        if (esc)
            fputs(esc, out);
        else if (k == 0 || c < 0x20 || c == 0x7f)
            fprintf(out, "\\u%04x", c);
        else {
            fwrite(p + i, 1, k, out);
            i += k;
            continue;
        }
        i++;
    }
    fputc('"', out);
}

static void json_str_n(struct dump *d, const uint8_t *p, size_t n)
{
    json_str_f(d->out, p, n);
}

void gf_json_write_string(FILE *out, const char *s)
{
    s = s ? s : "";
    json_str_f(out, (const uint8_t *)s, strlen(s));
}

/* Before any value or key: the comma and line break it needs. */
static void json_prefix(struct dump *d)
{
    if (d->after_key) {
        d->after_key = false;
        return;
    }
    if (d->level == 0)
        return;
    if (!d->first[d->level])
        fputc(',', d->out);
    if (d->inl[d->level])
        fputs(d->first[d->level] ? "" : " ", d->out);
    else
        fprintf(d->out, "\n%*s", 2 * d->level, "");
    d->first[d->level] = false;
}

/* Opens '{' or '['; an inline container (and all inside it) is on one line. */
static void json_open(struct dump *d, char c, bool inl)
{
    json_prefix(d);
    fputc(c, d->out);
    if (d->level + 1 >= JSON_MAX_LEVEL) { /* unreachable: depth_ok comes first */
        fail(d, gf_error(GF_ERR_INTERNAL, "dump: JSON nesting too deep"));
        return;
    }
    d->inl[d->level + 1] = inl || d->inl[d->level];
    d->first[++d->level] = true;
}

static void json_close(struct dump *d, char c)
{
    if (!d->first[d->level] && !d->inl[d->level])
        fprintf(d->out, "\n%*s", 2 * (d->level - 1), "");
    fputc(c, d->out);
    if (d->level > 0)
        d->level--;
}

static void json_key(struct dump *d, const char *key)
{
    json_prefix(d);
    json_str_n(d, (const uint8_t *)key, strlen(key));
    fputs(": ", d->out);
    d->after_key = true;
}

static void json_str(struct dump *d, const char *s)
{
    json_prefix(d);
    s = str_or_empty(s);
    json_str_n(d, (const uint8_t *)s, strlen(s));
}

static void json_bytes(struct dump *d, struct gf_bytes b)
{
    json_prefix(d);
    json_str_n(d, b.data, b.data ? b.len : 0);
}

static void json_raw(struct dump *d, const char *literal)
{
    json_prefix(d);
    fputs(literal, d->out);
}

static void json_int(struct dump *d, int64_t v)
{
    json_prefix(d);
    fprintf(d->out, "%" PRId64, v);
}

/* A number; NaN and the infinities, which JSON lacks, as strings. */
static void json_real(struct dump *d, double v, bool is_double)
{
    char buf[64];
    fmt_real(buf, sizeof(buf), v, is_double);
    if (isfinite(v))
        json_raw(d, buf);
    else
        json_str(d, buf);
}

static void json_kstr(struct dump *d, const char *key, const char *s)
{
    json_key(d, key);
    json_str(d, s);
}

static void json_kint(struct dump *d, const char *key, int64_t v)
{
    json_key(d, key);
    json_int(d, v);
}

/* [2, "batch", null] or null when the rank is unknown. */
static void json_shape(struct dump *d, const struct gf_type *t)
{
    if (t->kind != GF_TYPE_TENSOR || t->rank < 0 || (t->rank > 0 && !t->dims)) {
        json_raw(d, "null");
        return;
    }
    json_open(d, '[', true);
    for (int i = 0; i < t->rank; i++) {
        const struct gf_dim *dim = &t->dims[i];
        if (dim->value >= 0)
            json_int(d, dim->value);
        else if (dim->param)
            json_str(d, dim->param);
        else
            json_raw(d, "null");
    }
    json_close(d, ']');
}

/* {"name", "kind", "dtype", "shape", "type"} on one line. */
static void json_value(struct dump *d, const struct gf_value *v)
{
    static const char *const kinds[] = {"unknown", "tensor", "other"};
    const struct gf_type *t = &v->type;
    char buf[1024];
    json_open(d, '{', true);
    json_kstr(d, "name", v->name);
    json_kstr(d, "kind", t->kind <= GF_TYPE_OTHER ? kinds[t->kind] : "unknown");
    json_key(d, "dtype");
    if (t->kind == GF_TYPE_TENSOR && t->dtype != GF_UNDEFINED)
        json_str(d, gf_dtype_name(t->dtype));
    else
        json_raw(d, "null");
    json_key(d, "shape");
    json_shape(d, t);
    json_key(d, "type");
    if (t->kind == GF_TYPE_OTHER)
        json_str(d, packed_type_desc(t->packed, buf, sizeof(buf)));
    else
        json_raw(d, "null");
    json_close(d, '}');
}

static void json_value_list(struct dump *d, const char *key, size_t n,
                            struct gf_value *const *vs)
{
    json_key(d, key);
    json_open(d, '[', false);
    for (size_t i = 0; i < n; i++)
        if (vs[i])
            json_value(d, vs[i]);
    json_close(d, ']');
}

/* Names only, null for an omitted optional input or output. */
static void json_name_list(struct dump *d, const char *key, size_t n,
                           struct gf_value *const *vs)
{
    json_key(d, key);
    json_open(d, '[', true);
    for (size_t i = 0; i < n; i++) {
        if (vs[i])
            json_str(d, vs[i]->name);
        else
            json_raw(d, "null");
    }
    json_close(d, ']');
}

static void json_tensor_values(struct dump *d, const struct gf_tensor *t)
{
    char buf[64];
    json_open(d, '[', true);
    for (size_t i = 0; i < t->nelem; i++) {
        if (t->dtype == GF_STRING) {
            json_bytes(d, t->strings[i]);
        } else if (elem_kind(t->dtype) == ELEM_REAL) {
            json_real(d, gf_tensor_get_f64(t, i), t->dtype == GF_DOUBLE);
        } else {
            fmt_elem(buf, sizeof(buf), t, i);
            json_raw(d, buf);
        }
    }
    json_close(d, ']');
}

/* {"name", "dtype", "shape", "bytes", "external", "values"} on one line. */
static void json_tensor(struct dump *d, const struct gf_tensor *t)
{
    if (!t) {
        json_raw(d, "null");
        return;
    }
    json_open(d, '{', true);
    json_kstr(d, "name", t->name);
    json_kstr(d, "dtype", gf_dtype_name(t->dtype));
    json_key(d, "shape");
    json_open(d, '[', true);
    for (int i = 0; i < t->rank && t->dims; i++)
        json_int(d, t->dims[i]);
    json_close(d, ']');
    json_kint(d, "bytes", (int64_t)t->nbytes);
    json_key(d, "external");
    if (t->ext) {
        json_open(d, '{', true);
        json_kstr(d, "location", t->ext->location);
        json_kint(d, "offset", t->ext->offset);
        json_kint(d, "length", t->ext->length);
        json_close(d, '}');
    } else {
        json_raw(d, "null");
    }
    json_key(d, "values");
    if (tensor_small(t))
        json_tensor_values(d, t);
    else
        json_raw(d, "null");
    json_close(d, '}');
}

static void json_graph(struct dump *d, const struct gf_graph *g, int depth);

static void json_attr_elem(struct dump *d, const struct gf_attr *a, size_t i, int depth)
{
    char buf[1024];
    switch (a->type) {
    case GF_ATTR_FLOATS: json_real(d, a->floats[i], false); break;
    case GF_ATTR_INTS: json_int(d, a->ints[i]); break;
    case GF_ATTR_STRINGS: json_bytes(d, a->strings[i]); break;
    case GF_ATTR_TENSORS: json_tensor(d, a->tensors[i]); break;
    case GF_ATTR_GRAPHS: json_graph(d, a->graphs[i], depth + 1); break;
    case GF_ATTR_TYPE_PROTOS:
        json_str(d, packed_type_desc(a->packed_list[i], buf, sizeof(buf)));
        break;
    default: /* sparse tensors stay packed: say how big */
        json_open(d, '{', true);
        json_kint(d, "packed_bytes", (int64_t)a->packed_list[i].len);
        json_close(d, '}');
        break;
    }
}

static void json_attr_value(struct dump *d, const struct gf_attr *a, int depth)
{
    char buf[1024];
    if (attr_is_list(a->type)) {
        size_t n = attr_list(a) ? a->n : 0;
        json_open(d, '[', a->type != GF_ATTR_GRAPHS);
        for (size_t i = 0; i < n; i++)
            json_attr_elem(d, a, i, depth);
        json_close(d, ']');
        return;
    }
    switch (a->type) {
    case GF_ATTR_FLOAT: json_real(d, a->f, false); break;
    case GF_ATTR_INT: json_int(d, a->i); break;
    case GF_ATTR_STRING: json_bytes(d, a->s); break;
    case GF_ATTR_TENSOR: json_tensor(d, a->t); break;
    case GF_ATTR_GRAPH: json_graph(d, a->g, depth + 1); break;
    case GF_ATTR_SPARSE_TENSOR:
        json_open(d, '{', true);
        json_kint(d, "packed_bytes", (int64_t)a->packed.len);
        json_close(d, '}');
        break;
    case GF_ATTR_TYPE_PROTO:
        json_str(d, packed_type_desc(a->packed, buf, sizeof(buf)));
        break;
    default: json_raw(d, "null"); break;
    }
}

/* "name": {"type": "ints", "ref": null, "value": [1, 2]} */
static void json_attrs(struct dump *d, const struct gf_node *n, int depth)
{
    json_key(d, "attributes");
    json_open(d, '{', false);
    for (size_t i = 0; i < n->n_attrs; i++) {
        const struct gf_attr *a = &n->attrs[i];
        bool graphs = !a->ref_attr_name &&
                      (a->type == GF_ATTR_GRAPH || a->type == GF_ATTR_GRAPHS);
        json_key(d, str_or_empty(a->name));
        json_open(d, '{', !graphs);
        json_kstr(d, "type", gf_attr_type_name(a->type));
        json_key(d, "ref");
        if (a->ref_attr_name)
            json_str(d, a->ref_attr_name);
        else
            json_raw(d, "null");
        json_key(d, "value");
        if (a->ref_attr_name)
            json_raw(d, "null");
        else
            json_attr_value(d, a, depth);
        json_close(d, '}');
    }
    json_close(d, '}');
}

static void json_node(struct dump *d, const struct gf_node *n, int depth)
{
    json_open(d, '{', false);
    json_kint(d, "id", n->id);
    json_kstr(d, "name", n->name);
    json_kstr(d, "op_type", n->op_type);
    json_kstr(d, "domain", n->domain);
    json_kstr(d, "category", categories[op_category(n)].name);
    json_key(d, "known");
    json_raw(d, n->op != GF_OP_UNKNOWN ? "true" : "false");
    json_name_list(d, "inputs", n->n_inputs, n->inputs);
    json_name_list(d, "outputs", n->n_outputs, n->outputs);
    json_attrs(d, n, depth);
    json_close(d, '}');
}

static void json_nodes(struct dump *d, const struct gf_graph *g, int depth)
{
    json_key(d, "nodes");
    json_open(d, '[', false);
    for (const struct gf_node *n = g->first; n; n = n->next)
        json_node(d, n, depth);
    json_close(d, ']');
}

static void json_graph(struct dump *d, const struct gf_graph *g, int depth)
{
    if (!g || !depth_ok(d, depth)) {
        json_raw(d, "null");
        return;
    }
    json_open(d, '{', false);
    json_kstr(d, "name", g->name);
    json_kstr(d, "doc_string", g->doc_string);
    json_value_list(d, "inputs", g->n_inputs, g->inputs);
    json_value_list(d, "outputs", g->n_outputs, g->outputs);
    json_key(d, "initializers");
    json_open(d, '[', false);
    for (size_t i = 0; i < g->n_inits; i++)
        if (g->inits[i])
            json_tensor(d, g->inits[i]->init);
    json_close(d, ']');
    json_kint(d, "sparse_initializer_count", (int64_t)g->n_sparse_inits);
    json_nodes(d, g, depth);
    json_value_list(d, "values", g->n_values, g->values);
    json_close(d, '}');
}

static void json_opsets(struct dump *d, size_t n, const struct gf_opset *ops)
{
    json_key(d, "opset_import");
    json_open(d, '[', false);
    for (size_t i = 0; i < n; i++) {
        json_open(d, '{', true);
        json_kstr(d, "domain", ops[i].domain);
        json_kint(d, "version", ops[i].version);
        json_close(d, '}');
    }
    json_close(d, ']');
}

static void json_function(struct dump *d, const struct gf_function *f)
{
    const struct gf_graph *b = f->body;
    json_open(d, '{', false);
    json_kstr(d, "name", f->name);
    json_kstr(d, "domain", f->domain);
    json_kstr(d, "doc_string", f->doc_string);
    json_key(d, "attributes");
    json_open(d, '[', true);
    for (size_t i = 0; i < f->n_attr_names; i++)
        json_str(d, f->attr_names[i]);
    json_close(d, ']');
    json_opsets(d, f->n_opsets, f->opsets);
    json_name_list(d, "inputs", b ? b->n_inputs : 0, b ? b->inputs : NULL);
    json_name_list(d, "outputs", b ? b->n_outputs : 0, b ? b->outputs : NULL);
    if (b) {
        json_nodes(d, b, 1);
    } else {
        json_key(d, "nodes");
        json_raw(d, "[]");
    }
    json_close(d, '}');
}

static void json_model(struct dump *d)
{
    const struct gf_model *m = d->m;
    json_open(d, '{', false);
    json_kstr(d, "format", "graphfuse-dump");
    json_kint(d, "version", 1);
    json_kstr(d, "generator", "graphfuse " GF_VERSION);
    json_key(d, "model");
    json_open(d, '{', false);
    json_kint(d, "ir_version", m->ir_version);
    json_opsets(d, m->n_opsets, m->opsets);
    json_kstr(d, "producer_name", m->producer_name);
    json_kstr(d, "producer_version", m->producer_version);
    json_kstr(d, "domain", m->domain);
    json_kint(d, "model_version", m->model_version);
    json_kstr(d, "doc_string", m->doc_string);
    json_key(d, "metadata");
    json_open(d, '[', false);
    for (size_t i = 0; i < m->n_metadata; i++) {
        json_open(d, '{', true);
        json_kstr(d, "key", m->metadata[i].key);
        json_kstr(d, "value", m->metadata[i].value);
        json_close(d, '}');
    }
    json_close(d, ']');
    json_close(d, '}');
    json_key(d, "graph");
    json_graph(d, m->graph, 0);
    json_key(d, "functions");
    json_open(d, '[', false);
    for (size_t i = 0; i < m->n_functions; i++)
        if (m->functions[i])
            json_function(d, m->functions[i]);
    json_close(d, ']');
    json_close(d, '}');
    fputc('\n', d->out);
}

/* ---- entry point ------------------------------------------------------------ */

enum gf_status gf_model_dump(const struct gf_model *m, enum gf_dump_format fmt,
                             FILE *out)
{
    if (!m || !m->graph || !out)
        return gf_error(GF_ERR_ARG, "dump: %s", out ? "no model" : "no output stream");
    if (fmt != GF_DUMP_TEXT && fmt != GF_DUMP_DOT && fmt != GF_DUMP_JSON)
        return gf_error(GF_ERR_ARG, "dump: unknown format %d", (int)fmt);
    struct dump *d = calloc(1, sizeof(*d)); /* ~2 KiB of JSON state: not on the stack */
    if (!d)
        return gf_error(GF_ERR_NOMEM, "dump: out of memory");
    d->out = out;
    d->m = m;
    if (fmt == GF_DUMP_TEXT)
        text_model(d);
    else if (fmt == GF_DUMP_DOT)
        dot_model(d);
    else
        json_model(d);
    enum gf_status st = d->st;
    free(d->ids.keys);
    free(d->ids.vals);
    free(d);
    if (st != GF_OK)
        return st; /* message set where it failed */
    errno = 0;
    if (fflush(out) != 0 || ferror(out))
        return gf_error(GF_ERR_IO, "dump: writing the output failed%s%s",
                        errno ? ": " : "", errno ? strerror(errno) : "");
    return GF_OK;
}

bool gf_dump_format_parse(const char *name, enum gf_dump_format *fmt)
{
    static const struct { const char *name; enum gf_dump_format fmt; } names[] = {
        {"text", GF_DUMP_TEXT}, {"dot", GF_DUMP_DOT}, {"json", GF_DUMP_JSON}};
    for (size_t i = 0; name && i < sizeof(names) / sizeof(names[0]); i++)
        if (strcmp(name, names[i].name) == 0) {
            *fmt = names[i].fmt;
            return true;
        }
    return false;
}

enum gf_dump_format gf_dump_format_of_path(const char *path)
{
    const char *dot = path ? strrchr(path, '.') : NULL;
    enum gf_dump_format fmt = GF_DUMP_TEXT;
    if (dot && !strchr(dot, '/') && !gf_dump_format_parse(dot + 1, &fmt))
        fmt = GF_DUMP_TEXT;
    return fmt;
}

enum gf_status gf_model_dump_file(const struct gf_model *m, enum gf_dump_format fmt,
                                  const char *path)
{
    /* written beside the target and renamed at the end: no partial file */
    char *tmp = NULL;
    int fd = gf_file_create_temp(path, &tmp); /* exclusive, the replaced file's mode */
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) {
        enum gf_status st = gf_error(GF_ERR_IO, "%s: cannot create file: %s", path,
                                     strerror(errno));
        if (fd >= 0)
            close(fd), gf_file_temp_discard(tmp);
        free(tmp);
        return st;
    }
    enum gf_status st = gf_model_dump(m, fmt, f);
    bool ok = fclose(f) == 0 && st == GF_OK;
    if (ok && rename(tmp, path) != 0)
        ok = false;
    if (!ok) {
        int e = errno;
        gf_file_temp_discard(tmp);
        if (st == GF_OK)
            st = gf_error(GF_ERR_IO, "%s: write failed: %s", path, strerror(e));
    } else {
        gf_file_temp_done(tmp);
    }
    free(tmp);
    return st;
}
