/* matmul.cl — one tiled fp32 GEMM for MatMul, Gemm and MatMulEpilogue:
 *
 *   Y[z, m, n] = act(alpha * sum_k A'[z, m, k] B'[z, k, n] + beta * Bias[z, m, n]) + Res[z, m, n]
 *
 * z is the (broadcast) batch index, A' is A or, with TRANS_A, A stored
 * [K, M]; B' is B or, with TRANS_B, B stored [N, K].  Bias and Res are read
 * through strides (0 where they broadcast); Y is dense [batch, M, N].
 *
 * A work-group computes a TS x TS tile of Y with (TS/WPT)^2 threads, each
 * owning a WPT x WPT block of it in registers (rows ty*WPT.., columns
 * tx*WPT..: contiguous, so local reads are vector reads).  Groups run
 * over (batch x tile column, tile row): dim 0 has room for many batches.
 * K is walked TK at a time: the group copies the A' and B' slices into
 * local memory (k-major, rows padded by 4 floats), vwa / vwb floats per
 * global load (1, 2 or 4: as wide as the host found the rows aligned for),
 * zeros past the matrix edges; then every thread folds the slices into its
 * block while its share of the next slices is already being fetched into
 * registers (when that share is small enough).  The epilogue runs on the
 * registers before the single store.
 *
 * Options: TS (16..128), TK (8..32), WPT (1..8), TRANS_A, TRANS_B (defined
 * or not).  The load widths are arguments (a uniform branch per slice), so
 * one build serves every width.
 */
#define RT (TS / WPT)   /* threads along each dim of the group */
#define NT (RT * RT)    /* threads of the group */
#define LS (TS + 4)     /* local row stride: a multiple of 4, off the bank period */

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)

/* Must match struct mm_geom in matmul.c. */
typedef struct {
    long sa[8], sb[8], sbias[8], sres[8]; /* element strides of each batch dim */
    long bias_m, bias_n, res_m, res_n;    /* strides over rows and columns of Y */
    int dims[8];                          /* batch dims */
    int rank;                             /* how many */
    int m, n, k, lda, ldb;                /* lda, ldb: row strides of A, B as stored */
    int act, has_bias, has_res;           /* act: enum mact of matmul.c */
    int vwa, vwb;                         /* floats per global load of A, B */
    float alpha, beta;
} mm_geom;

/* v[0..W) = p[0..W), p aligned to W floats (the host checked). */
inline void gload1(float *v, __global const float *p)
{
    v[0] = p[0];
}

inline void gload2(float *v, __global const float *p)
{
    float2 t = *(__global const float2 *)p;
    v[0] = t.x, v[1] = t.y;
}

inline void gload4(float *v, __global const float *p)
{
    float4 t = *(__global const float4 *)p;
    v[0] = t.x, v[1] = t.y, v[2] = t.z, v[3] = t.w;
}

/* A slice is rows [r0, r0+R) x columns [c0, c0+C) of a stored matrix
 * (rows x cols valid, row stride ld, columns contiguous), copied in chunks
 * of VW floats: thread tid takes chunks q = tid + it * NT, it < ITERS, into
 * registers regs[it*VW ..] (FETCH; zeros outside the matrix), and later
 * puts them into local L (PUT): element (r, c) at L[c*LS + r] when TR (the
 * copy transposes), else L[r*LS + c].  REGS floats hold any width's chunks. */
#define CHUNKS(R, C, VW) ((R) * (C) / (VW))
#define ITERS(R, C, VW) ((CHUNKS(R, C, VW) + NT - 1) / NT)
#define REGS(R, C) (ITERS(R, C, 4) * 4)

#define FETCH(regs, P, ld, rows, cols, r0, c0, R, C, VW)                                   \
    _Pragma("unroll") for (int it = 0; it < ITERS(R, C, VW); it++) {                       \
        int q = tid + it * NT, r = q / ((C) / (VW)), c = q % ((C) / (VW)) * (VW);           \
        int gr = (r0) + r, gc = (c0) + c;                                                  \
        bool in = q < CHUNKS(R, C, VW) && gr < (rows);                                     \
        __global const float *p = (P) + (long)gr * (ld) + gc;                              \
        if (in && gc + (VW) <= (cols)) {                                                   \
            CAT(gload, VW)(regs + it * (VW), p);                                           \
        } else {                                                                           \
            for (int e = 0; e < (VW); e++)                                                 \
                regs[it * (VW) + e] = in && gc + e < (cols) ? p[e] : 0.0f;                 \
        }                                                                                  \
    }

