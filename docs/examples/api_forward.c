/* api_forward.c: causal ring attention from an MPI program of your own.
 * Each rank fills the tokens the layout gives it; the first query sees only
 * the first key, so its output must be that key's value.
 *   mpicc api_forward.c $(pkg-config --cflags --libs ringattn) -lm
 *   mpirun -np 2 ./a.out */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <ringattn.h>

/* Element c of token t of tensor `which`: the same whatever the layout. */
static float value(int64_t t, int64_t c, int which)
{
    return sinf(0.37f * (float)t + 0.11f * (float)c + (float)which);
}

/* rows (B = 1, sl->count, width) with the tokens ra_slice_pos(sl, i) */
static float *fill(const ra_slice *sl, int64_t width, int which)
{
    float *x = malloc(sizeof(float) * (size_t)(sl->count * width + 1));
    for (int64_t i = 0; x && i < sl->count; i++)
        for (int64_t c = 0; c < width; c++)
            x[i * width + c] = value(ra_slice_pos(sl, i), c, which);
    return x;
}

int main(int argc, char **argv)
{
    int rank, nranks, provided, bad = 0;
    MPI_Init_thread(&argc, &argv, MPI_THREAD_FUNNELED, &provided);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);

    ra_shape s = {.B = 1, .N = 1000, .M = 1000, .H = 8, .G = 2, .D = 64,
                  .Dv = 64};
    ra_numerics num;                     /* what is computed */
    ra_numerics_default(&num);           /* scale 1/sqrt(D), no mask, ... */
    num.causal = 1;
    ra_exec exec;                        /* how it runs */
    ra_exec_default(&exec);              /* ring, auto layout, 1 thread, ... */
    ra_layout lay = ra_exec_layout(&num, &exec, 0);   /* 0: no segment masks */
    ra_slice qs = ra_layout_slice(lay, &num, s.N, rank, nranks); /* mine */
    ra_slice ks = ra_layout_slice(lay, &num, s.M, rank, nranks);
    float *q = fill(&qs, s.H * s.D, 0), *k = fill(&ks, s.G * s.D, 1);
    float *v = fill(&ks, s.G * s.Dv, 2);
    float *o = malloc(sizeof(float) * (size_t)(qs.count * s.H * s.Dv + 1));
    float *lse = malloc(sizeof(float) * (size_t)(s.H * qs.count + 1));
    ra_status st = q && k && v && o && lse ? RA_OK : RA_ERR_NOMEM;
    if (st == RA_OK)       /* collective: every rank calls it */
        st = ra_forward(MPI_COMM_WORLD, &s, &num, &exec, NULL,
                        &(ra_qkv){q, k, v}, &(ra_out){o, lse, NULL}, NULL);
    if (st != RA_OK)
        fprintf(stderr, "rank %d: %s\n", rank, ra_error_message());
    else if (rank == 0)    /* rank 0 holds token 0 under every layout */
        for (int64_t h = 0; h < s.H; h++)
            for (int64_t d = 0; d < s.Dv; d++)
                bad |= fabsf(o[h * s.Dv + d] -
                             v[h / (s.H / s.G) * s.Dv + d]) > 1e-5f;
    if (rank == 0 && st == RA_OK)
        printf("query 0 output %s its only key's value\n",
               bad ? "DIFFERS from" : "equals");
    free(q); free(k); free(v); free(o); free(lse);
    MPI_Finalize();
    return st != RA_OK || bad;
}
