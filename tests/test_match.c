/* The fusion engine (passes/match.c, fuse.c): commuted inputs, single use,
 * values escaping the match, graph outputs, captures bound twice,
 * alternatives and backtracking, no-op Casts, the fixpoint, disabling and
 * explaining patterns, function bodies shared or named OP_2, the report. */
#include "fusetest.h"
#include "pattern.h"

/* ---- test patterns ----------------------------------------------------------- */

/*   x ─Sigmoid─┐
 *   x ─────────Mul── y      (strict: Mul(x, sigmoid) in this order only) */
enum { CX, CY, CTWO };
static const struct gf_pcap caps[] = {
    [CX] = GF_K_ANY("x"), [CY] = GF_K_ANY("y"), [CTWO] = GF_K_SCALAR("two", 2.0, 0),
};
static const struct gf_pnode silu_strict[] = {
    {GF_P("sigmoid", GF_OP_SIGMOID, GF_C(CX))},
    {GF_P("mul", GF_OP_MUL, GF_C(CX), GF_N(0))},
};
static const struct gf_pnode silu_commute[] = {
    {GF_P("sigmoid", GF_OP_SIGMOID, GF_C(CX)), .cast = 1},
    {GF_P("mul", GF_OP_MUL, GF_C(CX), GF_N(0)), .flags = GF_PF_COMMUTE, .cast = 1},
};
/* sigmoid(x)^2, the sigmoid read twice by the root */
static const struct gf_pnode sig_sq[] = {
    {GF_P("sigmoid", GF_OP_SIGMOID, GF_C(CX))},
    {GF_P("square", GF_OP_MUL, GF_N(0), GF_N(0))},
};
static const struct gf_pnode sig_sq_one_use[] = {
    {GF_P("sigmoid", GF_OP_SIGMOID, GF_C(CX)), .flags = GF_PF_ONE_USE},
    {GF_P("square", GF_OP_MUL, GF_N(0), GF_N(0))},
};
/* Mul(x, x) */
static const struct gf_pnode same_twice[] = {
    {GF_P("x*x", GF_OP_MUL, GF_C(CX), GF_C(CX))},
};
/* Add(Mul(x, y), x), both commutative: needs backtracking into the Mul */
static const struct gf_pnode backtrack[] = {
    {GF_P("x*y", GF_OP_MUL, GF_C(CX), GF_C(CY)), .flags = GF_PF_COMMUTE},
    {GF_P("+x", GF_OP_ADD, GF_N(0), GF_C(CX)), .flags = GF_PF_COMMUTE},
};
/* Neg(x * 2 | x * y): the first alternative is preferred */
static const struct gf_pnode alt[] = {
    {GF_P("x*2", GF_OP_MUL, GF_C(CX), GF_C(CTWO))},
    {GF_P("x*y", GF_OP_MUL, GF_C(CX), GF_C(CY))},
    {GF_P("either", GF_PAT_ALT, GF_N(0), GF_N(1))},
    {GF_P("neg", GF_OP_NEG, GF_N(2))},
};
/* SiLU(g) * u -> SwiGLU; and SiLU(x) -> SiLU(x), which never ends */
static const struct gf_pnode swiglu_on_silu[] = {
    {GF_P("silu", GF_OP_SILU, GF_C(CX))},
    {GF_P("mul", GF_OP_MUL, GF_N(0), GF_C(CY)), .flags = GF_PF_COMMUTE},
};
static const struct gf_pnode silu_itself[] = {{GF_P("silu", GF_OP_SILU, GF_C(CX))}};

static enum gf_status to_silu(struct gf_match *m, struct gf_fused *f)
{
    f->op = GF_OP_SILU;
    return gf_fused_input(f, gf_match_cap(m, CX));
}

static enum gf_status to_swiglu(struct gf_match *m, struct gf_fused *f)
{
    f->op = GF_OP_SWIGLU;
    gf_fused_input(f, gf_match_cap(m, CX));
    return gf_fused_input(f, gf_match_cap(m, CY));
}

static const struct gf_pattern p_strict = GF_PATTERN("t", "strict", silu_strict, caps, NULL, to_silu);
static const struct gf_pattern p_commute =
    GF_PATTERN("t", "commute", silu_commute, caps, NULL, to_silu);
