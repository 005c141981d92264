/*
 * Tests of gf_model_dump: the text line format, DOT accepted by Graphviz,
 * JSON checked by a strict validator (below, so no Python is needed), hostile
 * names, write errors, and every ONNX node-test model in all three formats.
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <setjmp.h>
#include <cmocka.h>

#include <glob.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "gf_graph.h"
#include "internal.h" /* gf_graph_create: subgraphs and functions by hand */

#define NODE_TESTS "/usr/share/libonnx-testdata/data/node/*/model.onnx"

/* ---- a strict JSON validator (RFC 8259) ------------------------------------ */

struct jp {
    const unsigned char *s;
    size_t n, i;
    int depth;
    const char *err;
};

static bool jp_fail(struct jp *p, const char *why)
{
    if (!p->err)
        p->err = why;
    return false;
}

static void jp_ws(struct jp *p)
{
    while (p->i < p->n && strchr(" \t\n\r", p->s[p->i]) && p->s[p->i])
        p->i++;
}

static bool jp_lit(struct jp *p, const char *lit)
{
    size_t len = strlen(lit);
    if (p->n - p->i < len || memcmp(p->s + p->i, lit, len) != 0)
        return jp_fail(p, "bad literal");
    p->i += len;
    return true;
}

static int jp_hex4(struct jp *p)
{
    if (p->n - p->i < 4)
        return -1;
    int v = 0;
    for (int k = 0; k < 4; k++) {
        int c = p->s[p->i++];
        int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10
              : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    return v;
}

/* One well-formed UTF-8 character at p->i (the validator's own check). */
static bool jp_utf8(struct jp *p)
{
    const unsigned char *s = p->s + p->i;
    size_t left = p->n - p->i;
    unsigned c = s[0], len = c < 0x80 ? 1 : c < 0xC2 ? 0 : c < 0xE0 ? 2 : c < 0xF0 ? 3
                                       : c < 0xF5 ? 4 : 0;
    if (len == 0 || left < len)
        return jp_fail(p, "ill-formed UTF-8");
    uint32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (unsigned k = 1; k < len; k++) {
        if ((s[k] & 0xC0) != 0x80)
            return jp_fail(p, "ill-formed UTF-8");
        cp = cp << 6 | (s[k] & 0x3F);
    }
    static const uint32_t min[] = {0, 0, 0x80, 0x800, 0x10000};
    if (cp < min[len] || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF))
        return jp_fail(p, "ill-formed UTF-8");
    p->i += len;
    return true;
}

static bool jp_string(struct jp *p)
{
    if (p->i >= p->n || p->s[p->i] != '"')
        return jp_fail(p, "expected string");
    p->i++;
    while (p->i < p->n && p->s[p->i] != '"') {
        unsigned char c = p->s[p->i];
        if (c < 0x20)
            return jp_fail(p, "raw control character in string");
        if (c != '\\') {
            if (!jp_utf8(p))
                return false;
            continue;
        }
        if (++p->i >= p->n)
            return jp_fail(p, "truncated escape");
        c = p->s[p->i++];
        if (c == 'u') {
            int u = jp_hex4(p);
            if (u < 0)
                return jp_fail(p, "bad \\u escape");
            if (u >= 0xDC00 && u <= 0xDFFF)
                return jp_fail(p, "lone low surrogate");
            if (u >= 0xD800 && u <= 0xDBFF) {
                if (p->n - p->i < 2 || p->s[p->i] != '\\' || p->s[p->i + 1] != 'u')
                    return jp_fail(p, "lone high surrogate");
                p->i += 2;
                int lo = jp_hex4(p);
                if (lo < 0xDC00 || lo > 0xDFFF)
                    return jp_fail(p, "bad surrogate pair");
            }
        } else if (!strchr("\"\\/bfnrt", c) || c == 0) {
            return jp_fail(p, "bad escape");
        }
    }
    if (p->i >= p->n)
        return jp_fail(p, "unterminated string");
    p->i++;
    return true;
}

static bool jp_digits(struct jp *p)
{
    size_t start = p->i;
    while (p->i < p->n && p->s[p->i] >= '0' && p->s[p->i] <= '9')
        p->i++;
    return p->i > start;
}

static bool jp_number(struct jp *p)
{
    if (p->i < p->n && p->s[p->i] == '-')
        p->i++;
    if (p->i < p->n && p->s[p->i] == '0')
        p->i++;
    else if (!jp_digits(p))
        return jp_fail(p, "bad number");
    if (p->i < p->n && p->s[p->i] == '.') {
        p->i++;
        if (!jp_digits(p))
            return jp_fail(p, "bad fraction");
    }
    if (p->i < p->n && (p->s[p->i] == 'e' || p->s[p->i] == 'E')) {
        p->i++;
        if (p->i < p->n && (p->s[p->i] == '+' || p->s[p->i] == '-'))
            p->i++;
        if (!jp_digits(p))
            return jp_fail(p, "bad exponent");
    }
    return true;
}

