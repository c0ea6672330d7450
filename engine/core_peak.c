/* core_peak.c: see core_peak.h. Each loop keeps its accumulators in
 * registers (twelve independent chains, enough to cover the FMA latency on
 * two ports; four AMX accumulator tiles) and reads no memory in its body,
 * so it runs at the core's instruction throughput. */
#include <immintrin.h>
#include <stdint.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <sys/syscall.h>

#include "core_peak.h"

/* Instructions per loop round (every chain once) and rounds per timing. */
enum { CHAINS = 12, ROUNDS = 1 << 14 };

static const char *const loop_names[RA_LOOP_COUNT] = {
    "amx-bf16 tdpbf16ps", "avx512-bf16 vdpbf16ps", "avx512 fma (fp32)",
    "avx2 fma (fp32)"};

const char *ra_loop_name(ra_loop l)
{
    return l < RA_LOOP_COUNT ? loop_names[l] : "none";
}

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The FMA chains: acc = acc * x + y stays bounded (it tends to
 * y / (1 - x)). Returns the FLOPs. */
__attribute__((target("avx512f")))
static double loop_fma512(int64_t rounds, float *sink)
{
    __m512 a[CHAINS];
    const __m512 x = _mm512_set1_ps(0.999f), y = _mm512_set1_ps(1e-3f);
    for (int c = 0; c < CHAINS; c++)
        a[c] = _mm512_set1_ps((float)c);
    for (int64_t r = 0; r < rounds; r++)
        for (int c = 0; c < CHAINS; c++)
            a[c] = _mm512_fmadd_ps(a[c], x, y);
    for (int c = 1; c < CHAINS; c++)
        a[0] = _mm512_add_ps(a[0], a[c]);
    *sink = _mm512_reduce_add_ps(a[0]);
    return (double)rounds * CHAINS * 16 * 2;
}

__attribute__((target("avx2,fma")))
static double loop_fma256(int64_t rounds, float *sink)
{
    __m256 a[CHAINS];
    const __m256 x = _mm256_set1_ps(0.999f), y = _mm256_set1_ps(1e-3f);
    for (int c = 0; c < CHAINS; c++)
        a[c] = _mm256_set1_ps((float)c);
    for (int64_t r = 0; r < rounds; r++)
        for (int c = 0; c < CHAINS; c++)
            a[c] = _mm256_fmadd_ps(a[c], x, y);
    for (int c = 1; c < CHAINS; c++)
        a[0] = _mm256_add_ps(a[0], a[c]);
    float v[8];
    _mm256_storeu_ps(v, a[0]);
    *sink = v[0];
    return (double)rounds * CHAINS * 8 * 2;
}

/* vdpbf16ps: 16 lanes, each += two bf16 products. */
__attribute__((target("avx512f,avx512bf16")))
static double loop_dpbf16(int64_t rounds, float *sink)
{
    __m512 a[CHAINS];
    const __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80); /* 1.0 */
    const __m512bh y = (__m512bh)_mm512_set1_epi16(0x3a83); /* ~1e-3 */
    for (int c = 0; c < CHAINS; c++)
        a[c] = _mm512_set1_ps((float)c);
    for (int64_t r = 0; r < rounds; r++)
        for (int c = 0; c < CHAINS; c++)
            a[c] = _mm512_dpbf16_ps(a[c], x, y);
    for (int c = 1; c < CHAINS; c++)
        a[0] = _mm512_add_ps(a[0], a[c]);
    *sink = _mm512_reduce_add_ps(a[0]);
    return (double)rounds * CHAINS * 16 * 2 * 2;
}

/* AMX: tiles 0-3 accumulate (16 x 16 fp32) the products of A tiles 4, 5
 * (16 x 32 bf16) and B tiles 6, 7 (16 x 32 bf16 pairs). */