static const struct gf_pattern p_sq = GF_PATTERN("t", "sq", sig_sq, caps, NULL, to_silu);
static const struct gf_pattern p_sq1 = GF_PATTERN("t", "sq1", sig_sq_one_use, caps, NULL, to_silu);
static const struct gf_pattern p_same = GF_PATTERN("t", "same", same_twice, caps, NULL, to_silu);
static const struct gf_pattern p_back = GF_PATTERN("t", "back", backtrack, caps, NULL, to_silu);
static const struct gf_pattern p_alt = GF_PATTERN("t", "alt", alt, caps, NULL, to_silu);
static const struct gf_pattern p_swiglu =
    GF_PATTERN("swiglu", "on silu", swiglu_on_silu, caps, NULL, to_swiglu);
static const struct gf_pattern p_silu = GF_PATTERN("silu", "commute", silu_commute, caps, NULL,
                                                   to_silu);
static const struct gf_pattern p_loop = GF_PATTERN("loop", "itself", silu_itself, caps, NULL,
                                                   to_silu);

static struct gf_node *root_of(struct tg *t, const char *value)
{
    struct gf_value *v = gf_graph_find(t->g, value);
    assert_non_null(v);
    assert_non_null(v->producer);
    return v->producer;
}

/* x, Sigmoid(x) -> s, then the given Mul -> y (output). */
static struct tg silu_graph(const char *mul_ins)
{
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "2,8");
    tg_input(&t, "u", GF_FLOAT, "2,8");
    tg_node(&t, "Sigmoid", "x", "s");
    tg_node(&t, "Mul", mul_ins, "y");
    tg_output(&t, "y");
    assert_int_equal(gf_graph_infer_shapes(t.g), GF_OK);
    return t;
}

/* ---- matching ------------------------------------------------------------------ */

static void test_commute(void **state)
{
    (void)state;
    struct gf_match m;
    char why[512];
    struct tg a = silu_graph("x,s"), b = silu_graph("s,x");
    assert_true(gf_pattern_match(&p_strict, root_of(&a, "y"), &m, why, sizeof(why)));
    assert_ptr_equal(gf_match_cap(&m, CX), gf_graph_find(a.g, "x"));
    assert_false(gf_pattern_match(&p_strict, root_of(&b, "y"), &m, why, sizeof(why)));
    assert_non_null(strstr(why, "wants Sigmoid"));
    assert_true(gf_pattern_match(&p_commute, root_of(&b, "y"), &m, NULL, 0));
    assert_ptr_equal(gf_match_node(&m, 0), root_of(&b, "s"));
    gf_model_free(a.m);
    gf_model_free(b.m);
}

/* Read twice by the match itself: fine for the escape rule, refused by
 * GF_PF_ONE_USE. */
static void test_one_use(void **state)
{
    (void)state;
    struct gf_match m;
    char why[512];
    struct tg t = silu_graph("s,s");
    assert_true(gf_pattern_match(&p_sq, root_of(&t, "y"), &m, NULL, 0));
    assert_false(gf_pattern_match(&p_sq1, root_of(&t, "y"), &m, why, sizeof(why)));
    assert_non_null(strstr(why, "exactly one"));
    gf_model_free(t.m);
}

static void test_escape(void **state)
{
    (void)state;
    struct gf_match m;
    char why[512];
    struct tg t = silu_graph("x,s");
    tg_node(&t, "Neg", "s", "z");
    tg_output(&t, "z");
    assert_false(gf_pattern_match(&p_commute, root_of(&t, "y"), &m, why, sizeof(why)));
    assert_non_null(strstr(why, "outside the match"));
    assert_non_null(strstr(why, "'s'"));
    gf_model_free(t.m);
}

static void test_graph_output(void **state)
{
    (void)state;
    struct gf_match m;
    char why[512];
    struct tg t = silu_graph("x,s");
    tg_output(&t, "s");
    assert_false(gf_pattern_match(&p_commute, root_of(&t, "y"), &m, why, sizeof(why)));
    assert_non_null(strstr(why, "graph output"));
    gf_model_free(t.m);
}

static void test_same_capture(void **state)
{
    (void)state;
    struct gf_match m;
    struct tg a = silu_graph("x,x"), b = silu_graph("x,u");
    assert_true(gf_pattern_match(&p_same, root_of(&a, "y"), &m, NULL, 0));
    assert_false(gf_pattern_match(&p_same, root_of(&b, "y"), &m, NULL, 0));
    gf_model_free(a.m);
    gf_model_free(b.m);
}