static bool jp_value(struct jp *p);

/* Object or array: close is '}' or ']'. */
static bool jp_container(struct jp *p, char close)
{
    if (++p->depth > 2000)
        return jp_fail(p, "nesting too deep");
    p->i++;
    jp_ws(p);
    if (p->i < p->n && p->s[p->i] == close) {
        p->i++;
        p->depth--;
        return true;
    }
    for (;;) {
        if (close == '}') {
            if (!jp_string(p))
                return false;
            jp_ws(p);
            if (p->i >= p->n || p->s[p->i] != ':')
                return jp_fail(p, "expected ':'");
            p->i++;
        }
        if (!jp_value(p))
            return false;
        jp_ws(p);
        if (p->i < p->n && p->s[p->i] == ',') {
            p->i++;
            jp_ws(p);
            continue;
        }
        if (p->i < p->n && p->s[p->i] == close) {
            p->i++;
            p->depth--;
            return true;
        }
        return jp_fail(p, "expected ',' or end of container");
    }
}

static bool jp_value(struct jp *p)
{
    jp_ws(p);
    if (p->i >= p->n)
        return jp_fail(p, "unexpected end");
    switch (p->s[p->i]) {
    case '{': return jp_container(p, '}');
    case '[': return jp_container(p, ']');
    case '"': return jp_string(p);
    case 't': return jp_lit(p, "true");
    case 'f': return jp_lit(p, "false");
    case 'n': return jp_lit(p, "null");
    default: return jp_number(p);
    }
}

/* NULL when `s` (n bytes) is exactly one valid JSON text, else why not. */
static const char *json_check(const char *s, size_t n)
{
    struct jp p = {(const unsigned char *)s, n, 0, 0, NULL};
    if (jp_value(&p)) {
        jp_ws(&p);
        if (p.i != p.n)
            jp_fail(&p, "trailing data");
    }
    return p.err;
}

static void test_validator_itself(void **state)
{
    (void)state;
    static const char *good[] = {
        "{}", "[]", "0", "-0.5e+3", "\"a\\u00e9\\ud83d\\ude00\"", "[1, {\"a\": null}]",
        "\"\xc3\xa9\"", " true ",
    };
    static const char *bad[] = {
        "", "{", "[1,]", "{\"a\" 1}", "01", "1.", "\"\x01\"", "\"\xff\"", "\"\xc0\xaf\"",
        "\"\\x41\"", "\"\\ud800\"", "NaN", "[1] [2]", "{\"a\":1,}", "'a'",
        "\"\xed\xa0\x80\"",
    };
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++)
        assert_null(json_check(good[i], strlen(good[i])));
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        assert_non_null(json_check(bad[i], strlen(bad[i])));
}

/* ---- helpers ------------------------------------------------------------------ */

/* Dumps to memory; the malloc'ed text (NUL-terminated) and its size. */
static char *dump_to_mem(const struct gf_model *m, enum gf_dump_format fmt, size_t *len)
{
    char *buf = NULL;
    size_t n = 0;
    FILE *f = open_memstream(&buf, &n);
    assert_non_null(f);
    enum gf_status st = gf_model_dump(m, fmt, f);
    if (st != GF_OK)
        fail_msg("dump failed: %s", gf_last_error());
    assert_int_equal(fclose(f), 0);
    assert_true(n == strlen(buf)); /* no NUL byte inside */
    if (len)
        *len = n;
    return buf;
}

static void assert_contains(const char *hay, const char *needle)
{
    if (!strstr(hay, needle)) {
        fprintf(stderr, "---- output:\n%s---- end\n", hay); /* cmocka truncates */
        fail_msg("missing:\n%s", needle);
    }
}

static void assert_json_valid(const char *s, size_t n, const char *what)
{
    const char *err = json_check(s, n);
    if (err)
        fail_msg("%s: invalid JSON: %s", what, err);
}

/* Braces balance outside of quoted strings, and nothing escapes a string. */
static bool dot_balanced(const char *s)
{
    int depth = 0;
    bool in_str = false;
    for (const char *p = s; *p; p++) {
        if (in_str) {
            if (*p == '\\' && p[1])
                p++;
            else if (*p == '"')
                in_str = false;
            else if (*p == '\n')
                return false; /* raw newline inside a label */
        } else if (*p == '"') {
            in_str = true;
        } else if (*p == '{') {
            depth++;
        } else if (*p == '}' && --depth < 0) {
            return false;
        }
    }
    return depth == 0 && !in_str;
}

