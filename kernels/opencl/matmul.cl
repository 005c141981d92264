/* matmul.cl — one register-blocked GEMM for MatMul, Gemm and MatMulEpilogue:
 *
 *   Y[z, m, n] = act(alpha * sum_k A'[z, m, k] B'[z, k, n] + beta * Bias[z, m, n]) + Res[z, m, n]
 *
 * z is the (broadcast) batch index, A' is A or, with TRANS_A, A stored
 * [K, M]; B' is B or, with TRANS_B, B stored [N, K].  Bias and Res are read
 * through strides (0 where they broadcast); Y is dense [batch, M, N].  Every
 * tensor is in store_t (storage.cl: float, half or bfloat16); the products,
 * sums and the epilogue are in float, and Y is stored once.
 *
 * A work-group of TX x TY threads computes a BM x BN tile of Y; each thread
 * keeps WM x WN of it in registers: WM / GM groups of GM consecutive rows,
 * GM * TY rows apart (columns likewise, GN at a time), so that for each k
 * the threads of a warp read their rows and columns of the tile as vectors
 * that lie side by side in local memory (no bank conflicts), and store Y
 * the same way.  Groups run over (batch x tile column, tile row).
 *
 * K is walked BK at a time.  The A' and B' slices live in local memory
 * k-major (As[k][m], Bs[k][n], rows padded by 4 floats), copied from global
 * memory va / vb floats per load (arguments: 4 when the host found the
 * rows aligned for it, else 1; a uniform branch per slice, so that one
 * build serves both), zeros past the matrix edges.  While a thread multiplies
 * one slice, its share of the next one is already on its way into
 * registers (when that share is at most 32 floats; else it is copied
 * after), and the next slice goes into the other of two pairs of local
 * buffers, so that one barrier per slice suffices.
 *
 * Options: BM, BN (32..128), BK (8..32), WM, WN (1, 2, 4 or 8, dividing BM
 * and BN), TRANS_A, TRANS_B (defined or not).
 */
#define TX (BN / WN)    /* threads along N */
#define TY (BM / WM)    /* threads along M */
#define NT (TX * TY)    /* threads of the group */
#define GM (WM < 4 ? WM : 4)
#define GN (WN < 4 ? WN : 4)
#define LA (BM + 4)     /* local row strides: multiples of 4, off the bank period */
#define LB (BN + 4)

/* Must match struct mm_geom in matmul.c. */
typedef struct {
    long sa[8], sb[8], sbias[8], sres[8]; /* element strides of each batch dim */
    long bias_m, bias_n, res_m, res_n;    /* strides over rows and columns of Y */
    int dims[8];                          /* batch dims */
    int rank;                             /* how many */
    int m, n, k, lda, ldb;                /* lda, ldb: row strides of A, B as stored */
    int act, has_bias, has_res;           /* act: enum mact of matmul.c */
    int va, vb;                           /* elements per global load of A, B: 1 or 4 */
    float alpha, beta;
} mm_geom;

/* Four elements from element e (a multiple of 4, the host checked); plain
 * float4 accesses for float, so that they become single 16-byte ones. */
#if defined(GF_STORE_F16) || defined(GF_STORE_BF16)
#define GLD4(p, e) LD4((p) + (e), 0)
#define GST4(p, e, v) ST4((p) + (e), 0, v)
#else
#define GLD4(p, e) (*(__global const float4 *)((p) + (e)))
#define GST4(p, e, v) (*(__global float4 *)((p) + (e)) = (v))
#endif

#define CAT_(a, b) a##b
#define CAT(a, b) CAT_(a, b)

/* GLOAD_V: d[0..V) = elements e.. of p (V: 1 or 4, a literal). */
#define GLOAD_4(d, p, e)                                                                   \
    {                                                                                      \
        float4 t_ = GLD4(p, e);                                                            \
        (d)[0] = t_.x, (d)[1] = t_.y, (d)[2] = t_.z, (d)[3] = t_.w;                         \
    }
#define GLOAD_1(d, p, e) (d)[0] = LD(p, e);

