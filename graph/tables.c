/* Element types and the op table generated from ops.def. */
#include <stdint.h>
#include <string.h>

#include "gf_graph.h"

static const struct {
    const char *name;
    size_t size;
} dtypes[GF_DTYPE_COUNT] = {
    [GF_UNDEFINED] = {"undefined", 0},  [GF_FLOAT] = {"float", 4},
    [GF_UINT8] = {"uint8", 1},          [GF_INT8] = {"int8", 1},
    [GF_UINT16] = {"uint16", 2},        [GF_INT16] = {"int16", 2},
    [GF_INT32] = {"int32", 4},          [GF_INT64] = {"int64", 8},
    [GF_STRING] = {"string", 0},        [GF_BOOL] = {"bool", 1},
    [GF_FLOAT16] = {"float16", 2},      [GF_DOUBLE] = {"double", 8},
    [GF_UINT32] = {"uint32", 4},        [GF_UINT64] = {"uint64", 8},
    [GF_COMPLEX64] = {"complex64", 8},  [GF_COMPLEX128] = {"complex128", 16},
    [GF_BFLOAT16] = {"bfloat16", 2},    [GF_FLOAT8E4M3FN] = {"float8e4m3fn", 1},
    [GF_FLOAT8E4M3FNUZ] = {"float8e4m3fnuz", 1},
    [GF_FLOAT8E5M2] = {"float8e5m2", 1}, [GF_FLOAT8E5M2FNUZ] = {"float8e5m2fnuz", 1},
    [GF_UINT4] = {"uint4", 1},          [GF_INT4] = {"int4", 1},
};

bool gf_dtype_valid(int t)
{
    return t > GF_UNDEFINED && t < GF_DTYPE_COUNT;
}

size_t gf_dtype_size(enum gf_dtype t)
{
    return gf_dtype_valid(t) ? dtypes[t].size : 0;
}

/* Saturates at SIZE_MAX instead of wrapping: a wrapped count once sized
 * a 128-byte buffer for 2^62 floats; SIZE_MAX fails every size check and
 * every allocation instead. */
size_t gf_dtype_bytes(enum gf_dtype t, size_t n)
{
    size_t bytes;
    if (t == GF_UINT4 || t == GF_INT4)
        return n / 2 + n % 2;
    if (__builtin_mul_overflow(n, gf_dtype_size(t), &bytes))
        return SIZE_MAX;
    return bytes;
}

const char *gf_dtype_name(enum gf_dtype t)
{
    return (t >= 0 && t < GF_DTYPE_COUNT) ? dtypes[t].name : "?";
}

static const struct gf_op_info ops[GF_OP_COUNT] = {
    [GF_OP_UNKNOWN] = {"?", "", 0, -1, 0, -1},
#define GF_OP(id, name, domain, min_in, max_in, min_out, max_out) \
    [GF_OP_##id] = {name, domain, min_in, max_in, min_out, max_out},
#include "ops.def"
#undef GF_OP
};

const struct gf_op_info *gf_op_get_info(enum gf_op op)
{
    return (op > 0 && op < GF_OP_COUNT) ? &ops[op] : &ops[GF_OP_UNKNOWN];
}

enum gf_op gf_op_lookup(const char *domain, const char *op_type)
{
    if (!op_type)
        return GF_OP_UNKNOWN;
    if (!domain || strcmp(domain, "ai.onnx") == 0)
        domain = "";
    for (int i = 1; i < GF_OP_COUNT; i++)
        if (strcmp(ops[i].name, op_type) == 0 && strcmp(ops[i].domain, domain) == 0)
            return (enum gf_op)i;
    /* The fusion pass names a second function body of one fused op
     * "RMSNorm_2" (another exporter form): "OP_N" is still op OP. */
    if (strcmp(domain, "graphfuse") == 0) {
        const char *us = strrchr(op_type, '_');
        size_t len = us ? (size_t)(us - op_type) : 0;
        if (!us || !us[1] || us[1] == '0' || strspn(us + 1, "0123456789") != strlen(us + 1))
            return GF_OP_UNKNOWN;
        for (int i = 1; i < GF_OP_COUNT; i++)
            if (strlen(ops[i].name) == len && strncmp(ops[i].name, op_type, len) == 0 &&
                strcmp(ops[i].domain, domain) == 0)
                return (enum gf_op)i;
    }
    return GF_OP_UNKNOWN;
}

const char *gf_attr_type_name(enum gf_attr_type t)
{
    static const char *names[] = {
        "undefined", "float", "int", "string", "tensor", "graph", "floats", "ints",
        "strings", "tensors", "graphs", "sparse_tensor", "sparse_tensors",
        "type_proto", "type_protos",
    };
    return (t >= 0 && (size_t)t < sizeof(names) / sizeof(names[0])) ? names[t] : "?";
}
