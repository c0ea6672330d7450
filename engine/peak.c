/* peak.c: see peak.h. The product is a oneDNN matmul primitive on plain
 * row-major operands, created once and run many times, so that its time is
 * the JIT kernel's alone (the same kernels the tile engine reaches). */
#include <omp.h>
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "peak.h"

#ifdef RA_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>

/* Random operand values seeded apart from every input stream. */
enum { PEAK_SEED = 7 };

struct ra_peak {
    int64_t n;
    int threads;
    dnnl_engine_t eng;
    dnnl_stream_t strm;
    dnnl_primitive_desc_t pd;
    dnnl_primitive_t prim;
    dnnl_memory_t mem[3]; /* A, B, C */
    void *buf;            /* A | B (fp32 or bf16), then C (fp32) */
};

/* x rounded to bf16 (nearest, ties to even), as its 16 high bits; the
 * operands are finite normals. */
static uint16_t peak_bf16(float x)
{
    uint32_t u;
    memcpy(&u, &x, sizeof u);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

/* A and B as seeded normals in their precision, C cleared. */
static void peak_fill(ra_peak *pk, int bf16, float *c)
{
    const int64_t nn = pk->n * pk->n;
    if (!bf16) {
        ra_random_normal(PEAK_SEED, 0, 0, 2 * nn, pk->buf);
    } else {
        float *tmp = c; /* C's room serves as scratch, nn floats at a time */
        uint16_t *ab = pk->buf;
        for (int half = 0; half < 2; half++) {
            ra_random_normal(PEAK_SEED, 0, (uint64_t)(half * nn), nn, tmp);
            for (int64_t i = 0; i < nn; i++)
                ab[half * nn + i] = peak_bf16(tmp[i]);
        }
    }
    memset(c, 0, sizeof(float) * (size_t)nn);
}

/* The primitive and its memories over pk->buf; 0, or -1 with *why. */
static int peak_build(ra_peak *pk, int bf16, const char **why)
{
    const dnnl_dims_t dims = {pk->n, pk->n};
    const dnnl_data_type_t in = bf16 ? dnnl_bf16 : dnnl_f32;
    const size_t elem = bf16 ? 2 : 4, nn = (size_t)(pk->n * pk->n);
    dnnl_memory_desc_t md[3];
    dnnl_matmul_desc_t mm;
    const size_t off[3] = {0, elem * nn, 2 * elem * nn}; /* A, B, C */
    int ok = dnnl_engine_create(&pk->eng, dnnl_cpu, 0) == dnnl_success &&
             dnnl_stream_create(&pk->strm, pk->eng,
                                dnnl_stream_default_flags) == dnnl_success;
    for (int i = 0; i < 3 && ok; i++)
        ok = dnnl_memory_desc_init_by_tag(&md[i], 2, dims, i < 2 ? in
                                          : dnnl_f32, dnnl_ab) == dnnl_success;
    ok = ok && dnnl_matmul_desc_init(&mm, &md[0], &md[1], NULL, &md[2]) ==
                   dnnl_success;
    if (ok && dnnl_primitive_desc_create(&pk->pd, &mm, NULL, pk->eng, NULL) !=
                  dnnl_success) {
        *why = bf16 ? "oneDNN has no bf16 matmul for this CPU"
                    : "oneDNN refused the fp32 matmul";
        return -1;
    }
    ok = ok && dnnl_primitive_create(&pk->prim, pk->pd) == dnnl_success;
    for (int i = 0; i < 3 && ok; i++)
        ok = dnnl_memory_create(&pk->mem[i], &md[i], pk->eng,
                                (char *)pk->buf + off[i]) == dnnl_success;
    if (!ok)
        *why = "oneDNN could not set up the matmul";
    return ok ? 0 : -1;
}

ra_peak *ra_peak_open(int64_t n, int bf16, int threads, const char **why)
{
    const size_t nn = (size_t)(n * n), elem = bf16 ? 2 : 4;
    ra_peak *pk = calloc(1, sizeof *pk);
    if (pk)
        pk->buf = malloc(2 * elem * nn + 4 * nn);
    *why = "out of memory";
    if (!pk || !pk->buf)
        goto fail;
    pk->n = n;
    pk->threads = threads > 0 ? threads : 1;
    peak_fill(pk, bf16, (float *)((char *)pk->buf + 2 * elem * nn));
    if (peak_build(pk, bf16, why) != 0)
        goto fail;
    return pk;
fail:
    ra_peak_close(pk);
    return NULL;
}

int ra_peak_run(ra_peak *pk)
{
    const dnnl_exec_arg_t args[3] = {{DNNL_ARG_SRC, pk->mem[0]},
                                     {DNNL_ARG_WEIGHTS, pk->mem[1]},
                                     {DNNL_ARG_DST, pk->mem[2]}};
    const int saved = omp_get_max_threads();
    omp_set_num_threads(pk->threads);
    const int ok = dnnl_primitive_execute(pk->prim, pk->strm, 3, args) ==
                       dnnl_success &&
                   dnnl_stream_wait(pk->strm) == dnnl_success;
    omp_set_num_threads(saved);
    return ok ? 0 : -1;
}

const char *ra_peak_impl(const ra_peak *pk)
{
    const char *impl = NULL;
    if (dnnl_primitive_desc_query(pk->pd, dnnl_query_impl_info_str, 0,
                                  &impl) != dnnl_success || !impl)
        return "unknown";
    return impl;
}

void ra_peak_close(ra_peak *pk)
{
    if (!pk)
        return;
    for (int i = 0; i < 3; i++)
        if (pk->mem[i])
            dnnl_memory_destroy(pk->mem[i]);
    if (pk->prim)
        dnnl_primitive_destroy(pk->prim);
    if (pk->pd)
        dnnl_primitive_desc_destroy(pk->pd);
    if (pk->strm)
        dnnl_stream_destroy(pk->strm);
    if (pk->eng)
        dnnl_engine_destroy(pk->eng);
    free(pk->buf);
    free(pk);
}

#else /* no oneDNN in this build: no yardstick, never a made-up one */

struct ra_peak {
    int64_t n;
};

ra_peak *ra_peak_open(int64_t n, int bf16, int threads, const char **why)
{
    (void)n, (void)bf16, (void)threads;
    *why = "this build has no oneDNN";
    return NULL;
}

int ra_peak_run(ra_peak *pk)
{
    (void)pk;
    return -1;
}

const char *ra_peak_impl(const ra_peak *pk)
{
    (void)pk;
    return "none";
}

void ra_peak_close(ra_peak *pk) { (void)pk; }

#endif

double ra_peak_flops(const ra_peak *pk)
{
    return 2.0 * (double)pk->n * (double)pk->n * (double)pk->n;
}