/* d[0..G) = L[0..G), L aligned to G floats (G: 1, 2 or 4). */
#define LLOAD(G, d, L)                                                                     \
    if ((G) == 4) {                                                                        \
        float4 t_ = *(__local const float4 *)(L);                                          \
        (d)[0] = t_.x, (d)[1] = t_.y, (d)[2] = t_.z, (d)[3] = t_.w;                         \
    } else if ((G) == 2) {                                                                 \
        float2 t_ = *(__local const float2 *)(L);                                          \
        (d)[0] = t_.x, (d)[1] = t_.y;                                                      \
    } else {                                                                               \
        (d)[0] = (L)[0];                                                                   \
    }

/* A slice is rows [r0, r0+R) x columns [c0, c0+C) of a stored matrix P
 * (rows x cols valid, row stride ld == cols, so that a chunk of V floats
 * lies wholly inside or wholly outside), copied in chunks of V floats:
 * thread tid takes chunks q = tid + it * NT, it < ITERS, chunk q being row
 * q / (C/V), columns from q % (C/V) * V.  Element (r, c) goes to local
 * L[c*LS + r] when TR (the copy transposes), else L[r*LS + c]. */
#define CHUNKS(R, C, V) ((R) * (C) / (V))
#define ITERS(R, C, V) ((CHUNKS(R, C, V) + NT - 1) / NT)
#define HAS(R, C, V, q) (CHUNKS(R, C, V) % NT == 0 || (q) < CHUNKS(R, C, V))

/* d[0..V) = the chunk at (gr, gc), zeros outside the matrix. */
#define CHUNK(d, P, ld, rows, cols, gr, gc, V)                                             \
    if ((gr) < (rows) && (gc) < (cols)) {                                                  \
        CAT(GLOAD_, V)(d, P, (long)(gr) * (ld) + (gc))                                     \
    } else {                                                                               \
        _Pragma("unroll") for (int e = 0; e < (V); e++)                                    \
            (d)[e] = 0.0f;                                                                 \
    }

/* STASH_V: L[chunk (r, c)] = d[0..V); one 16-byte store when the chunk
 * stays a row (L, LS and c are multiples of 4 floats). */
#define STASH_4(L, LS, d, r, c, TR)                                                        \
    if (TR) {                                                                              \
        _Pragma("unroll") for (int e = 0; e < 4; e++)                                      \
            (L)[((c) + e) * (LS) + (r)] = (d)[e];                                          \
    } else {                                                                               \
        *(__local float4 *)((L) + (r) * (LS) + (c)) = (float4)((d)[0], (d)[1], (d)[2], (d)[3]); \
    }
#define STASH_1(L, LS, d, r, c, TR) (L)[(TR) ? (c) * (LS) + (r) : (r) * (LS) + (c)] = (d)[0];

/* regs[it*V ..] = chunk it of this thread. */
#define FETCH(regs, P, ld, rows, cols, r0, c0, R, C, V)                                    \
    _Pragma("unroll") for (int it = 0; it < ITERS(R, C, V); it++) {                        \
        int q = tid + it * NT, r = q / ((C) / (V)), c = q % ((C) / (V)) * (V);             \
        if (HAS(R, C, V, q)) {                                                             \
            CHUNK((regs) + it * (V), P, ld, rows, cols, (r0) + r, (c0) + c, V)             \
        }                                                                                  \
    }

/* Local L = the chunks in regs. */
#define PUT(L, LS, regs, R, C, V, TR)                                                      \
    _Pragma("unroll") for (int it = 0; it < ITERS(R, C, V); it++) {                        \
        int q = tid + it * NT, r = q / ((C) / (V)), c = q % ((C) / (V)) * (V);             \
        if (HAS(R, C, V, q)) {                                                             \
            CAT(STASH_, V)(L, LS, (regs) + it * (V), r, c, TR)                             \
        }                                                                                  \
    }

/* Both at once, chunk by chunk (no registers held across the product). */
#define COPY(L, LS, P, ld, rows, cols, r0, c0, R, C, V, TR)                                \
    for (int q = tid; q < CHUNKS(R, C, V); q += NT) {                                      \
        float d_[V];                                                                       \
        int r = q / ((C) / (V)), c = q % ((C) / (V)) * (V);                                \
        CHUNK(d_, P, ld, rows, cols, (r0) + r, (c0) + c, V)                                \
        CAT(STASH_, V)(L, LS, d_, r, c, TR)                                             \
    }