static bool have_dot(void)
{
    return system("command -v dot >/dev/null 2>&1") == 0;
}

/* Runs `dot -Tsvg` on the text; true when it succeeds (and, if `quiet`,
 * prints no warning either). */
static bool dot_renders(const char *text, bool quiet)
{
    char src[] = "/tmp/gf_dump_XXXXXX", err[64], cmd[256];
    int fd = mkstemp(src);
    assert_true(fd >= 0);
    FILE *f = fdopen(fd, "w");
    assert_non_null(f);
    fputs(text, f);
    assert_int_equal(fclose(f), 0);
    snprintf(err, sizeof(err), "%s.err", src);
    snprintf(cmd, sizeof(cmd), "dot -Tsvg '%s' -o /dev/null 2>'%s'", src, err);
    int rc = system(cmd);
    FILE *e = fopen(err, "r");
    char msg[512] = "";
    size_t got = e ? fread(msg, 1, sizeof(msg) - 1, e) : 0;
    msg[got] = 0;
    if (e)
        fclose(e);
    if (rc != 0 || (quiet && got))
        print_error("dot said (rc %d): %s\n", rc, msg);
    unlink(src);
    unlink(err);
    return rc == 0 && (!quiet || got == 0);
}

static struct gf_value *tensor_value(struct gf_graph *g, const char *name,
                                     enum gf_dtype dt, int rank,
                                     const struct gf_dim *dims)
{
    struct gf_value *v = gf_graph_new_value(g, name, NULL);
    assert_non_null(v);
    gf_value_set_tensor_type(v, dt, rank, dims);
    return v;
}

/* A fresh attribute slot of `n` whose type and payload the caller sets. */
static struct gf_attr *raw_attr(struct gf_node *n, const char *name)
{
    assert_int_equal(gf_node_set_attr_int(n, name, 0), GF_OK);
    return (struct gf_attr *)gf_node_attr(n, name);
}

static struct gf_bytes bytes_of(const char *s)
{
    return (struct gf_bytes){(const uint8_t *)s, strlen(s)};
}

/* ---- the model the unit tests dump -------------------------------------------
 *
 *   x[batch,4] --MatMul(w)--> h --Relu--> y --Clip(, maxv)--> z
 *   z --com.microsoft.FusedMatMul(w)--> f (output)
 *   z --test.Everything--> e (output; one attribute of every type,
 *                             a subgraph "body" with one Identity)
 */
static struct gf_model *build_model(void)
{
    struct gf_model *m = gf_model_new(9, "main");
    assert_non_null(m);
    struct gf_graph *g = m->graph;
    assert_int_equal(gf_model_set_opset(m, "", 17), GF_OK);
    assert_int_equal(gf_model_set_opset(m, "com.microsoft", 1), GF_OK);
    m->producer_name = "unit test";
    m->producer_version = "1.0";

    struct gf_dim bd[2] = {{-1, "batch", NULL}, {4, NULL, NULL}};
    struct gf_dim bq[2] = {{-1, "batch", NULL}, {-1, NULL, NULL}};
    struct gf_value *x = tensor_value(g, "x", GF_FLOAT, 2, bd);
    assert_int_equal(gf_graph_add_input(g, x), GF_OK);
    float wdata[16] = {0};
    int64_t wdims[2] = {4, 4}, nodims[1] = {0};
    struct gf_value *w = gf_graph_add_initializer(
        g, "w", gf_tensor_new(m, "w", GF_FLOAT, 2, wdims, wdata));
    float six = 6.0f;
    struct gf_value *maxv = gf_graph_add_initializer(
        g, "maxv", gf_tensor_new(m, "maxv", GF_FLOAT, 0, nodims, &six));
    assert_non_null(w);
    assert_non_null(maxv);

    struct gf_value *h = tensor_value(g, "h", GF_FLOAT, 2, bd);
    struct gf_value *y = tensor_value(g, "y", GF_FLOAT, 2, bd);
    struct gf_value *z = tensor_value(g, "z", GF_FLOAT, 2, bd);
    struct gf_value *f = tensor_value(g, "f", GF_FLOAT, 2, bq);
    struct gf_value *e = gf_graph_new_value(g, "e", NULL);
    assert_non_null(e);