/* Add(Mul(a, b), b): the first order of the Mul binds x = a, which the
 * Add then contradicts; the matcher must come back into the Mul. */
static void test_backtrack(void **state)
{
    (void)state;
    struct gf_match m;
    struct tg t = tg_new(17);
    tg_input(&t, "a", GF_FLOAT, "4");
    tg_input(&t, "b", GF_FLOAT, "4");
    tg_node(&t, "Mul", "a,b", "p");
    tg_node(&t, "Add", "p,b", "y");
    tg_output(&t, "y");
    assert_true(gf_pattern_match(&p_back, root_of(&t, "y"), &m, NULL, 0));
    assert_ptr_equal(gf_match_cap(&m, CX), gf_graph_find(t.g, "b"));
    assert_ptr_equal(gf_match_cap(&m, CY), gf_graph_find(t.g, "a"));
    assert_ptr_equal(gf_match_cap_named(&m, "y"), gf_graph_find(t.g, "a"));
    gf_model_free(t.m);
}

/* Alternatives: x * 2 takes the first, x * 3 falls back to the second
 * (the constant check drives the choice). */
static void test_alternatives(void **state)
{
    (void)state;
    struct gf_match m;
    for (int k = 2; k <= 3; k++) {
        struct tg t = tg_new(17);
        tg_input(&t, "x", GF_FLOAT, "4");
        tg_node(&t, "Mul", k == 2 ? "x,#2" : "x,#3", "p");
        tg_node(&t, "Neg", "p", "y");
        tg_output(&t, "y");
        assert_true(gf_pattern_match(&p_alt, root_of(&t, "y"), &m, NULL, 0));
        assert_ptr_equal(gf_match_node(&m, k == 2 ? 0 : 1), root_of(&t, "p"));
        assert_null(gf_match_node(&m, k == 2 ? 1 : 0));
        double two = 0;
        if (k == 2)
            assert_true(gf_pat_scalar(gf_match_const(&m, CTWO), &two) && two == 2.0);
        else
            assert_null(gf_match_cap(&m, CTWO)); /* the failed branch left nothing */
        gf_model_free(t.m);
    }
}

/* A Cast that changes nothing joins the match; a real one (double to
 * float) stays outside and the capture is its output. */
static void test_casts(void **state)
{
    (void)state;
    struct gf_match m;
    for (int real = 0; real <= 1; real++) {
        struct tg t = tg_new(17);
        tg_input(&t, "x", real ? GF_DOUBLE : GF_FLOAT, "2,8");
        gf_node_set_attr_int(tg_node(&t, "Cast", "x", "c"), "to", GF_FLOAT);
        tg_node(&t, "Sigmoid", "c", "s");
        tg_node(&t, "Mul", "s,c", "y");
        tg_output(&t, "y");
        assert_int_equal(gf_graph_infer_shapes(t.g), GF_OK);
        assert_true(gf_pattern_match(&p_commute, root_of(&t, "y"), &m, NULL, 0));
        assert_int_equal(m.n_cast, real ? 0 : 1);
        assert_string_equal(gf_match_cap(&m, CX)->name, real ? "c" : "x");
        gf_model_free(t.m);
    }
}

/* ---- the engine ----------------------------------------------------------------- */

/* SwiGLU needs the SiLU the other pattern makes: listed first, it still
 * applies in the same run; a second run has nothing left. */
static void test_fixpoint(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "g", GF_FLOAT, "2,8");
    tg_input(&t, "u", GF_FLOAT, "2,8");
    tg_node(&t, "Sigmoid", "g", "s");
    tg_node(&t, "Mul", "s,g", "a");
    tg_node(&t, "Mul", "u,a", "y");
    tg_output(&t, "y");
    const struct gf_pattern *pats[] = {&p_swiglu, &p_silu};
    size_t hits[2] = {0, 0};
    struct gf_engine e = {pats, 2, hits, NULL, NULL, NULL, NULL};
    assert_int_equal(gf_engine_run(t.g, &e), GF_OK);
    assert_int_equal(hits[0], 1);
    assert_int_equal(hits[1], 1);
    assert_int_equal(t.g->n_nodes, 1);
    assert_string_equal(t.g->first->op_type, "SwiGLU");
    assert_int_equal(gf_graph_validate(t.g), GF_OK);
    hits[0] = hits[1] = 0;
    assert_int_equal(gf_engine_run(t.g, &e), GF_OK);
    assert_int_equal(hits[0] + hits[1], 0);
    gf_model_free(t.m);
}

