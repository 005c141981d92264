/*
 * fused_act.cl — the fused activations of domain graphfuse and their
 * gradients on the device (host side: fused_act.c; definitions: README
 * "Fused ops", kernels/cpu/fused_grad.c):
 *
 *   glu          SwiGLU, GeGLU, SiLU, Gelu over same-shape operands
 *   glu_bcast    the same with G, U broadcast (strides per operand)
 *   glu_grad     SwiGLUGrad, GeGLUGrad: dG, dU
 *   rope         RoPE (dir 0) and RoPEGrad (dir 1), Cos / Sin broadcast
 *   epi_grad     MatMulEpilogueGrad: dZ = dY act'(Z), and dBias partial rows
 *
 * Elementwise kernels walk the tensor grid-stride, VEC elements at a time
 * (-DVEC=4: float4, the n % 4 tail done by work-item 0).  Tensors are of
 * storage.cl's store_t (fp32, fp16 or bf16: loaded to float, computed in
 * float, stored rounded); epi_grad's partial rows are float.  Y may be the
 * memory of an input of its shape: every element is read before it is
 * written, by the same work-item.
 */
#ifndef VEC
#define VEC 1
#endif

/* vt: VEC floats; LDV / STV: vector i of a store_t buffer */
#if VEC == 4
typedef float4 vt;
#if defined(GF_STORE_F16) || defined(GF_STORE_BF16)
#define LDV(p, i) LD4(p, i)
#define STV(p, i, v) ST4(p, i, v)
#else
#define LDV(p, i) (((__global const float4 *)(p))[i])
#define STV(p, i, v) (((__global float4 *)(p))[i] = (v))
#endif
#else
typedef float vt;
#define LDV(p, i) LD(p, i)
#define STV(p, i, v) ST(p, i, v)
#endif

#define ACT_SILU 0u
#define ACT_GELU 1u      /* erf form */
#define ACT_GELU_TANH 2u

/* f(x) for float or float4 x: x sigmoid(x), x Phi(x) (as x/2 erfc(-x/sqrt 2),
 * which keeps its precision for x << 0), or the tanh form as x sigmoid(2u). */
#define ACT(kind, x)                                                                      \
    ((kind) == ACT_SILU ? (x) * (1.0f / (1.0f + exp(-(x))))                              \
     : (kind) == ACT_GELU ? (x) * (0.5f * erfc((x) * -0.70710678118654752f))             \
                          : (x) / (1.0f + exp(-1.5957691216057308f * ((x) + 0.044715f * (x) * (x) * (x)))))

/* Y = f(G) (* U when gated); n elements, nv = n / VEC vectors. */
__kernel void glu(__global const store_t *g, __global const store_t *u, __global store_t *y,
                  ulong nv, ulong n, uint kind, uint gated)
{
    for (size_t i = get_global_id(0); i < nv; i += get_global_size(0)) {
        vt v = LDV(g, i);
        vt a = ACT(kind, v);
        STV(y, i, gated ? a * LDV(u, i) : a);
    }
#if VEC == 4
    if (get_global_id(0) == 0) {
        for (size_t j = nv * 4; j < n; j++) {
            float v = LD(g, j);
            float a = ACT(kind, v);
            ST(y, j, gated ? a * LD(u, j) : a);
        }
    }
#endif
}

/* Output positions over merged axes: dims and the element strides of G
 * and U (0 along broadcast axes). */
typedef struct {
    uint rank;
    uint dims[8];
    uint sg[8];
    uint su[8];
} bcast_t;

__kernel void glu_bcast(__global const store_t *g, __global const store_t *u,
                        __global store_t *y, uint n, uint kind, uint gated, bcast_t b)
{
    for (uint i = get_global_id(0); i < n; i += get_global_size(0)) {
        uint rem = i, og = 0, ou = 0;
        for (int d = (int)b.rank - 1; d >= 0; d--) {
            uint ix = rem % b.dims[d];
            rem /= b.dims[d];
            og += ix * b.sg[d];
            ou += ix * b.su[d];
        }
        float v = LD(g, og);
        float a = ACT(kind, v);
        ST(y, i, gated ? a * LD(u, ou) : a);
    }
}