typedef struct {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_config;

__attribute__((target("amx-tile,amx-bf16")))
static double loop_amx(int64_t rounds, float *sink)
{
    amx_config cfg;
    memset(&cfg, 0, sizeof cfg);
    cfg.palette = 1;
    for (int t = 0; t < 8; t++) {
        cfg.colsb[t] = 64;
        cfg.rows[t] = 16;
    }
    static uint16_t ones[16 * 32];
    static float out[16 * 16];
    for (int i = 0; i < 16 * 32; i++)
        ones[i] = 0x3a83; /* ~1e-3 */
    _tile_loadconfig(&cfg);
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    _tile_loadd(4, ones, 64);
    _tile_loadd(5, ones, 64);
    _tile_loadd(6, ones, 64);
    _tile_loadd(7, ones, 64);
    for (int64_t r = 0; r < rounds; r++) {
        _tile_dpbf16ps(0, 4, 6);
        _tile_dpbf16ps(1, 4, 7);
        _tile_dpbf16ps(2, 5, 6);
        _tile_dpbf16ps(3, 5, 7);
    }
    _tile_stored(0, out, 64);
    _tile_release();
    *sink = out[0];
    return (double)rounds * 4 * 16 * 16 * 32 * 2;
}

/* Linux keeps AMX's tile data off until a process asks for it. */
static int amx_permitted(void)
{
#if defined(__linux__) && defined(SYS_arch_prctl)
    enum { ARCH_REQ_XCOMP_PERM = 0x1023, XFEATURE_XTILEDATA = 18 };
    return syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM,
                   XFEATURE_XTILEDATA) == 0;
#else
    return 0;
#endif
}

int ra_loop_available(ra_loop l, const char **why)
{
    static const char *const lack[RA_LOOP_COUNT] = {
        "this core has no AMX-BF16", "this core has no AVX512-BF16",
        "this core has no AVX-512", "this core has no AVX2/FMA"};
    int ok = 0;
    __builtin_cpu_init();
    switch (l) {
    case RA_LOOP_AMX_BF16:
        ok = __builtin_cpu_supports("amx-bf16") &&
             __builtin_cpu_supports("amx-tile");
        if (ok && !amx_permitted()) {
            if (why)
                *why = "the kernel refused AMX tile data to this process";
            return 0;
        }
        break;
    case RA_LOOP_AVX512_BF16:
        ok = __builtin_cpu_supports("avx512bf16");
        break;
    case RA_LOOP_AVX512_FMA:
        ok = __builtin_cpu_supports("avx512f");
        break;
    case RA_LOOP_AVX2_FMA:
        ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
        break;
    default:
        break;
    }
    if (!ok && why)
        *why = l < RA_LOOP_COUNT ? lack[l] : "no such loop";
    return ok;
}

double ra_loop_rate(ra_loop l, double seconds)
{
    static double (*const run[RA_LOOP_COUNT])(int64_t, float *) = {
        loop_amx, loop_dpbf16, loop_fma512, loop_fma256};
    if (!ra_loop_available(l, NULL))
        return 0.0;
    volatile float keep = 0.0f;
    float sink = 0.0f;
    double best = 0.0, spent = 0.0;
    int64_t rounds = ROUNDS;
    for (int k = 0; k < 64 && (spent < seconds || k < 3); k++) {
        const double t0 = now();
        const double flops = run[l](rounds, &sink);
        const double t = now() - t0;
        keep += sink;
        spent += t;
        if (t > 0 && flops / t > best)
            best = flops / t;
        if (t < 1e-3) /* too short to time: longer rounds */
            rounds *= 4;
    }
    (void)keep;
    return best * 1e-9;
}

ra_loop ra_loop_for(int bf16, const char **why)
{
    const ra_loop order[2][2] = {{RA_LOOP_AVX512_FMA, RA_LOOP_AVX2_FMA},
                                 {RA_LOOP_AMX_BF16, RA_LOOP_AVX512_BF16}};
    for (int i = 0; i < 2; i++)
        if (ra_loop_available(order[bf16 != 0][i], why))
            return order[bf16 != 0][i];
    return RA_LOOP_COUNT;
}