#define PUT(L, regs, R, C, VW, TR)                                                         \
    _Pragma("unroll") for (int it = 0; it < ITERS(R, C, VW); it++) {                       \
        int q = tid + it * NT, r = q / ((C) / (VW)), c = q % ((C) / (VW)) * (VW);           \
        if (q < CHUNKS(R, C, VW)) {                                                        \
            for (int e = 0; e < (VW); e++) {                                               \
                if (TR)                                                                    \
                    L[(c + e) * LS + r] = regs[it * (VW) + e];                             \
                else                                                                       \
                    L[r * LS + c + e] = regs[it * (VW) + e];                               \
            }                                                                              \
        }                                                                                  \
    }

/* Without room in registers: each chunk goes straight from global to
 * local memory, the loop not unrolled. */
#define COPY(L, P, ld, rows, cols, r0, c0, R, C, VW, TR)                                   \
    for (int q = tid; q < CHUNKS(R, C, VW); q += NT) {                                    \
        int r = q / ((C) / (VW)), c = q % ((C) / (VW)) * (VW);                             \
        int gr = (r0) + r, gc = (c0) + c;                                                  \
        float v[VW];                                                                       \
        __global const float *p = (P) + (long)gr * (ld) + gc;                              \
        if (gr < (rows) && gc + (VW) <= (cols)) {                                          \
            CAT(gload, VW)(v, p);                                                          \
        } else {                                                                           \
            for (int e = 0; e < (VW); e++)                                                 \
                v[e] = gr < (rows) && gc + e < (cols) ? p[e] : 0.0f;                       \
        }                                                                                  \
        for (int e = 0; e < (VW); e++) {                                                   \
            if (TR)                                                                        \
                L[(c + e) * LS + r] = v[e];                                                \
            else                                                                           \
                L[r * LS + c + e] = v[e];                                                  \
        }                                                                                  \
    }

/* The same with vw (1, 2, 4) floats per load, chosen at run time. */
#define FETCH_ANY(regs, P, ld, rows, cols, r0, c0, R, C, vw)                               \
    if ((vw) == 4) {                                                                       \
        FETCH(regs, P, ld, rows, cols, r0, c0, R, C, 4)                                    \
    } else if ((vw) == 2) {                                                                \
        FETCH(regs, P, ld, rows, cols, r0, c0, R, C, 2)                                    \
    } else {                                                                               \
        FETCH(regs, P, ld, rows, cols, r0, c0, R, C, 1)                                    \
    }

#define PUT_ANY(L, regs, R, C, vw, TR)                                                     \
    if ((vw) == 4) {                                                                       \
        PUT(L, regs, R, C, 4, TR)                                                          \
    } else if ((vw) == 2) {                                                                \
        PUT(L, regs, R, C, 2, TR)                                                          \
    } else {                                                                               \
        PUT(L, regs, R, C, 1, TR)                                                          \
    }

#define COPY_ANY(L, P, ld, rows, cols, r0, c0, R, C, vw, TR)                               \
    if ((vw) == 4) {                                                                       \
        COPY(L, P, ld, rows, cols, r0, c0, R, C, 4, TR)                                    \
    } else if ((vw) == 2) {                                                                \
        COPY(L, P, ld, rows, cols, r0, c0, R, C, 2, TR)                                    \
    } else {                                                                               \
        COPY(L, P, ld, rows, cols, r0, c0, R, C, 1, TR)                                    \
    }

/* A' and B' slices of K from k0, as stored: A [M, K] or (TRANS_A) [K, M],
 * B [K, N] or (TRANS_B) [N, K]; local As[k][m], Bs[k][n]. */
#ifdef TRANS_A
#define A_REGS REGS(TK, TS)
#define FETCH_A(k0) FETCH_ANY(ra, A, g.lda, g.k, g.m, k0, m0, TK, TS, g.vwa)
#define PUT_A PUT_ANY(As, ra, TK, TS, g.vwa, 0)
#define COPY_A(k0) COPY_ANY(As, A, g.lda, g.k, g.m, k0, m0, TK, TS, g.vwa, 0)
#else
#define A_REGS REGS(TS, TK)
#define FETCH_A(k0) FETCH_ANY(ra, A, g.lda, g.m, g.k, m0, k0, TS, TK, g.vwa)
#define PUT_A PUT_ANY(As, ra, TS, TK, g.vwa, 1)
#define COPY_A(k0) COPY_ANY(As, A, g.lda, g.m, g.k, m0, k0, TS, TK, g.vwa, 1)
#endif
#ifdef TRANS_B
#define B_REGS REGS(TS, TK)
#define FETCH_B(k0) FETCH_ANY(rb, B, g.ldb, g.n, g.k, n0, k0, TS, TK, g.vwb)
#define PUT_B PUT_ANY(Bs, rb, TS, TK, g.vwb, 1)
#define COPY_B(k0) COPY_ANY(Bs, B, g.ldb, g.n, g.k, n0, k0, TS, TK, g.vwb, 1)
#else
#define B_REGS REGS(TK, TS)
#define FETCH_B(k0) FETCH_ANY(rb, B, g.ldb, g.k, g.n, k0, n0, TK, TS, g.vwb)
#define PUT_B PUT_ANY(Bs, rb, TK, TS, g.vwb, 0)
#define COPY_B(k0) COPY_ANY(Bs, B, g.ldb, g.k, g.n, k0, n0, TK, TS, g.vwb, 0)
#endif