    assert_non_null(gf_graph_add_node(g, "MatMul", "", "mm", 2,
                                      (struct gf_value *[]){x, w}, 1, &h));
    assert_non_null(gf_graph_add_node(g, "Relu", NULL, NULL, 1, &h, 1, &y));
    assert_non_null(gf_graph_add_node(g, "Clip", "", "clip", 3,
                                      (struct gf_value *[]){y, NULL, maxv}, 1, &z));
    struct gf_node *fm = gf_graph_add_node(g, "FusedMatMul", "com.microsoft", "fm", 2,
                                           (struct gf_value *[]){z, w}, 1, &f);
    assert_non_null(fm);
    assert_int_equal(gf_node_set_attr_float(fm, "alpha", 0.5f), GF_OK);
    assert_int_equal(gf_node_set_attr_int(fm, "transA", 0), GF_OK);
    struct gf_node *ev = gf_graph_add_node(g, "Everything", "test", "ev", 1, &z, 1, &e);
    assert_non_null(ev);
    assert_int_equal(gf_graph_add_output(g, f), GF_OK);
    assert_int_equal(gf_graph_add_output(g, e), GF_OK);
    return m;
}

/* Gives node `ev` one attribute of each type. */
static void add_every_attr(struct gf_model *m, struct gf_node *ev)
{
    int64_t ints[3] = {1, 2, 3}, d23[2] = {2, 3}, d33[2] = {3, 3};
    float f6[6] = {1, 2.5f, -3, 0, 1e-5f, 100};
    assert_int_equal(gf_node_set_attr_int(ev, "i", -7), GF_OK);
    assert_int_equal(gf_node_set_attr_float(ev, "f", 1.0f), GF_OK);
    assert_int_equal(gf_node_set_attr_float(ev, "eps", 1e-5f), GF_OK);
    assert_int_equal(gf_node_set_attr_float(ev, "nan", NAN), GF_OK);
    assert_int_equal(gf_node_set_attr_float(ev, "ninf", -INFINITY), GF_OK);
    assert_int_equal(gf_node_set_attr_string(ev, "s", "a\"b\\c\nd"), GF_OK);
    assert_int_equal(gf_node_set_attr_ints(ev, "ints", 3, ints), GF_OK);
    assert_int_equal(gf_node_set_attr_tensor(ev, "small",
                     gf_tensor_new(m, "small", GF_FLOAT, 2, d23, f6)), GF_OK);
    assert_int_equal(gf_node_set_attr_tensor(ev, "big",
                     gf_tensor_new(m, "big", GF_INT64, 2, d33, NULL)), GF_OK);

    static float floats[2] = {0.25f, 2.0f};
    struct gf_attr *a = raw_attr(ev, "floats");
    a->type = GF_ATTR_FLOATS;
    a->n = 2;
    a->floats = floats;
    static struct gf_bytes strs[2];
    strs[0] = bytes_of("p");
    strs[1] = (struct gf_bytes){(const uint8_t *)"q\0\xff", 3}; /* NUL, bad byte */
    a = raw_attr(ev, "strings");
    a->type = GF_ATTR_STRINGS;
    a->n = 2;
    a->strings = strs;

    struct gf_graph *body = gf_graph_create(m, m->graph, ev);
    assert_non_null(body);
    body->name = "body_g";
    struct gf_value *bi = tensor_value(body, "bi", GF_INT64, 0, NULL);
    struct gf_value *bo = tensor_value(body, "bo", GF_INT64, 0, NULL);
    assert_int_equal(gf_graph_add_input(body, bi), GF_OK);
    assert_non_null(gf_graph_add_node(body, "Identity", "", "id", 1, &bi, 1, &bo));
    assert_int_equal(gf_graph_add_output(body, bo), GF_OK);
    a = raw_attr(ev, "body");
    a->type = GF_ATTR_GRAPH;
    a->g = body;

    a = raw_attr(ev, "alpha_ref");
    a->type = GF_ATTR_FLOAT;
    a->ref_attr_name = "alpha";
}

static struct gf_node *find_node(const struct gf_model *m, const char *name)
{
    for (struct gf_node *n = m->graph->first; n; n = n->next)
        if (n->name && strcmp(n->name, name) == 0)
            return n;
    fail_msg("no node %s", name);
    return NULL;
}

/* ---- text ----------------------------------------------------------------------- */

