/* products.c: see products.h. */
#include <stdlib.h>

#include "internal.h"
#include "products.h"

struct ra_products {
    ra_gemm gemm;
    ra_mm16 *mm16;  /* bf16: the products' engine, else NULL */
    int count;
    ra_mm mm[RA_MM16_MAX];
    void *mem;      /* every operand, one allocation */
};

/* Floats of shape x's A, B and C. */
static int64_t shape_floats(const ra_mm_shape *x)
{
    return x->m * x->k + x->k * x->n + x->m * x->ldc;
}

/* Whether the forward kernel hands shape x its A in bf16 already: P V
 * (the product that adds to C), whose P the softmax rounds as it makes
 * it (kernel.c, ra_exp2_shift_sum_bf16). */
static int a_staged(const ra_mm_shape *x) { return x->beta != 0 && !x->ta; }

/* op(B) (rows x cols) of product mm packed in bf16 into h. */
static void stage_b(const ra_mm16 *e, const ra_mm *mm, uint16_t *h)
{
    ra_mm16_pack(e, mm->b, mm->tb ? mm->n : mm->k, mm->tb ? mm->k : mm->n,
                 mm->ldb, h);
}

/* Lays out product i's operands at f (floats) and b16 (staged op(B)). */
static ra_mm lay_out(const ra_mm_shape *x, float *f, uint16_t *b16)
{
    return (ra_mm){.ta = x->ta, .tb = x->tb, .m = x->m, .n = x->n,
                   .k = x->k, .alpha = x->alpha, .beta = x->beta, .a = f,
                   .lda = x->ta ? x->m : x->k, .b = f + x->m * x->k,
                   .ldb = x->tb ? x->k : x->n,
                   .c = f + x->m * x->k + x->k * x->n, .ldc = x->ldc,
                   .b16 = b16};
}

ra_status ra_products_open(ra_gemm gemm, int bf16, int stage,
                           const ra_mm_shape *shapes, int count,
                           ra_products **out)
{
    ra_products *x = calloc(1, sizeof *x);
    int64_t floats = 0, halves = 0;
    for (int i = 0; i < count; i++) {
        floats += shape_floats(&shapes[i]);
        halves += shapes[i].k * (shapes[i].n + shapes[i].m);
    }
    if (x)
        x->mem = malloc(sizeof(float) * (size_t)floats +
                        sizeof(uint16_t) * (size_t)halves);
    if (!x || !x->mem || count > RA_MM16_MAX) {
        ra_products_close(x);
        return ra_error_set(RA_ERR_NOMEM, "products yardstick: out of "
                                          "memory");
    }
    ra_random_normal(7, 0, 0, floats, x->mem);
    x->gemm = ra_gemm_resolve(gemm);
    x->count = count;
    ra_status st = bf16 ? ra_mm16_create(x->gemm, shapes, count, 1, &x->mm16)
                        : RA_OK;
    float *f = x->mem;
    uint16_t *h = (uint16_t *)(f + floats);
    for (int i = 0; i < count && st == RA_OK; i++) {
        const int staged = stage && x->mm16 && ra_mm16_native(x->mm16);
        x->mm[i] = lay_out(&shapes[i], f, staged ? h : NULL);
        if (staged)
            stage_b(x->mm16, &x->mm[i], h);
        h += shapes[i].k * shapes[i].n;
        if (staged && a_staged(&shapes[i])) {
            ra_mm16_pack(x->mm16, x->mm[i].a, shapes[i].m, shapes[i].k,
                         x->mm[i].lda, h);
            x->mm[i].a16 = h;
            h += shapes[i].m * shapes[i].k;
        }
        f += shape_floats(&shapes[i]);
    }
    if (st != RA_OK) {
        ra_products_close(x);
        return st;
    }
    *out = x;
    return RA_OK;
}

double ra_products_run(ra_products *x, int64_t tiles)
{
    double flops = 0.0;
    for (int64_t t = 0; t < tiles; t++)
        for (int i = 0; i < x->count; i++) {
            ra_mm mm = x->mm[i];
            mm.a_kept = i == 0 && t > 0;
            ra_mm_tile(x->gemm, x->mm16, 0, &mm);
            flops += 2.0 * (double)(mm.m * mm.n * mm.k);
        }
    return flops;
}

void ra_products_close(ra_products *x)
{
    if (!x)
        return;
    ra_mm16_free(x->mm16);
    free(x->mem);
    free(x);
}