/* Slices of up to 8 floats a thread are fetched ahead, into registers
 * (few threads for a large tile would need too many). */
#if A_REGS <= 8 && B_REGS <= 8
#define PREFETCH
#endif

/* w[0..WPT) = L[0..WPT), L aligned to min(WPT, 4) floats. */
inline void lds(float *w, __local const float *L)
{
#if WPT % 4 == 0
    for (int i = 0; i < WPT; i += 4) {
        float4 t = *(__local const float4 *)(L + i);
        w[i] = t.x, w[i + 1] = t.y, w[i + 2] = t.z, w[i + 3] = t.w;
    }
#elif WPT == 2
    float2 t = *(__local const float2 *)L;
    w[0] = t.x, w[1] = t.y;
#else
    for (int i = 0; i < WPT; i++)
        w[i] = L[i];
#endif
}

/* The activations of MatMulEpilogue (enum mact in matmul.c), computed as
 * the CPU kernel does: gelu from erfc, its tanh form through a sigmoid. */
inline float act_apply(float x, int act)
{
    switch (act) {
    case 1: return x < 0.0f ? 0.0f : x;
    case 2: return 0.5f * x * erfc(-x * 0.70710678118654752f);
    case 3: return x / (1.0f + exp(-1.5957691216057308f * (x + 0.044715f * x * x * x)));
    case 4: return x / (1.0f + exp(-x));
    case 5: return tanh(x);
    case 6: return 1.0f / (1.0f + exp(-x));
    default: return x;
    }
}

__kernel __attribute__((reqd_work_group_size(RT, RT, 1)))
void mm_f32(__global const float *A, __global const float *B, __global float *Y,
            __global const float *bias, __global const float *res, const mm_geom g,
            const int tiles_n)
{
    __local float As[TK * LS] __attribute__((aligned(16))); /* As[k*LS + m] */
    __local float Bs[TK * LS] __attribute__((aligned(16))); /* Bs[k*LS + n] */
    const int tx = get_local_id(0), ty = get_local_id(1), tid = ty * RT + tx;
    const int batch = get_group_id(0) / tiles_n;
    const int m0 = get_group_id(1) * TS, n0 = (get_group_id(0) - batch * tiles_n) * TS;

    long oa = 0, ob = 0, obias = 0, ores = 0;
    for (int d = g.rank - 1, z = batch; d >= 0; d--) {
        int x = z % g.dims[d];
        z /= g.dims[d];
        oa += x * g.sa[d];
        ob += x * g.sb[d];
        obias += x * g.sbias[d];
        ores += x * g.sres[d];
    }
    A += oa;
    B += ob;
    Y += (long)batch * g.m * g.n;

    float acc[WPT][WPT];
    _Pragma("unroll") for (int i = 0; i < WPT; i++)
        _Pragma("unroll") for (int j = 0; j < WPT; j++)
            acc[i][j] = 0.0f;

#ifdef PREFETCH /* the next slices come into registers while this one is used */
    float ra[A_REGS], rb[B_REGS];
    FETCH_A(0)
    FETCH_B(0)
#endif
    for (int k0 = 0; k0 < g.k; k0 += TK) {
#ifdef PREFETCH
        PUT_A
        PUT_B
        barrier(CLK_LOCAL_MEM_FENCE);
        if (k0 + TK < g.k) {
            FETCH_A(k0 + TK)
            FETCH_B(k0 + TK)
        }
#else
        COPY_A(k0)
        COPY_B(k0)
        barrier(CLK_LOCAL_MEM_FENCE);
#endif
        for (int k = 0; k < TK; k++) {
            float a[WPT], b[WPT];
            lds(a, As + k * LS + ty * WPT);
            lds(b, Bs + k * LS + tx * WPT);
            _Pragma("unroll") for (int i = 0; i < WPT; i++)
                _Pragma("unroll") for (int j = 0; j < WPT; j++)
                    acc[i][j] = mad(a[i], b[j], acc[i][j]);
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    for (int i = 0; i < WPT; i++) {
        int m = m0 + ty * WPT + i;
        if (m >= g.m)
            break;
        for (int j = 0; j < WPT; j++) {
            int n = n0 + tx * WPT + j;
            if (n >= g.n)
                break;
            float v = g.alpha * acc[i][j];
            if (g.has_bias)
                v += g.beta * bias[obias + m * g.bias_m + n * g.bias_n];
            v = act_apply(v, g.act);
            if (g.has_res)
                v += res[ores + m * g.res_m + n * g.res_n];
            Y[(long)m * g.n + n] = v;
        }
    }
}