static void test_text_lines(void **state)
{
    (void)state;
    struct gf_model *m = build_model();
    add_every_attr(m, find_node(m, "ev"));
    char *t = dump_to_mem(m, GF_DUMP_TEXT, NULL);

    assert_contains(t, "model: ir_version 9, opset ai.onnx 17, com.microsoft 1, "
                       "producer \"unit test\" 1.0\n");
    assert_contains(t, "\ngraph main: 5 nodes, 2 initializers (68 bytes)\n"
                       "  input x: float[batch,4]\n"
                       "  output f: float[batch,?]\n"
                       "  output e: ?\n");
    assert_contains(t, "\nmm: MatMul(x, w) -> h [batch,4]\n");
    assert_contains(t, "\n#1: Relu(h) -> y [batch,4]\n");
    assert_contains(t, "\nclip: Clip(y, \"\", maxv) -> z [batch,4]\n");
    assert_contains(t, "\nfm: com.microsoft.FusedMatMul(z, w) -> f [batch,?] "
                       "{alpha=0.5, transA=0}\n");
    assert_contains(t, "\nev: test.Everything(z) -> e {i=-7, f=1.0, eps=1e-05, "
                       "nan=NaN, ninf=-Infinity, s=\"a\\\"b\\\\c\\nd\", ints=[1,2,3], "
                       "small=tensor<float>[2,3]{1.0,2.5,-3.0,0.0,1e-05,100.0}, "
                       "big=tensor<int64>[3,3], floats=[0.25,2.0], "
                       "strings=[\"p\",\"q\\x00\\xff\"], body=<graph body_g: 1 node>, "
                       "alpha_ref=@alpha}\n"
                       "    body = graph body_g: 1 node, 0 initializers (0 bytes)\n"
                       "      input bi: int64[]\n"
                       "      output bo: int64[]\n"
                       "    id: Identity(bi) -> bo []\n");
    free(t);
    gf_model_free(m);
}

/* Names from a hostile file: quoted and escaped, one line per node. */
static void test_text_odd_names(void **state)
{
    (void)state;
    struct gf_model *m = gf_model_new(9, "g\nraph");
    struct gf_graph *g = m->graph;
    struct gf_value *a = tensor_value(g, "a b", GF_FLOAT, 0, NULL);
    struct gf_value *b = tensor_value(g, "x\x01\xff\xc3\xa9", GF_FLOAT, 0, NULL);
    assert_int_equal(gf_graph_add_input(g, a), GF_OK);
    assert_non_null(gf_graph_add_node(g, "Neg", "", "#n", 1, &a, 1, &b));
    struct gf_value *c = gf_graph_new_value(g, "/model/layers.0/Add_output_0", NULL);
    assert_non_null(gf_graph_add_node(g, "Neg", "", "onnx::Neg_1", 1, &b, 1, &c));
    char *t = dump_to_mem(m, GF_DUMP_TEXT, NULL);
    assert_contains(t, "\ngraph \"g\\nraph\": 2 nodes");
    assert_contains(t, "\n\"#n\": Neg(\"a b\") -> \"x\\x01\\xff\xc3\xa9\" []\n");
    assert_contains(t, "\nonnx::Neg_1: Neg(\"x\\x01\\xff\xc3\xa9\") -> "
                       "/model/layers.0/Add_output_0\n");
    free(t);
    gf_model_free(m);
}

/* ---- JSON ------------------------------------------------------------------------ */

static void add_function(struct gf_model *m)
{
    struct gf_function *fn = gf_model_alloc(m, sizeof(*fn));
    struct gf_function **list = gf_model_alloc(m, sizeof(*list));
    assert_true(fn && list);
    fn->name = "MyFn";
    fn->domain = "custom";
    fn->body = gf_graph_create(m, NULL, NULL);
    assert_non_null(fn->body);
    struct gf_value *in = gf_graph_new_value(fn->body, "fx", NULL);
    struct gf_value *out = gf_graph_new_value(fn->body, "fy", NULL);
    assert_int_equal(gf_graph_add_input(fn->body, in), GF_OK);
    assert_int_equal(gf_graph_add_output(fn->body, out), GF_OK);
    assert_non_null(gf_graph_add_node(fn->body, "Relu", "", NULL, 1, &in, 1, &out));
    list[0] = fn;
    m->functions = list;
    m->n_functions = 1;
}