/* A rewrite that gives back what it matched never converges: the engine
 * stops with an internal error instead of looping. */
static void test_no_convergence(void **state)
{
    (void)state;
    struct tg t = silu_graph("x,s");
    const struct gf_pattern *pats[] = {&p_silu, &p_loop};
    size_t hits[2] = {0, 0};
    struct gf_engine e = {pats, 2, hits, NULL, NULL, NULL, NULL};
    assert_int_equal(gf_engine_run(t.g, &e), GF_ERR_INTERNAL);
    assert_non_null(strstr(gf_last_error(), "converge"));
    gf_model_free(t.m);
}

static struct tg swiglu_graph(void)
{
    struct tg t = tg_new(17);
    tg_input(&t, "g", GF_FLOAT, "2,8");
    tg_input(&t, "u", GF_FLOAT, "2,8");
    tg_node(&t, "Sigmoid", "g", "s");
    tg_node(&t, "Mul", "g,s", "a");
    tg_node(&t, "Mul", "a,u", "y");
    tg_output(&t, "y");
    return t;
}

static const struct gf_fuse_hit *hit(const struct gf_fuse_report *r, const char *name)
{
    for (size_t i = 0; i < r->n_patterns; i++)
        if (strcmp(r->patterns[i].pattern, name) == 0)
            return &r->patterns[i];
    fail_msg("no pattern %s in the report", name);
    return NULL;
}

static void test_disable(void **state)
{
    (void)state;
    struct gf_fuse_report rep;
    const char *no_swiglu[] = {"swiglu"}, *no_silu[] = {"silu"}, *bogus[] = {"silu", "nope"};
    struct tg t = swiglu_graph();
    tg_fuse(&t, &(struct gf_fuse_opts){.disabled = no_swiglu, .n_disabled = 1}, &rep);
    assert_int_equal(tg_count(&t, "SiLU"), 1);
    assert_int_equal(tg_count(&t, "SwiGLU"), 0);
    assert_true(hit(&rep, "swiglu")->disabled);
    assert_false(hit(&rep, "silu")->disabled);
    assert_int_equal(hit(&rep, "silu")->hits, 1);
    gf_fuse_report_free(&rep);
    gf_model_free(t.m);

    t = swiglu_graph();
    tg_fuse(&t, &(struct gf_fuse_opts){.disabled = no_silu, .n_disabled = 1}, NULL);
    assert_int_equal(t.g->n_nodes, 3); /* SwiGLU builds on SiLU */
    gf_model_free(t.m);

    t = swiglu_graph();
    assert_int_equal(gf_pass_fuse(t.m, &(struct gf_fuse_opts){.disabled = bogus, .n_disabled = 2},
                                  &rep),
                     GF_ERR_ARG);
    assert_non_null(strstr(gf_last_error(), "'nope'"));
    assert_int_equal(t.g->n_nodes, 3);
    assert_int_equal(gf_pass_fuse(t.m, &(struct gf_fuse_opts){.explain = "nope"}, NULL),
                     GF_ERR_ARG);
    assert_int_equal(gf_pass_fuse(t.m, &(struct gf_fuse_opts){.target = (enum gf_fuse_target)7},
                                  NULL),
                     GF_ERR_ARG); /* no such target */
    assert_int_equal(t.g->n_nodes, 3);
    gf_model_free(t.m);
    assert_true(gf_fuse_pattern_known("rmsnorm"));
    assert_false(gf_fuse_pattern_known("RMSNorm"));
}

static bool has_line(const struct gf_fuse_report *r, const char *a, const char *b)
{
    for (size_t i = 0; i < r->n_explain; i++)
        if (strstr(r->explain_lines[i], a) && strstr(r->explain_lines[i], b))
            return true;
    return false;
}

/* --explain rmsnorm on one RMSNorm that fuses and one whose epsilon is a
 * [8] tensor: one line each, the second naming the failed check. */