#define W_DG 1u
#define W_DU 2u

/* One element of the gradient of Y = f(G) U:
 *   SwiGLU: s = sigmoid(G), dU = dY G s, dG = dY U s (1 + G (1 - s))
 *   GeGLU:  dU = dY gelu(G), dG = dY U gelu'(G); gelu'(g) = Phi(g) + g phi(g),
 *           tanh form with s = sigmoid(2u): s + 2 g s (1 - s) sqrt(2/pi) (1 + 3 0.044715 g^2) */
#define GLU_GRAD(kind, T, dyv, gv, uv, dgo, duo)                                          \
    do {                                                                                  \
        T f_, d_;                                                                         \
        if ((kind) == ACT_SILU) {                                                         \
            T s_ = 1.0f / (1.0f + exp(-(gv)));                                            \
            f_ = (gv) * s_;                                                               \
            d_ = s_ + f_ * (1.0f - s_);                                                   \
        } else if ((kind) == ACT_GELU) {                                                  \
            T p_ = 0.5f * erfc((gv) * -0.70710678118654752f);                             \
            f_ = (gv) * p_;                                                               \
            d_ = p_ + (gv) * 0.39894228040143267794f * exp(-0.5f * (gv) * (gv));          \
        } else {                                                                          \
            const float c_ = 0.79788456080286535588f;                                     \
            T s_ = 1.0f / (1.0f + exp(-2.0f * c_ * ((gv) + 0.044715f * (gv) * (gv) * (gv)))); \
            f_ = (gv) * s_;                                                               \
            d_ = s_ + 2.0f * (gv) * s_ * (1.0f - s_) * c_ * (1.0f + 3.0f * 0.044715f * (gv) * (gv)); \
        }                                                                                 \
        duo = (dyv) * f_;                                                                 \
        dgo = (dyv) * (uv) * d_;                                                          \
    } while (0)

__kernel void glu_grad(__global const store_t *dy, __global const store_t *g,
                       __global const store_t *u, __global store_t *dg, __global store_t *du,
                       ulong nv, ulong n, uint kind, uint want)
{
    for (size_t i = get_global_id(0); i < nv; i += get_global_size(0)) {
        vt a = LDV(dy, i), gv = LDV(g, i), uv = LDV(u, i), og, ou;
        GLU_GRAD(kind, vt, a, gv, uv, og, ou);
        if (want & W_DG)
            STV(dg, i, og);
        if (want & W_DU)
            STV(du, i, ou);
    }
#if VEC == 4
    if (get_global_id(0) == 0) {
        for (size_t j = nv * 4; j < n; j++) {
            float a = LD(dy, j), gv = LD(g, j), uv = LD(u, j), og, ou;
            GLU_GRAD(kind, float, a, gv, uv, og, ou);
            if (want & W_DG)
                ST(dg, j, og);
            if (want & W_DU)
                ST(du, j, ou);
        }
    }
#endif
}

/* Rows of d = 2h along X's last axis; the rows' leading axes (merged) with
 * the strides of Cos and Sin over them, and their inner strides (0 or 1). */
typedef struct {
    uint rank;
    uint dims[8];
    uint sc[8];
    uint ss[8];
    uint lc, ls;
} rope_t;

/* Pair (j, j + h) of a row: a = x[j], b = x[j + h]
 *   dir 0 (RoPE):     y[j] = a c[j] - b s[j],      y[j + h] = b c[j + h] + a s[j + h]
 *   dir 1 (RoPEGrad): y[j] = a c[j] + b s[j + h],  y[j + h] = b c[j + h] - a s[j]
 * hv = h / VEC pairs of vectors per row (VEC 4 only with lc = ls = 1). */
