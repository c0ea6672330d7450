/* bf16.c: bfloat16 conversions and the bf16 tile products (bf16.h).
 *
 * A product packs op(A) and op(B) as they are stored (transposed or not,
 * the primitive's strides say which) into the calling thread's scratch,
 * rounded to bf16, then runs the declared shape's oneDNN primitive, which
 * writes C in place (alpha as its output scale, beta = 1 as a sum
 * post-op). Edge tiles and the OpenBLAS engine pack the same rounded
 * values as float32 and call sgemm instead. */
#include <omp.h>
#include <stdlib.h>

#include "bf16.h"
#include "internal.h"
#include "kernel.h"

#ifdef RA_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif
#ifdef __x86_64__
#include <immintrin.h>
#endif

void ra_bf16_round(float *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = ra_bf16_to_f32(ra_bf16_of(x[i]));
}

void ra_bf16_round_f64(double *x, int64_t n)
{
    for (int64_t i = 0; i < n; i++)
        x[i] = ra_bf16_to_f32(ra_bf16_of((float)x[i]));
}

void ra_bf16_pack(const float *x, int64_t n, uint16_t *out)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = ra_bf16_of(x[i]);
}

void ra_bf16_unpack(const uint16_t *x, int64_t n, float *out)
{
    for (int64_t i = 0; i < n; i++)
        out[i] = ra_bf16_to_f32(x[i]);
}

/* One thread's scratch: the operands of shape i packed in bf16 at
 * a16 + i a_len and b16 + i b_len (each shape its own, so that a kept A
 * survives the other products), as rounded float32 (a32, b32), oneDNN's
 * scratchpad, and per shape the A whose copy a16 holds (a_kept). */
typedef struct {
    uint16_t *a16, *b16;
    float *a32, *b32;
    void *pad;
    const float **kept;
} mm16_scratch;

/* Packs rows x cols of x (row stride ld) into out as bf16. */
typedef void (*pack16_fn)(const float *x, int64_t rows, int64_t cols,
                          int64_t ld, uint16_t *out);

struct ra_mm16 {
    ra_gemm gemm; /* resolved: the engine of the emulated products */
    pack16_fn pack; /* pack16, or pack16_cvt on cores with AVX512_BF16 */
    int threads, count;
    ra_mm_shape shape[RA_MM16_MAX];
    int64_t a_len, b_len; /* elements of the largest op(A) and op(B) */
    size_t pad_len;       /* bytes of the largest scratchpad */
    size_t per_thread;    /* bytes of each thread's scratch, 64-aligned */
    char *mem;            /* threads * per_thread */
#ifdef RA_HAVE_ONEDNN
    dnnl_engine_t eng;
    dnnl_primitive_t prim[RA_MM16_MAX];
    dnnl_stream_t *stream; /* (threads) */
    dnnl_memory_t *args;   /* (threads, count, 4): A, B, C, scratchpad */
#endif
};

static size_t up64(size_t x) { return (x + 63) & ~(size_t)63; }

/* Bytes of each part of a thread's scratch, in order. */
static void scratch_sizes(const ra_mm16 *e, size_t sz[6])
{
    sz[0] = up64((size_t)(e->a_len * RA_MM16_MAX) * 2);
    sz[1] = up64((size_t)(e->b_len * RA_MM16_MAX) * 2);
    sz[2] = up64((size_t)e->a_len * 4);
    sz[3] = up64((size_t)e->b_len * 4);
    sz[4] = up64(e->pad_len);
    sz[5] = up64(sizeof(const float *) * RA_MM16_MAX);
}

static mm16_scratch scratch_of(const ra_mm16 *e, int tid)
{
    char *p = e->mem + (size_t)tid * e->per_thread;
    size_t sz[6];
    scratch_sizes(e, sz);
    mm16_scratch s;
    s.a16 = (uint16_t *)p;
    s.b16 = (uint16_t *)(p += sz[0]);
    s.a32 = (float *)(p += sz[1]);
    s.b32 = (float *)(p += sz[2]);
    s.pad = p += sz[3];
    s.kept = (const float **)(p + sz[4]);
    return s;
}

/* rows x cols of x (row stride ld) into out, packed, as bf16 or as
 * rounded float32; compiled for AVX-512 and AVX2 too, picked at load. */
__attribute__((target_clones("avx512f", "avx2", "default")))
static void pack16(const float *x, int64_t rows, int64_t cols, int64_t ld,
                   uint16_t *out)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            out[r * cols + c] = ra_bf16_of(x[r * ld + c]);
}