static void test_json_fields(void **state)
{
    (void)state;
    struct gf_model *m = build_model();
    add_every_attr(m, find_node(m, "ev"));
    add_function(m);
    size_t n;
    char *j = dump_to_mem(m, GF_DUMP_JSON, &n);
    assert_json_valid(j, n, "unit model");
    const char *head = "{\n  \"format\": \"graphfuse-dump\",\n  \"version\": 1,";
    assert_true(strncmp(j, head, strlen(head)) == 0);
    assert_contains(j, "\"ir_version\": 9,");
    assert_contains(j, "{\"domain\": \"com.microsoft\", \"version\": 1}");
    assert_contains(j, "\"producer_name\": \"unit test\",");
    assert_contains(j, "{\"name\": \"x\", \"kind\": \"tensor\", \"dtype\": \"float\", "
                       "\"shape\": [\"batch\", 4], \"type\": null}");
    assert_contains(j, "{\"name\": \"f\", \"kind\": \"tensor\", \"dtype\": \"float\", "
                       "\"shape\": [\"batch\", null], \"type\": null}");
    assert_contains(j, "{\"name\": \"e\", \"kind\": \"unknown\", \"dtype\": null, "
                       "\"shape\": null, \"type\": null}");
    assert_contains(j, "{\"name\": \"maxv\", \"dtype\": \"float\", \"shape\": [], "
                       "\"bytes\": 4, \"external\": null, \"values\": [6]}");
    assert_contains(j, "\"op_type\": \"Clip\",");
    assert_contains(j, "\"inputs\": [\"y\", null, \"maxv\"],");
    assert_contains(j, "\"domain\": \"com.microsoft\",\n"
                       "        \"category\": \"matmul\"");
    assert_contains(j, "\"alpha\": {\"type\": \"float\", \"ref\": null, \"value\": 0.5}");
    assert_contains(j, "\"nan\": {\"type\": \"float\", \"ref\": null, "
                       "\"value\": \"NaN\"}");
    assert_contains(j, "\"s\": {\"type\": \"string\", \"ref\": null, "
                       "\"value\": \"a\\\"b\\\\c\\nd\"}");
    assert_contains(j, "\"strings\": {\"type\": \"strings\", \"ref\": null, "
                       "\"value\": [\"p\", \"q\\u0000\\u00ff\"]}");
    assert_contains(j, "\"values\": [1, 2.5, -3, 0, 1e-05, 100]}");
    assert_contains(j, "\"big\": {\"type\": \"tensor\", \"ref\": null, \"value\": "
                       "{\"name\": \"big\", \"dtype\": \"int64\", \"shape\": [3, 3], "
                       "\"bytes\": 72, \"external\": null, \"values\": null}}");
    assert_contains(j, "\"alpha_ref\": {\"type\": \"float\", \"ref\": \"alpha\", "
                       "\"value\": null}");
    assert_contains(j, "\"name\": \"body_g\",");
    assert_contains(j, "\"op_type\": \"Identity\",");
    assert_contains(j, "\"functions\": [\n    {\n      \"name\": \"MyFn\",\n"
                       "      \"domain\": \"custom\",");
    assert_contains(j, "\"inputs\": [\"fx\"],\n      \"outputs\": [\"fy\"],");
    free(j);
    gf_model_free(m);
}

static void test_json_escapes(void **state)
{
    (void)state;
    struct gf_model *m = gf_model_new(9, "q\"\\\x1f\x7f\xe2\x82\xac\xe2\x82");
    struct gf_graph *g = m->graph;
    /* an encoded surrogate; then a code point past U+10FFFF and an overlong */
    struct gf_value *a = tensor_value(g, "\xed\xa0\x80", GF_FLOAT, 0, NULL);
    struct gf_value *b = tensor_value(g, "\xf4\x90\x80\x80\xc0\x80", GF_FLOAT, 0, NULL);
    assert_int_equal(gf_graph_add_input(g, a), GF_OK);
    assert_non_null(gf_graph_add_node(g, "A\tB", "d\r", "\b\f", 1, &a, 1, &b));
    assert_int_equal(gf_graph_add_output(g, b), GF_OK);
    size_t n;
    char *j = dump_to_mem(m, GF_DUMP_JSON, &n);
    assert_json_valid(j, n, "escapes");
    assert_contains(j, "\"name\": \"q\\\"\\\\\\u001f\\u007f"
                       "\xe2\x82\xac\\u00e2\\u0082\",");
    assert_contains(j, "\"name\": \"\\u00ed\\u00a0\\u0080\"");
    assert_contains(j, "\"name\": \"\\u00f4\\u0090\\u0080\\u0080\\u00c0\\u0080\"");
    assert_contains(j, "\"name\": \"\\b\\f\",");
    assert_contains(j, "\"op_type\": \"A\\tB\",");
    assert_contains(j, "\"domain\": \"d\\r\",");
    free(j);
    gf_model_free(m);
}

/* ---- DOT -------------------------------------------------------------------------- */