static void test_explain(void **state)
{
    (void)state;
    static const double e8[8] = {1e-6, 1e-6, 1e-6, 1e-6, 1e-6, 1e-6, 1e-6, 1e-6};
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "2,8");
    tg_init(&t, "eps8", GF_FLOAT, "8", e8);
    for (int k = 0; k < 2; k++) {
        char ins[64], nm[6][32];
        for (int i = 0; i < 6; i++)
            snprintf(nm[i], sizeof(nm[i]), "v%d_%d", k, i);
        snprintf(ins, sizeof(ins), "x,#2");
        tg_node(&t, "Pow", ins, nm[0]);
        tg_axes(tg_node(&t, "ReduceMean", nm[0], nm[1]), -1);
        snprintf(ins, sizeof(ins), "%s,%s", nm[1], k ? "eps8" : "#1e-6");
        tg_node(&t, "Add", ins, nm[2]);
        tg_node(&t, "Sqrt", nm[2], nm[3]);
        snprintf(ins, sizeof(ins), "x,%s", nm[3]);
        tg_node(&t, "Div", ins, nm[4]);
        tg_output(&t, nm[4]);
    }
    struct gf_fuse_report rep;
    tg_fuse(&t, &(struct gf_fuse_opts){.explain = "rmsnorm"}, &rep);
    assert_string_equal(rep.explain, "rmsnorm");
    assert_true(has_line(&rep, "n4_Div", "matched form 'x/den' -> RMSNorm"));
    assert_true(has_line(&rep, "n9_Div", "epsilon must be one constant element"));
    assert_true(has_line(&rep, "n9_Div", "no match"));
    assert_int_equal(tg_count(&t, "RMSNorm"), 1);
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    gf_fuse_report_print(&rep, f, true);
    fclose(f);
    assert_non_null(strstr(buf, "\"format\": \"graphfuse-fuse-report\""));
    assert_non_null(strstr(buf, "\"explain\": {\"pattern\": \"rmsnorm\""));
    assert_non_null(strstr(buf, "{\"name\": \"rmsnorm\", \"hits\": 1, \"disabled\": false}"));
    free(buf);
    f = open_memstream(&buf, &len);
    gf_fuse_report_print(&rep, f, false);
    fclose(f);
    assert_non_null(strstr(buf, "graphfuse.RMSNorm"));
    assert_non_null(strstr(buf, "explain rmsnorm"));
    free(buf);
    gf_fuse_report_free(&rep);
    gf_model_free(t.m);
}

/* ---- function bodies ---------------------------------------------------------------- */

/* RMSNorm of x with weight w, written x * 1/sqrt(...) or x / sqrt(...). */
static void rms(struct tg *t, const char *x, const char *w, const char *y, bool div)
{
    char ins[64], nm[6][24];
    for (int i = 0; i < 6; i++)
        snprintf(nm[i], sizeof(nm[i]), "%s_%d", y, i);
    snprintf(ins, sizeof(ins), "%s,#2", x);
    tg_node(t, "Pow", ins, nm[0]);
    tg_axes(tg_node(t, "ReduceMean", nm[0], nm[1]), -1);
    snprintf(ins, sizeof(ins), "%s,#1e-6", nm[1]);
    tg_node(t, "Add", ins, nm[2]);
    tg_node(t, "Sqrt", nm[2], nm[3]);
    if (div) {
        snprintf(ins, sizeof(ins), "%s,%s", x, nm[3]);
        tg_node(t, "Div", ins, nm[5]);
    } else {
        tg_node(t, "Reciprocal", nm[3], nm[4]);
        snprintf(ins, sizeof(ins), "%s,%s", x, nm[4]);
        tg_node(t, "Mul", ins, nm[5]);
    }
    snprintf(ins, sizeof(ins), "%s,%s", w, nm[5]);
    tg_node(t, "Mul", ins, y);
}