__kernel void rope(__global const store_t *x, __global const store_t *cs,
                   __global const store_t *sn, __global store_t *y, uint rows, uint hv, uint dir,
                   rope_t p)
{
    size_t total = (size_t)rows * hv;
    for (size_t id = get_global_id(0); id < total; id += get_global_size(0)) {
        uint row = (uint)(id / hv), j = (uint)(id % hv);
        uint rem = row, oc = 0, os = 0;
        for (int d = (int)p.rank - 1; d >= 0; d--) {
            uint ix = rem % p.dims[d];
            rem /= p.dims[d];
            oc += ix * p.sc[d];
            os += ix * p.ss[d];
        }
        oc /= VEC;
        os /= VEC;
        size_t base = (size_t)row * 2 * hv;
        vt a = LDV(x, base + j), b = LDV(x, base + j + hv);
        vt c0 = LDV(cs, oc + j * p.lc), c1 = LDV(cs, oc + (j + hv) * p.lc);
        vt s0 = LDV(sn, os + j * p.ls), s1 = LDV(sn, os + (j + hv) * p.ls);
        if (dir == 0) {
            STV(y, base + j, a * c0 - b * s0);
            STV(y, base + j + hv, b * c1 + a * s1);
        } else {
            STV(y, base + j, a * c0 + b * s1);
            STV(y, base + j + hv, b * c1 - a * s0);
        }
    }
}

/* MatMulEpilogue's activations (kernels/cpu/fused_grad.c, "MatMulEpilogueGrad") */
#define E_NONE 0u
#define E_RELU 1u
#define E_GELU 2u
#define E_GELU_TANH 3u
#define E_SILU 4u
#define E_TANH 5u
#define E_SIGMOID 6u

/* act'(v) for float or float4 v; v is Y = act(Z) itself when from_y (relu,
 * tanh, sigmoid). */
#define EPI_D(T, act, from_y, v, out)                                                     \
    do {                                                                                  \
        T s_;                                                                             \
        if ((act) == E_RELU) {                                                            \
            out = select((T)(0.0f), (T)(1.0f), (v) > 0.0f);                               \
        } else if ((act) == E_TANH) {                                                     \
            s_ = (from_y) ? (v) : tanh(v);                                                \
            out = 1.0f - s_ * s_;                                                         \
        } else if ((act) == E_SIGMOID) {                                                  \
            s_ = (from_y) ? (v) : 1.0f / (1.0f + exp(-(v)));                              \
            out = s_ * (1.0f - s_);                                                       \
        } else if ((act) == E_SILU) {                                                     \
            s_ = 1.0f / (1.0f + exp(-(v)));                                               \
            out = s_ + (v) * s_ * (1.0f - s_);                                            \
        } else if ((act) == E_GELU || (act) == E_GELU_TANH) {                             \
            T f_;                                                                         \
            GLU_GRAD((act) == E_GELU ? ACT_GELU : ACT_GELU_TANH, T, (T)(1.0f), v,        \
                     (T)(1.0f), out, f_);                                                 \
        } else {                                                                          \
            out = (T)(1.0f);                                                              \
        }                                                                                 \
    } while (0)

/* Rows of m vectors: work-item (j, g) walks rows [g rpg, (g + 1) rpg) down
 * column vector j: dZ = dY act'(Z) (dZ may be dY or Z), and with want_db
 * the column sum of its rows into part[g m + j] (colsum adds the groups). */
__kernel void epi_grad(__global const store_t *dy, __global const store_t *z,
                       __global store_t *dz, __global vt *part, uint po, uint rows, uint m,
                       uint rpg, uint act, uint from_y, uint want_db)
{
    part += po;
    uint j = get_global_id(0), g = get_global_id(1);
    if (j >= m)
        return;
    vt acc = (vt)(0.0f);
    uint r1 = min(rows, (g + 1) * rpg);
    for (uint r = g * rpg; r < r1; r++) {
        size_t i = (size_t)r * m + j;
        vt v = LDV(z, i), d;
        EPI_D(vt, act, from_y, v, d);
        d *= LDV(dy, i);
        STV(dz, i, d);
        acc += d;
    }
    if (want_db)
        part[(size_t)g * m + j] = acc;
}