static void test_dot(void **state)
{
    (void)state;
    struct gf_model *m = build_model();
    add_every_attr(m, find_node(m, "ev"));
    char *d = dump_to_mem(m, GF_DUMP_DOT, NULL);
    assert_true(strncmp(d, "digraph graphfuse {\n", 20) == 0);
    assert_true(dot_balanced(d));
    assert_contains(d, "[label=\"MatMul\\nmm\", fillcolor=\"#f4a582\"];");
    assert_contains(d, "[label=\"com.microsoft.FusedMatMul\\nfm\", "
                       "fillcolor=\"#f4a582\"];");
    assert_contains(d, "[label=\"Relu\\n#1\", fillcolor=\"#fee08b\"];");
    assert_contains(d, "[label=\"x\\nfloat[batch,4]\", shape=ellipse");
    assert_contains(d, "subgraph cluster_");
    assert_contains(d, "label=\"body: body_g\";");
    assert_contains(d, "[style=dashed];");                 /* from an initializer */
    assert_contains(d, "[label=\"[batch,?]\", style=bold];"); /* to an output */
    assert_contains(d, "[label=\"[batch,4]\"];");
    if (have_dot())
        assert_true(dot_renders(d, true));
    free(d);
    gf_model_free(m);
}

static void test_dot_odd_names(void **state)
{
    (void)state;
    struct gf_model *m = gf_model_new(9, "a\"}\n{");
    struct gf_graph *g = m->graph;
    struct gf_value *a = tensor_value(g, "\\N\\G\"];\nx -> y [", GF_FLOAT, 0, NULL);
    struct gf_dim dim = {-1, "s\"y}m\xff", NULL};
    struct gf_value *b = tensor_value(g, "&amp; <b>\x01\xff", GF_FLOAT, 1, &dim);
    struct gf_value *c = gf_graph_new_value(g, "c", NULL);
    struct gf_value *undef = gf_graph_new_value(g, "undefined\"", NULL);
    assert_int_equal(gf_graph_add_input(g, a), GF_OK);
    assert_non_null(gf_graph_add_node(g, "Op\"}", "dom\\", "n\"{&amp;\x01\xff",
                                      1, &a, 1, &b));
    assert_non_null(gf_graph_add_node(g, "Add", "graphfuse", NULL, 2,
                                      (struct gf_value *[]){b, undef}, 1, &c));
    assert_int_equal(gf_graph_add_output(g, c), GF_OK);
    assert_int_equal(gf_graph_add_output(g, c), GF_OK); /* listed twice */
    char *d = dump_to_mem(m, GF_DUMP_DOT, NULL);
    assert_true(dot_balanced(d));
    assert_contains(d, "label=\"\\\\N\\\\G\\\"];\\\\x0ax -> y [\\nfloat[]\"");
    assert_contains(d, "[label=\"dom\\\\.Op\\\"}\\nn\\\"{&amp;amp;\\\\x01\\\\xff\", ");
    assert_contains(d, " [label=\"[s\\\"y}m\\\\xff]\"];");
    assert_contains(d, "[label=\"graphfuse.Add\\n#1\", fillcolor=\"#ff69b4\", "
                       "penwidth=2];");
    assert_contains(d, "undefined\\\"\\n(undefined)");
    if (have_dot())
        assert_true(dot_renders(d, true));
    free(d);
    gf_model_free(m);
}

/* Past DOT_MAX_INITS initializers, they are counted in the label instead. */
static void test_dot_many_inits(void **state)
{
    (void)state;
    struct gf_model *m = gf_model_new(9, "big");
    struct gf_graph *g = m->graph;
    struct gf_value *x = tensor_value(g, "x", GF_FLOAT, 0, NULL);
    assert_int_equal(gf_graph_add_input(g, x), GF_OK);
    for (int i = 0; i < 100; i++) {
        char name[16];
        snprintf(name, sizeof(name), "w%d", i);
        struct gf_value *w = gf_graph_add_initializer(
            g, name, gf_tensor_new(m, name, GF_FLOAT, 0, NULL, NULL));
        struct gf_value *y = gf_graph_new_value(g, NULL, "y");
        assert_non_null(gf_graph_add_node(g, "Add", "", NULL, 2,
                                          (struct gf_value *[]){x, w}, 1, &y));
        x = y;
    }
    assert_int_equal(gf_graph_add_output(g, x), GF_OK);
    char *d = dump_to_mem(m, GF_DUMP_DOT, NULL);
    assert_true(dot_balanced(d));
    assert_contains(d, "label=\"big\\n(100 initializers not shown)\"");
    assert_null(strstr(d, "style=dashed"));
    if (have_dot())
        assert_true(dot_renders(d, true));
    free(d);
    gf_model_free(m);
}

/* ---- errors ------------------------------------------------------------------------ */