#ifdef __x86_64__
/* The same with AVX512_BF16's conversion, 32 values an instruction:
 * rounding to nearest even as ra_bf16_of, but float32 subnormals (below
 * 2^-126, weights that add nothing a bf16 could hold) become zero. */
__attribute__((target("avx512f,avx512bf16")))
static void pack16_cvt(const float *x, int64_t rows, int64_t cols, int64_t ld,
                       uint16_t *out)
{
    for (int64_t r = 0; r < rows; r++) {
        const float *src = x + r * ld;
        uint16_t *dst = out + r * cols;
        int64_t c = 0;
        for (; c + 32 <= cols; c += 32) {
            const __m512bh v = _mm512_cvtne2ps_pbh(
                _mm512_loadu_ps(src + c + 16), _mm512_loadu_ps(src + c));
            _mm512_storeu_si512((void *)(dst + c), (__m512i)v);
        }
        for (; c < cols; c++)
            dst[c] = ra_bf16_of(src[c]);
    }
}
#endif

__attribute__((target_clones("avx512f", "avx2", "default")))
static void pack32(const float *x, int64_t rows, int64_t cols, int64_t ld,
                   float *out)
{
    for (int64_t r = 0; r < rows; r++)
        for (int64_t c = 0; c < cols; c++)
            out[r * cols + c] = ra_bf16_to_f32(ra_bf16_of(x[r * ld + c]));
}

/* The product on bf16 values held in float32, by sgemm. */
static void mm16_emulate(const ra_mm16 *e, mm16_scratch s, const ra_mm *x)
{
    ra_mm y = *x;
    if (x->a16)
        ra_bf16_unpack(x->a16, x->m * x->k, s.a32);
    else
        pack32(x->a, x->ta ? x->k : x->m, x->ta ? x->m : x->k, x->lda, s.a32);
    pack32(x->b, x->tb ? x->n : x->k, x->tb ? x->k : x->n, x->ldb, s.b32);
    y.a = s.a32;
    y.lda = x->ta ? x->m : x->k;
    y.b = s.b32;
    y.ldb = x->tb ? x->k : x->n;
    ra_sgemm(e->gemm, &y);
}

/* The declared shape x runs on, or -1. */
static int shape_of(const ra_mm16 *e, const ra_mm *x)
{
    for (int i = 0; i < e->count; i++) {
        const ra_mm_shape *s = &e->shape[i];
        if (s->ta == x->ta && s->tb == x->tb && s->m == x->m &&
            s->n == x->n && s->k == x->k && s->alpha == x->alpha &&
            s->beta == x->beta && s->ldc == x->ldc)
            return i;
    }
    return -1;
}

#ifdef RA_HAVE_ONEDNN
/* Runs primitive i on thread tid's packed operands into x->c. oneDNN's
 * OpenMP runtime would open a team for a call from a team of one: the
 * thread's limit is one for the call (as gemm.c does). */
static void mm16_prim(const ra_mm16 *e, int i, int tid, mm16_scratch s,
                      const ra_mm *x)
{
    dnnl_memory_t *m = e->args + ((size_t)tid * e->count + i) * 4;
    uint16_t *a = s.a16 + i * e->a_len;
    if (!x->a16 && (!x->a_kept || s.kept[i] != x->a))
        e->pack(x->a, x->ta ? x->k : x->m, x->ta ? x->m : x->k, x->lda, a);
    s.kept[i] = x->a16 ? NULL : x->a;
    dnnl_memory_set_data_handle(m[0], x->a16 ? (void *)x->a16 : (void *)a);
    uint16_t *b = s.b16 + i * e->b_len;
    if (!x->b16)
        e->pack(x->b, x->tb ? x->n : x->k, x->tb ? x->k : x->n, x->ldb, b);
    dnnl_memory_set_data_handle(m[1], x->b16 ? (void *)x->b16 : (void *)b);
    dnnl_memory_set_data_handle(m[2], x->c);
    const dnnl_exec_arg_t args[4] = {{DNNL_ARG_SRC, m[0]},
                                     {DNNL_ARG_WEIGHTS, m[1]},
                                     {DNNL_ARG_DST, m[2]},
                                     {DNNL_ARG_SCRATCHPAD, m[3]}};
    const int saved = omp_get_max_threads();
    if (saved != 1)
        omp_set_num_threads(1);
    dnnl_primitive_execute(e->prim[i], e->stream[tid], 4, args);
    dnnl_stream_wait(e->stream[tid]);
    if (saved != 1)
        omp_set_num_threads(saved);
}
#endif

