/* Activation patterns: SiLU, GELU (exact and tanh) and the gated forms
 * SwiGLU and GeGLU built on them.  Pattern format: pattern.h; fused ops:
 * README "Fused ops". */
#include <string.h>

#include "pattern.h"

static bool float_pair(struct gf_match *m, int pn, const struct gf_value *a,
                       const struct gf_value *b)
{
    if (!gf_pat_float(a) || (b && !gf_pat_float(b)))
        return gf_match_fail(m, pn, "operands are not floating-point (or of unknown dtype)");
    if (b && a->type.dtype != b->type.dtype)
        return gf_match_fail(m, pn, "operands differ in dtype (%s, %s)",
                             gf_dtype_name(a->type.dtype), gf_dtype_name(b->type.dtype));
    return true;
}

/* ---- SiLU ----------------------------------------------------------------------------
 *   x ─Sigmoid─┐
 *   x ─────────Mul── y
 *   or:  x ─Swish(alpha 1)── y
 */
enum { SX };
static const struct gf_pcap silu_caps[] = {[SX] = GF_K_ANY("x")};
enum { S_SIG, S_ROOT };
static const struct gf_pnode silu_nodes[] = {
    [S_SIG] = {GF_P("sigmoid", GF_OP_SIGMOID, GF_C(SX))},
    [S_ROOT] = {GF_P("x*sigmoid", GF_OP_MUL, GF_C(SX), GF_N(S_SIG)), .flags = GF_PF_COMMUTE},
};
static const struct gf_pnode swish_nodes[] = {
    {GF_P("swish", GF_OP_UNKNOWN, GF_C(SX)), .op_name = "Swish"},
};

static bool silu_check(struct gf_match *m)
{
    int root = m->pat->n_nodes - 1;
    const struct gf_node *r = gf_match_node(m, root);
    if (r->op == GF_OP_UNKNOWN && gf_node_attr_float(r, "alpha", 1.0f) != 1.0f)
        return gf_match_fail(m, root, "alpha %g: SiLU is Swish with alpha 1",
                             (double)gf_node_attr_float(r, "alpha", 1.0f));
    return float_pair(m, root, gf_match_cap(m, SX), NULL);
}

static enum gf_status silu_rewrite(struct gf_match *m, struct gf_fused *f)
{
    f->op = GF_OP_SILU;
    return gf_fused_input(f, gf_match_cap(m, SX));
}

/* ---- SwiGLU ----------------------------------------------------------------------------
 *   g ─SiLU─┐                 g ─Sigmoid─┐
 *   u ──────Mul── y     or    u ────────Mul─┐
 *                             g ────────────Mul── y
 */
enum { GG, GU };
static const struct gf_pcap glu_caps[] = {[GG] = GF_K_ANY("gate"), [GU] = GF_K_ANY("up")};
enum { W_ACT, W_ROOT };
static const struct gf_pnode swiglu_nodes[] = {
    [W_ACT] = {GF_P("silu", GF_OP_SILU, GF_C(GG))},
    [W_ROOT] = {GF_P("silu*up", GF_OP_MUL, GF_N(W_ACT), GF_C(GU)), .flags = GF_PF_COMMUTE},
};
enum { V_SIG, V_MUL, V_ROOT };
static const struct gf_pnode swiglu2_nodes[] = {
    [V_SIG] = {GF_P("sigmoid", GF_OP_SIGMOID, GF_C(GG))},
    [V_MUL] = {GF_P("sigmoid*up", GF_OP_MUL, GF_N(V_SIG), GF_C(GU)), .flags = GF_PF_COMMUTE},
    [V_ROOT] = {GF_P("g*(...)", GF_OP_MUL, GF_C(GG), GF_N(V_MUL)), .flags = GF_PF_COMMUTE},
};

static bool glu_check(struct gf_match *m)
{
    return float_pair(m, m->pat->n_nodes - 1, gf_match_cap(m, GG), gf_match_cap(m, GU));
}

static enum gf_status swiglu_rewrite(struct gf_match *m, struct gf_fused *f)
{
    f->op = GF_OP_SWIGLU;
    enum gf_status st = gf_fused_input(f, gf_match_cap(m, GG));
    return st == GF_OK ? gf_fused_input(f, gf_match_cap(m, GU)) : st;
}

/* ---- GELU ------------------------------------------------------------------------------
 *   x ─Div(√2) | Mul(1/√2)─Erf ─┐                                 ┌─ Add(1) ─┐
 *   x ─(x + 0.044715·(Pow(x,3) | x·x·x))·√(2/π)─Tanh ────────────┘          │
 *   x · 0.5 ─ Mul ─ y     (also (x·(1+t))·0.5, x·((1+t)·0.5), x·(1+t)/2) ───┘
 */
