/* blas.c: the library's use of OpenBLAS's process-wide thread count. The
 * library runs its BLAS calls at the thread count of its parameters and
 * gives the caller's setting back on the way out. */
#include "internal.h"

int openblas_get_num_threads(void);
void openblas_set_num_threads(int num_threads);

int ra_blas_enter(int threads)
{
    const int saved = openblas_get_num_threads();
    openblas_set_num_threads(threads > 0 ? threads : 1);
    return saved;
}

void ra_blas_leave(int saved) { openblas_set_num_threads(saved); }