int ra_mm16_native(const ra_mm16 *e)
{
#ifdef RA_HAVE_ONEDNN
    for (int i = 0; i < e->count; i++)
        if (e->prim[i])
            return 1;
#endif
    (void)e;
    return 0;
}

void ra_mm16_pack(const ra_mm16 *e, const float *x, int64_t rows,
                  int64_t cols, int64_t ld, uint16_t *out)
{
    e->pack(x, rows, cols, ld, out);
}

void ra_mm16_run(const ra_mm16 *e, int tid, const ra_mm *x)
{
    const mm16_scratch s = scratch_of(e, tid);
    const int i = shape_of(e, x);
#ifdef RA_HAVE_ONEDNN
    if (i >= 0 && e->prim[i]) {
        mm16_prim(e, i, tid, s, x);
        return;
    }
#endif
    (void)i;
    mm16_emulate(e, s, x);
}

#ifdef RA_HAVE_ONEDNN
/* The matmul of shape s: bf16 op(A) (m, k) and op(B) (k, n) packed as
 * stored, fp32 C (m, n) with row stride ldc; alpha an output scale, beta
 * 1 a sum post-op; the scratchpad the caller's (*pad bytes). */
static dnnl_status_t prim_make(dnnl_engine_t eng, const ra_mm_shape *s,
                               dnnl_primitive_t *prim, size_t *pad)
{
    dnnl_dims_t ad = {s->m, s->k}, bd = {s->k, s->n}, cd = {s->m, s->n};
    dnnl_dims_t as = {s->ta ? 1 : s->k, s->ta ? s->m : 1};
    dnnl_dims_t bs = {s->tb ? 1 : s->n, s->tb ? s->k : 1};
    dnnl_dims_t cs = {s->ldc, 1};
    dnnl_memory_desc_t a, b, c;
    dnnl_matmul_desc_t d;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t po = NULL;
    dnnl_primitive_desc_t pd = NULL;
    dnnl_status_t rc;
    if ((rc = dnnl_memory_desc_init_by_strides(&a, 2, ad, dnnl_bf16, as)) ||
        (rc = dnnl_memory_desc_init_by_strides(&b, 2, bd, dnnl_bf16, bs)) ||
        (rc = dnnl_memory_desc_init_by_strides(&c, 2, cd, dnnl_f32, cs)) ||
        (rc = dnnl_matmul_desc_init(&d, &a, &b, NULL, &c)) ||
        (rc = dnnl_primitive_attr_create(&attr)) ||
        (rc = dnnl_primitive_attr_set_scratchpad_mode(
             attr, dnnl_scratchpad_mode_user)) ||
        (rc = dnnl_primitive_attr_set_output_scales(attr, 1, 0, &s->alpha)) ||
        (s->beta != 0.0f &&
         ((rc = dnnl_post_ops_create(&po)) ||
          (rc = dnnl_post_ops_append_sum(po, 1.0f)) ||
          (rc = dnnl_primitive_attr_set_post_ops(attr, po)))) ||
        (rc = dnnl_primitive_desc_create(&pd, &d, attr, eng, NULL)))
        goto done;
    *pad = dnnl_memory_desc_get_size(
        dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
    rc = dnnl_primitive_create(prim, pd);
done:
    if (pd)
        dnnl_primitive_desc_destroy(pd);
    if (po)
        dnnl_post_ops_destroy(po);
    if (attr)
        dnnl_primitive_attr_destroy(attr);
    return rc;
}

/* Thread tid's memory objects of primitive i over its scratch. */
static dnnl_status_t args_make(ra_mm16 *e, int i, int tid)
{
    const mm16_scratch s = scratch_of(e, tid);
    dnnl_memory_t *m = e->args + ((size_t)tid * e->count + i) * 4;
    s.kept[i] = NULL;
    const_dnnl_primitive_desc_t pd;
    dnnl_status_t rc = dnnl_primitive_get_primitive_desc(e->prim[i], &pd);
    const dnnl_query_t q[4] = {dnnl_query_src_md, dnnl_query_weights_md,
                               dnnl_query_dst_md, dnnl_query_scratchpad_md};
    void *h[4] = {s.a16 + i * e->a_len, s.b16 + i * e->b_len,
                  DNNL_MEMORY_NONE, s.pad};
    for (int j = 0; j < 4 && rc == dnnl_success; j++)
        rc = dnnl_memory_create(&m[j], dnnl_primitive_desc_query_md(pd, q[j], 0),
                                e->eng, h[j]);
    return rc;
}

/* The engine, the primitives, then (the scratch sized) each thread's
 * stream and memory objects. */
static ra_status mm16_onednn(ra_mm16 *e, int pass)
{
    dnnl_status_t rc = dnnl_success;
    if (pass == 0) {
        rc = dnnl_engine_create(&e->eng, dnnl_cpu, 0);
        for (int i = 0; i < e->count && rc == dnnl_success; i++) {
            size_t pad = 0;
            rc = prim_make(e->eng, &e->shape[i], &e->prim[i], &pad);
            e->pad_len = pad > e->pad_len ? pad : e->pad_len;
        }
    } else {
        e->stream = calloc((size_t)e->threads, sizeof *e->stream);
        e->args = calloc((size_t)e->threads * (size_t)e->count * 4,
                         sizeof *e->args);
        if (!e->stream || !e->args)
            return ra_error_set(RA_ERR_NOMEM, "bf16: cannot allocate the "
                                              "threads' oneDNN objects");
        for (int t = 0; t < e->threads && rc == dnnl_success; t++) {
            rc = dnnl_stream_create(&e->stream[t], e->eng,
                                    dnnl_stream_default_flags);
            for (int i = 0; i < e->count && rc == dnnl_success; i++)
                rc = args_make(e, i, t);
        }
    }
    if (rc != dnnl_success)
        return ra_error_set(RA_ERR_ARG, "bf16: oneDNN cannot make the tile "
                            "products (status %d)", (int)rc);
    return RA_OK;
}
#endif

ra_status ra_mm16_create(ra_gemm gemm, const ra_mm_shape *shapes, int count,
                         int threads, ra_mm16 **out)
{
    *out = NULL;
    if (count > RA_MM16_MAX || threads < 1)
        return ra_error_set(RA_ERR_ARG, "bf16: %d product shapes or %d "
                            "threads", count, threads);
    ra_mm16 *e = calloc(1, sizeof *e);
    ra_status st = RA_OK;
    if (!e)
        return ra_error_set(RA_ERR_NOMEM, "bf16: out of memory");
    *e = (ra_mm16){.gemm = ra_gemm_resolve(gemm), .threads = threads,
                   .count = count, .pack = pack16};
#ifdef __x86_64__
    if (__builtin_cpu_supports("avx512bf16"))
        e->pack = pack16_cvt;
#endif
    for (int i = 0; i < count; i++) {
        const ra_mm_shape *s = &shapes[i];
        e->shape[i] = *s;
        e->a_len = s->m * s->k > e->a_len ? s->m * s->k : e->a_len;
        e->b_len = s->k * s->n > e->b_len ? s->k * s->n : e->b_len;
    }
#ifdef RA_HAVE_ONEDNN
    if (e->gemm == RA_GEMM_ONEDNN)
        st = mm16_onednn(e, 0);
#endif
    size_t sz[6];
    scratch_sizes(e, sz);
    e->per_thread = sz[0] + sz[1] + sz[2] + sz[3] + sz[4] + sz[5];
    if (st == RA_OK) {
        e->mem = (char *)ra_scratch_alloc(threads, e->per_thread / 4);
        if (!e->mem)
            st = ra_error_set(RA_ERR_NOMEM, "bf16: cannot allocate the "
                                            "tiles' scratch");
    }
#ifdef RA_HAVE_ONEDNN
    if (st == RA_OK && e->gemm == RA_GEMM_ONEDNN)
        st = mm16_onednn(e, 1);
#endif
    if (st != RA_OK) {
        ra_mm16_free(e);
        return st;
    }
    *out = e;
    return RA_OK;
}

void ra_mm16_free(ra_mm16 *e)
{
    if (!e)
        return;
#ifdef RA_HAVE_ONEDNN
    for (size_t j = 0; e->args && j < (size_t)e->threads * e->count * 4; j++)
        if (e->args[j])
            dnnl_memory_destroy(e->args[j]);
    for (int t = 0; e->stream && t < e->threads; t++)
        if (e->stream[t])
            dnnl_stream_destroy(e->stream[t]);
    for (int i = 0; i < e->count; i++)
        if (e->prim[i])
            dnnl_primitive_destroy(e->prim[i]);
    if (e->eng)
        dnnl_engine_destroy(e->eng);
    free(e->args);
    free(e->stream);
#endif
    free(e->mem);
    free(e);
}