enum { EX, EHALF, EONE, ESQRT2, EISQRT2, ETHREE, EK, ESQ2PI, ETWO };
static const struct gf_pcap gelu_caps[] = {
    [EX] = GF_K_ANY("x"),
    [EHALF] = GF_K_SCALAR("0.5", 0.5, 0),
    [EONE] = GF_K_SCALAR("1", 1.0, 0),
    /* irrational constants: exporters print 7 to 10 digits */
    [ESQRT2] = GF_K_SCALAR("sqrt(2)", 1.4142135623730951, 1e-5),
    [EISQRT2] = GF_K_SCALAR("1/sqrt(2)", 0.70710678118654752, 1e-5),
    [ETHREE] = GF_K_SCALAR("3", 3.0, 0),
    [EK] = GF_K_SCALAR("0.044715", 0.044715, 1e-5),
    [ESQ2PI] = GF_K_SCALAR("sqrt(2/pi)", 0.79788456080286536, 1e-5),
    [ETWO] = GF_K_SCALAR("2", 2.0, 0),
};
enum { E_DIV, E_MULS, E_XS, E_ERF, E_POW3, E_XX, E_XXX, E_CUBE, E_KC, E_INNER, E_ARG, E_TANH,
       E_T, E_ONEP, E_A, E_ROOT };
#define GELU_PREFIX                                                                            \
    [E_DIV] = {GF_P("x/sqrt2", GF_OP_DIV, GF_C(EX), GF_C(ESQRT2))},                           \
    [E_MULS] = {GF_P("x*(1/sqrt2)", GF_OP_MUL, GF_C(EX), GF_C(EISQRT2)),                      \
                .flags = GF_PF_COMMUTE},                                                       \
    [E_XS] = {GF_P("x/sqrt2", GF_PAT_ALT, GF_N(E_DIV), GF_N(E_MULS))},                        \
    [E_ERF] = {GF_P("erf", GF_OP_ERF, GF_N(E_XS))},                                           \
    [E_POW3] = {GF_P("x^3", GF_OP_POW, GF_C(EX), GF_C(ETHREE))},                              \
    [E_XX] = {GF_P("x*x", GF_OP_MUL, GF_C(EX), GF_C(EX))},                                    \
    [E_XXX] = {GF_P("x*x*x", GF_OP_MUL, GF_N(E_XX), GF_C(EX)), .flags = GF_PF_COMMUTE},        \
    [E_CUBE] = {GF_P("cube", GF_PAT_ALT, GF_N(E_POW3), GF_N(E_XXX))},                          \
    [E_KC] = {GF_P("0.044715*x^3", GF_OP_MUL, GF_N(E_CUBE), GF_C(EK)), .flags = GF_PF_COMMUTE}, \
    [E_INNER] = {GF_P("x+...", GF_OP_ADD, GF_C(EX), GF_N(E_KC)), .flags = GF_PF_COMMUTE},       \
    [E_ARG] = {GF_P("*sqrt(2/pi)", GF_OP_MUL, GF_N(E_INNER), GF_C(ESQ2PI)),                    \
               .flags = GF_PF_COMMUTE},                                                        \
    [E_TANH] = {GF_P("tanh", GF_OP_TANH, GF_N(E_ARG))},                                        \
    [E_T] = {GF_P("erf|tanh", GF_PAT_ALT, GF_N(E_ERF), GF_N(E_TANH))},                          \
    [E_ONEP] = {GF_P("1+t", GF_OP_ADD, GF_N(E_T), GF_C(EONE)), .flags = GF_PF_COMMUTE}

static const struct gf_pnode gelu_halfx[] = {
    GELU_PREFIX,
    [E_A] = {GF_P("x*0.5", GF_OP_MUL, GF_C(EX), GF_C(EHALF)), .flags = GF_PF_COMMUTE},
    [E_ROOT] = {GF_P("half_x*(1+t)", GF_OP_MUL, GF_N(E_A), GF_N(E_ONEP)),
                .flags = GF_PF_COMMUTE},
};
static const struct gf_pnode gelu_xhalf[] = {
    GELU_PREFIX,
    [E_A] = {GF_P("x*(1+t)", GF_OP_MUL, GF_C(EX), GF_N(E_ONEP)), .flags = GF_PF_COMMUTE},
    [E_ROOT] = {GF_P("(...)*0.5", GF_OP_MUL, GF_N(E_A), GF_C(EHALF)), .flags = GF_PF_COMMUTE},
};
static const struct gf_pnode gelu_halfp[] = {
    GELU_PREFIX,
    [E_A] = {GF_P("(1+t)*0.5", GF_OP_MUL, GF_N(E_ONEP), GF_C(EHALF)), .flags = GF_PF_COMMUTE},
    [E_ROOT] = {GF_P("x*(...)", GF_OP_MUL, GF_C(EX), GF_N(E_A)), .flags = GF_PF_COMMUTE},
};
static const struct gf_pnode gelu_div2[] = {
    GELU_PREFIX,
    [E_A] = {GF_P("x*(1+t)", GF_OP_MUL, GF_C(EX), GF_N(E_ONEP)), .flags = GF_PF_COMMUTE},
    [E_ROOT] = {GF_P("(...)/2", GF_OP_DIV, GF_N(E_A), GF_C(ETWO))},
};

