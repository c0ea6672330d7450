/* gemm.c: the kernels' tile products on one of two engines (ra_gemm).
 *
 * OpenBLAS is always there (the portable path and the fp64 reference's
 * dgemm). oneDNN, when the build has it (RA_HAVE_ONEDNN), computes the
 * same row-major products with its JIT-compiled kernels for the core's own
 * instruction set (AVX-512 here, where OpenBLAS runs its AVX2 kernels), at
 * about twice OpenBLAS's rate on the kernels' tile shapes
 * (docs/PERFORMANCE.md, "The oneDNN tile engine"). Both are called from
 * inside the kernels' OpenMP work items, one product per thread: each must
 * run on the calling thread alone. */
#include <omp.h>

#include "gemm.h"
#include "internal.h"

#ifdef RA_HAVE_ONEDNN
#include <oneapi/dnnl/dnnl.h>
#endif
#include <cblas.h>

static const char *const gemm_names[] = {"auto", "openblas", "onednn"};
/* ra_gemm_name, ra_gemm_parse */
RA_NAMED_ENUM(gemm, ra_gemm, "gemm engine", gemm_names)

int ra_gemm_available(ra_gemm gemm)
{
#ifdef RA_HAVE_ONEDNN
    return gemm >= RA_GEMM_AUTO && gemm <= RA_GEMM_ONEDNN;
#else
    return gemm == RA_GEMM_AUTO || gemm == RA_GEMM_OPENBLAS;
#endif
}

ra_gemm ra_gemm_resolve(ra_gemm gemm)
{
    if (gemm != RA_GEMM_AUTO)
        return gemm;
#ifdef RA_HAVE_ONEDNN
    return RA_GEMM_ONEDNN;
#else
    return RA_GEMM_OPENBLAS;
#endif
}

#ifdef RA_HAVE_ONEDNN
/* oneDNN's OpenMP runtime would open a team of omp_get_max_threads() for a
 * product called from a team of one (not an active parallel region): the
 * calling thread's limit is set to one for the call and given back. */
static void onednn_sgemm(const ra_mm *x)
{
    const int saved = omp_get_max_threads();
    if (saved != 1)
        omp_set_num_threads(1);
    dnnl_sgemm(x->ta ? 'T' : 'N', x->tb ? 'T' : 'N', x->m, x->n, x->k,
               x->alpha, x->a, x->lda, x->b, x->ldb, x->beta, x->c, x->ldc);
    if (saved != 1)
        omp_set_num_threads(saved);
}
#endif

void ra_sgemm(ra_gemm gemm, const ra_mm *x)
{
#ifdef RA_HAVE_ONEDNN
    if (ra_gemm_resolve(gemm) == RA_GEMM_ONEDNN) {
        onednn_sgemm(x);
        return;
    }
#endif
    cblas_sgemm(CblasRowMajor, x->ta ? CblasTrans : CblasNoTrans,
                x->tb ? CblasTrans : CblasNoTrans, (int)x->m, (int)x->n,
                (int)x->k, x->alpha, x->a, (int)x->lda, x->b, (int)x->ldb,
                x->beta, x->c, (int)x->ldc);
}