static void test_errors(void **state)
{
    (void)state;
    struct gf_model *m = build_model();
    assert_int_equal(gf_model_dump(NULL, GF_DUMP_TEXT, stdout), GF_ERR_ARG);
    assert_int_equal(gf_model_dump(m, GF_DUMP_TEXT, NULL), GF_ERR_ARG);
    assert_int_equal(gf_model_dump(m, (enum gf_dump_format)42, stdout), GF_ERR_ARG);
    assert_non_null(strstr(gf_last_error(), "format"));
    FILE *full = fopen("/dev/full", "w");
    if (full) {
        for (int fmt = GF_DUMP_TEXT; fmt <= GF_DUMP_JSON; fmt++) {
            clearerr(full);
            assert_int_equal(gf_model_dump(m, (enum gf_dump_format)fmt, full), GF_ERR_IO);
            assert_non_null(strstr(gf_last_error(), "dump"));
        }
        fclose(full);
    }
    FILE *ro = fopen("/dev/null", "r"); /* writes to a read-only stream fail */
    assert_non_null(ro);
    assert_int_equal(gf_model_dump(m, GF_DUMP_JSON, ro), GF_ERR_IO);
    fclose(ro);
    gf_model_free(m);
}

/* A chain of `depth` nested subgraphs, each in attribute "g" of an If. */
static struct gf_model *nested_model(int depth)
{
    struct gf_model *m = gf_model_new(9, "g0");
    struct gf_graph *g = m->graph;
    for (int i = 0; i < depth; i++) {
        struct gf_value *out = gf_graph_new_value(g, "o", NULL);
        struct gf_node *n = gf_graph_add_node(g, "If", "", NULL, 0, NULL, 1, &out);
        assert_non_null(n);
        assert_int_equal(gf_graph_add_output(g, out), GF_OK);
        struct gf_graph *sub = gf_graph_create(m, g, n);
        assert_non_null(sub);
        sub->name = "sub";
        struct gf_attr *a = raw_attr(n, "g");
        a->type = GF_ATTR_GRAPH;
        a->g = sub;
        g = sub;
    }
    return m;
}

static void test_deep_nesting(void **state)
{
    (void)state;
    struct gf_model *m = nested_model(100);
    size_t n;
    char *j = dump_to_mem(m, GF_DUMP_JSON, &n);
    assert_json_valid(j, n, "100 levels");
    free(j);
    gf_model_free(m);

    m = nested_model(200); /* beyond what the dumps follow: an error, no crash */
    char *buf = NULL;
    FILE *f = open_memstream(&buf, &n);
    for (int fmt = GF_DUMP_TEXT; fmt <= GF_DUMP_JSON; fmt++)
        assert_int_equal(gf_model_dump(m, (enum gf_dump_format)fmt, f), GF_ERR_INVALID);
    assert_non_null(strstr(gf_last_error(), "nested"));
    fclose(f);
    free(buf);
    gf_model_free(m);
}

/* ---- every ONNX node-test model ----------------------------------------------- */

static void test_node_models(void **state)
{
    (void)state;
    glob_t gl;
    if (glob(NODE_TESTS, 0, NULL, &gl) != 0) {
        print_message("no %s: skipped\n", NODE_TESTS);
        skip();
    }
    bool dot_ok = have_dot();
    size_t step = gl.gl_pathc / 20 + 1, loaded = 0, rendered = 0;
    for (size_t i = 0; i < gl.gl_pathc; i++) {
        const char *path = gl.gl_pathv[i];
        struct gf_model *m;
        if (gf_model_load(path, NULL, &m) != GF_OK) {
            print_message("not loaded: %s\n", gf_last_error());
            continue;
        }
        loaded++;
        /* as `graphfuse dump` does; a model it rejects is dumped as loaded */
        (void)gf_graph_infer_shapes(m->graph);
        size_t n;
        free(dump_to_mem(m, GF_DUMP_TEXT, NULL));
        char *j = dump_to_mem(m, GF_DUMP_JSON, &n);
        assert_json_valid(j, n, path);
        free(j);
        char *d = dump_to_mem(m, GF_DUMP_DOT, NULL);
        if (!dot_balanced(d))
            fail_msg("%s: unbalanced DOT", path);
        if (dot_ok && i % step == 0) {
            if (!dot_renders(d, false))
                fail_msg("%s: dot -Tsvg failed", path);
            rendered++;
        }
        free(d);
        gf_model_free(m);
    }
    print_message("%zu of %zu node-test models dumped, %zu DOT files rendered\n",
                  loaded, gl.gl_pathc, rendered);
    assert_true(loaded * 10 >= gl.gl_pathc * 9); /* the loader handles nearly all */
    globfree(&gl);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_validator_itself),
        cmocka_unit_test(test_text_lines),
        cmocka_unit_test(test_text_odd_names),
        cmocka_unit_test(test_json_fields),
        cmocka_unit_test(test_json_escapes),
        cmocka_unit_test(test_dot),
        cmocka_unit_test(test_dot_odd_names),
        cmocka_unit_test(test_dot_many_inits),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_deep_nesting),
        cmocka_unit_test(test_node_models),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