static bool gelu_check(struct gf_match *m)
{
    return float_pair(m, E_ROOT, gf_match_cap(m, EX), NULL);
}

static enum gf_status gelu_rewrite(struct gf_match *m, struct gf_fused *f)
{
    f->op = GF_OP_FUSED_GELU;
    enum gf_status st = gf_fused_input(f, gf_match_cap(m, EX));
    return st == GF_OK ? gf_fused_attr_string(f, "approximate",
                                              gf_match_node(m, E_TANH) ? "tanh" : "none")
                       : st;
}

/* ---- GeGLU -----------------------------------------------------------------------------
 *   g ─Gelu─┐
 *   u ──────Mul── y
 *   (Gelu: the fused one, or the ONNX Gelu op; `approximate` carries over)
 */
static const struct gf_pnode geglu_nodes[] = {
    [W_ACT] = {GF_P("gelu", GF_OP_FUSED_GELU, GF_C(GG))},
    [W_ROOT] = {GF_P("gelu*up", GF_OP_MUL, GF_N(W_ACT), GF_C(GU)), .flags = GF_PF_COMMUTE},
};
static const struct gf_pnode geglu_onnx_nodes[] = {
    [W_ACT] = {GF_P("Gelu op", GF_OP_GELU, GF_C(GG))},
    [W_ROOT] = {GF_P("gelu*up", GF_OP_MUL, GF_N(W_ACT), GF_C(GU)), .flags = GF_PF_COMMUTE},
};

static bool geglu_check(struct gf_match *m)
{
    const char *a = gf_node_attr_string(gf_match_node(m, W_ACT), "approximate", "none");
    if (strcmp(a, "none") != 0 && strcmp(a, "tanh") != 0)
        return gf_match_fail(m, W_ACT, "approximate='%s' is not none or tanh", a);
    return glu_check(m);
}

static enum gf_status geglu_rewrite(struct gf_match *m, struct gf_fused *f)
{
    f->op = GF_OP_GEGLU;
    enum gf_status st = gf_fused_input(f, gf_match_cap(m, GG));
    if (st == GF_OK)
        st = gf_fused_input(f, gf_match_cap(m, GU));
    return st == GF_OK ? gf_fused_attr_string(f, "approximate",
                                              gf_node_attr_string(gf_match_node(m, W_ACT),
                                                                  "approximate", "none"))
                       : st;
}

/* ---- the table ----------------------------------------------------------------------------- */

const struct gf_pattern gf_patterns_act[] = {
    GF_PATTERN("silu", "x*sigmoid(x)", silu_nodes, silu_caps, silu_check, silu_rewrite),
    GF_PATTERN("silu", "Swish op", swish_nodes, silu_caps, silu_check, silu_rewrite),
    GF_PATTERN("swiglu", "SiLU(g)*u", swiglu_nodes, glu_caps, glu_check, swiglu_rewrite),
    GF_PATTERN("swiglu", "g*(sigmoid(g)*u)", swiglu2_nodes, glu_caps, glu_check,
               swiglu_rewrite),
    GF_PATTERN("gelu", "(x*0.5)*(1+t)", gelu_halfx, gelu_caps, gelu_check, gelu_rewrite),
    GF_PATTERN("gelu", "(x*(1+t))*0.5", gelu_xhalf, gelu_caps, gelu_check, gelu_rewrite),
    GF_PATTERN("gelu", "x*((1+t)*0.5)", gelu_halfp, gelu_caps, gelu_check, gelu_rewrite),
    GF_PATTERN("gelu", "x*(1+t)/2", gelu_div2, gelu_caps, gelu_check, gelu_rewrite),
    GF_PATTERN("geglu", "Gelu(g)*u", geglu_nodes, glu_caps, geglu_check, geglu_rewrite),
    GF_PATTERN("geglu", "Gelu op(g)*u", geglu_onnx_nodes, glu_caps, geglu_check,
               geglu_rewrite),
};
const size_t gf_patterns_act_count = sizeof(gf_patterns_act) / sizeof(gf_patterns_act[0]);