/* The same with v (1 or 4) floats per chunk, chosen at run time. */
#define FETCH_ANY(regs, P, ld, rows, cols, r0, c0, R, C, v)                                \
    if ((v) == 4) {                                                                        \
        FETCH(regs, P, ld, rows, cols, r0, c0, R, C, 4)                                    \
    } else {                                                                               \
        FETCH(regs, P, ld, rows, cols, r0, c0, R, C, 1)                                    \
    }
#define PUT_ANY(L, LS, regs, R, C, v, TR)                                                  \
    if ((v) == 4) {                                                                        \
        PUT(L, LS, regs, R, C, 4, TR)                                                      \
    } else {                                                                               \
        PUT(L, LS, regs, R, C, 1, TR)                                                      \
    }
#define COPY_ANY(L, LS, P, ld, rows, cols, r0, c0, R, C, v, TR)                            \
    if ((v) == 4) {                                                                        \
        COPY(L, LS, P, ld, rows, cols, r0, c0, R, C, 4, TR)                                \
    } else {                                                                               \
        COPY(L, LS, P, ld, rows, cols, r0, c0, R, C, 1, TR)                                \
    }

/* A thread's share of a slice in floats, whole chunks of either width. */
#define SHARE_V(R, C, V) (ITERS(R, C, V) * (V))
#define SHARE(R, C) (SHARE_V(R, C, 4) > SHARE_V(R, C, 1) ? SHARE_V(R, C, 4) : SHARE_V(R, C, 1))

/* The A' and B' slices of K from k0 as stored: A [M, K] or (TRANS_A)
 * [K, M], B [K, N] or (TRANS_B) [N, K]; into As[k][m], Bs[k][n]. */
#ifdef TRANS_A
#define A_REGS SHARE(BK, BM)
#define FETCH_A(k0) FETCH_ANY(ra, A, g.lda, g.k, g.m, k0, m0, BK, BM, g.va)
#define PUT_A(L) PUT_ANY(L, LA, ra, BK, BM, g.va, 0)
#define COPY_A(L, k0) COPY_ANY(L, LA, A, g.lda, g.k, g.m, k0, m0, BK, BM, g.va, 0)
#else
#define A_REGS SHARE(BM, BK)
#define FETCH_A(k0) FETCH_ANY(ra, A, g.lda, g.m, g.k, m0, k0, BM, BK, g.va)
#define PUT_A(L) PUT_ANY(L, LA, ra, BM, BK, g.va, 1)
#define COPY_A(L, k0) COPY_ANY(L, LA, A, g.lda, g.m, g.k, m0, k0, BM, BK, g.va, 1)
#endif
#ifdef TRANS_B
#define B_REGS SHARE(BN, BK)
#define FETCH_B(k0) FETCH_ANY(rb, B, g.ldb, g.n, g.k, n0, k0, BN, BK, g.vb)
#define PUT_B(L) PUT_ANY(L, LB, rb, BN, BK, g.vb, 1)
#define COPY_B(L, k0) COPY_ANY(L, LB, B, g.ldb, g.n, g.k, n0, k0, BN, BK, g.vb, 1)
#else
#define B_REGS SHARE(BK, BN)
#define FETCH_B(k0) FETCH_ANY(rb, B, g.ldb, g.k, g.n, k0, n0, BK, BN, g.vb)
#define PUT_B(L) PUT_ANY(L, LB, rb, BK, BN, g.vb, 0)
#define COPY_B(L, k0) COPY_ANY(L, LB, B, g.ldb, g.k, g.n, k0, n0, BK, BN, g.vb, 0)
#endif

/* LOAD_NEXT(k0) starts fetching the slices from k0, STORE_NEXT(as, bs, k0)
 * puts them into local memory: through registers held during the product
 * when a thread's share is small enough, else straight. */