static void test_functions(void **state)
{
    (void)state;
    struct tg t = tg_new(17);
    tg_input(&t, "x", GF_FLOAT, "2,8");
    tg_init(&t, "w1", GF_FLOAT, "8", NULL);
    tg_init(&t, "w2", GF_FLOAT, "8", NULL);
    rms(&t, "x", "w1", "y1", false);
    rms(&t, "y1", "w2", "y2", false); /* the same body, other weight */
    rms(&t, "y2", "w1", "y3", true);  /* another form: a second function */
    tg_output(&t, "y3");
    struct gf_fuse_report rep;
    tg_fuse(&t, NULL, &rep);
    assert_int_equal(rep.n_functions, 2);
    assert_int_equal(t.m->n_functions, 2);
    assert_string_equal(t.m->functions[0]->name, "RMSNorm");
    assert_string_equal(t.m->functions[1]->name, "RMSNorm_2");
    assert_int_equal(tg_count(&t, "RMSNorm"), 2);
    assert_int_equal(tg_count(&t, "RMSNorm_2"), 1);
    assert_int_equal(tg_find_op(&t, "RMSNorm_2")->op, GF_OP_RMS_NORM);
    gf_fuse_report_free(&rep);

    /* self-contained bodies: only formal inputs and their own values */
    for (size_t i = 0; i < t.m->n_functions; i++) {
        const struct gf_function *f = t.m->functions[i];
        assert_string_equal(f->domain, "graphfuse");
        assert_int_equal(f->body->n_inputs, 2);
        assert_string_equal(f->body->inputs[0]->name, "X");
        assert_string_equal(f->body->outputs[0]->name, "Y");
        assert_int_equal(f->n_attr_names, 4);
        for (const struct gf_node *n = f->body->first; n; n = n->next)
            for (size_t k = 0; k < n->n_inputs; k++)
                assert_ptr_equal(n->inputs[k]->graph, f->body);
    }

    /* through a file and back: same functions, ops still known */
    uint8_t *buf;
    size_t len;
    struct gf_model *back;
    assert_int_equal(gf_model_save_buffer(t.m, &buf, &len), GF_OK);
    assert_int_equal(gf_model_load_buffer(buf, len, NULL, NULL, &back), GF_OK);
    free(buf);
    assert_int_equal(back->n_functions, 2);
    struct tg b = {back, back->graph, 0, 1};
    assert_int_equal(tg_count(&b, "RMSNorm_2"), 1);
    assert_int_equal(tg_find_op(&b, "RMSNorm_2")->op, GF_OP_RMS_NORM);
    tg_fuse(&b, NULL, &rep); /* nothing left to fuse, nothing added */
    assert_int_equal(rep.n_functions, 0);
    assert_int_equal(back->n_functions, 2);
    gf_fuse_report_free(&rep);
    gf_model_free(back);
    gf_model_free(t.m);
}

static void test_op_lookup(void **state)
{
    (void)state;
    assert_int_equal(gf_op_lookup("graphfuse", "RMSNorm"), GF_OP_RMS_NORM);
    assert_int_equal(gf_op_lookup("graphfuse", "RMSNorm_2"), GF_OP_RMS_NORM);
    assert_int_equal(gf_op_lookup("graphfuse", "AddLayerNorm_17"), GF_OP_ADD_LAYER_NORM);
    assert_int_equal(gf_op_lookup("graphfuse", "RMSNorm_"), GF_OP_UNKNOWN);
    assert_int_equal(gf_op_lookup("graphfuse", "RMSNorm_02"), GF_OP_UNKNOWN);
    assert_int_equal(gf_op_lookup("graphfuse", "RMSNorm_2x"), GF_OP_UNKNOWN);
    assert_int_equal(gf_op_lookup("graphfuse", "Foo_2"), GF_OP_UNKNOWN);
    assert_int_equal(gf_op_lookup("", "Relu_2"), GF_OP_UNKNOWN);
}

static void test_drop_output(void **state)
{
    (void)state;
    struct tg t = silu_graph("x,s");
    tg_output(&t, "s");
    assert_int_equal(gf_pass_drop_output(t.g, "nope"), GF_ERR_ARG);
    assert_int_equal(gf_pass_drop_output(t.g, "s"), GF_OK);
    assert_int_equal(t.g->n_outputs, 1);
    assert_false(gf_graph_find(t.g, "s")->is_output);
    tg_fuse(&t, NULL, NULL); /* s no longer escapes */
    assert_int_equal(tg_count(&t, "SiLU"), 1);
    gf_model_free(t.m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_commute),
        cmocka_unit_test(test_one_use),
        cmocka_unit_test(test_escape),
        cmocka_unit_test(test_graph_output),
        cmocka_unit_test(test_same_capture),
        cmocka_unit_test(test_backtrack),
        cmocka_unit_test(test_alternatives),
        cmocka_unit_test(test_casts),
        cmocka_unit_test(test_fixpoint),
        cmocka_unit_test(test_no_convergence),
        cmocka_unit_test(test_disable),
        cmocka_unit_test(test_explain),
        cmocka_unit_test(test_functions),
        cmocka_unit_test(test_op_lookup),
        cmocka_unit_test(test_drop_output),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