#if A_REGS + B_REGS <= 32
#define PREFETCH
#define LOAD_NEXT(k0) FETCH_A(k0) FETCH_B(k0)
#define STORE_NEXT(as, bs, k0) PUT_A(as) PUT_B(bs)
#else
#define LOAD_NEXT(k0)
#define STORE_NEXT(as, bs, k0) COPY_A(as, k0) COPY_B(bs, k0)
#endif

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

__kernel __attribute__((reqd_work_group_size(TX, TY, 1)))
void mm(__global const store_t *A, __global const store_t *B, __global store_t *Y,
        __global const store_t *bias, __global const store_t *res, const mm_geom g,
        const int tiles_n)
{
    __local float As[2 * BK * LA] __attribute__((aligned(16))); /* As[buf][k*LA + m] */
    __local float Bs[2 * BK * LB] __attribute__((aligned(16))); /* Bs[buf][k*LB + n] */
    const int tx = get_local_id(0), ty = get_local_id(1), tid = ty * TX + tx;
    const int batch = get_group_id(0) / tiles_n;
    const int m0 = get_group_id(1) * BM, n0 = (get_group_id(0) - batch * tiles_n) * BN;

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

    float acc[WM][WN];
    _Pragma("unroll") for (int i = 0; i < WM; i++)
        _Pragma("unroll") for (int j = 0; j < WN; j++)
            acc[i][j] = 0.0f;

#ifdef PREFETCH
    float ra[A_REGS], rb[B_REGS];
#endif
    const int slices = (g.k + BK - 1) / BK;
    if (slices > 0) {
        LOAD_NEXT(0)
        STORE_NEXT(As, Bs, 0)
    }
    barrier(CLK_LOCAL_MEM_FENCE);
    for (int s = 0; s < slices; s++) {
        const int cur = s & 1;
        const bool more = s + 1 < slices;
        if (more) {
            LOAD_NEXT((s + 1) * BK)
        }
        __local const float *as = As + cur * BK * LA + ty * GM;
        __local const float *bs = Bs + cur * BK * LB + tx * GN;
        _Pragma("unroll") for (int k = 0; k < BK; k++) {
            float a[WM], b[WN];
            _Pragma("unroll") for (int i = 0; i < WM / GM; i++)
                LLOAD(GM, a + i * GM, as + k * LA + i * TY * GM)
            _Pragma("unroll") for (int j = 0; j < WN / GN; j++)
                LLOAD(GN, b + j * GN, bs + k * LB + j * TX * GN)
            _Pragma("unroll") for (int i = 0; i < WM; i++)
                _Pragma("unroll") for (int j = 0; j < WN; j++)
                    acc[i][j] = mad(a[i], b[j], acc[i][j]);
        }
        /* the other buffers were last read before the previous barrier */
        if (more) {
            STORE_NEXT(As + (cur ^ 1) * BK * LA, Bs + (cur ^ 1) * BK * LB, (s + 1) * BK)
        }
        barrier(CLK_LOCAL_MEM_FENCE);
    }

    _Pragma("unroll") for (int i = 0; i < WM; i++) {
        const int m = m0 + i / GM * TY * GM + ty * GM + i % GM;
        if (m >= g.m)
            continue;
        __global store_t *y = Y + (long)m * g.n;
        _Pragma("unroll") for (int j = 0; j < WN; j += GN) {
            const int n = n0 + j / GN * TX * GN + tx * GN;
            float v[GN];
            _Pragma("unroll") for (int e = 0; e < GN; e++) {
                v[e] = g.alpha * acc[i][j + e];
                if (n + e >= g.n)
                    continue;
                if (g.has_bias)
                    v[e] += g.beta * LD(bias, obias + m * g.bias_m + (n + e) * g.bias_n);
                v[e] = act_apply(v[e], g.act);
                if (g.has_res)
                    v[e] += LD(res, ores + m * g.res_m + (n + e) * g.res_n);
            }
#if GN == 4
            if (g.n % 4 == 0 && n + 4 <= g.n) {
                GST4(y, n, (float4)(v[0], v[1], v[2], v[3]));
                continue;
            }
#endif
            for (int e = 0; e < GN && n + e < g.n; e++)
                ST(y, n + e, v[e]);
        }
    }
}
