/*
 * ggml_fa.c: times ggml's CPU flash attention (ggml_flash_attn_ext) on the
 * shapes of `ringattn bench`, for bench/ggml-compare.sh. Not part of the
 * product build: the script compiles it against the prebuilt ggml shared
 * libraries of an npm package (no ggml header ships with them, so the few
 * declarations used are written out below).
 *
 *   ggml_fa check [--threads T] [--cpu-lib NAME]
 *       N = 257, H = 2, D = 64 and 128, causal and not: ggml's output
 *       against an fp64 reference from the same f16-rounded K/V and f32 Q;
 *       exit 1 if a relative Frobenius error exceeds 1e-2.
 *   ggml_fa bench --seq N --heads H --dim D [--causal] [--threads T]
 *                 [--reps R] [--json FILE] [--cpu-lib NAME]
 *       self-attention (M = N), batch 1: one warm-up, then R timed
 *       forwards (wall clock around the graph compute only); prints the
 *       median seconds and useful GFLOP/s, 2(D+Dv) FLOPs per visible
 *       query-key pair per head (causal: N(N+1)/2 pairs), as ringattn
 *       counts them. Rows 0, N/2 and N-1 of each head are then checked
 *       against fp64 too (exit 1 past 1e-2).
 *
 * Q is F32 and K, V are F16 (Q in F32 is what selects the CPU backend's
 * tiled path for N >= its tile rows); a causal mask is an F16 tensor
 * [n_kv, n_q] of 0 and -INFINITY (this release asserts no padding of its
 * rows: GGML_KQ_MASK_PAD is gone); no mask without --causal; scale
 * 1/sqrt(D). The CPU variant library is chosen as ggml's own loader does:
 * every libggml-cpu-*.so beside libggml-base.so is scored with its
 * ggml_backend_score() and the highest score wins (--cpu-lib NAME, e.g.
 * zen4, forces one).
 */
#define _GNU_SOURCE
#include <dirent.h>
#include <dlfcn.h>
#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

/* ---- the declarations used, as in ggml.h / ggml-cpu.h of this release ---- */
struct ggml_context;
struct ggml_tensor;
struct ggml_cgraph;
typedef uint16_t ggml_fp16_t;
enum ggml_type { GGML_TYPE_F32 = 0, GGML_TYPE_F16 = 1 };
struct ggml_init_params {
  size_t mem_size;
  void *mem_buffer;
  bool no_alloc;
};
struct ggml_context *ggml_init(struct ggml_init_params params);
void ggml_free(struct ggml_context *ctx);
struct ggml_tensor *ggml_new_tensor_4d(struct ggml_context *ctx,
                                       enum ggml_type type, int64_t ne0,
                                       int64_t ne1, int64_t ne2, int64_t ne3);
void *ggml_get_data(const struct ggml_tensor *tensor);
size_t ggml_nbytes(const struct ggml_tensor *tensor);
size_t ggml_tensor_overhead(void);
size_t ggml_graph_overhead(void);
struct ggml_tensor *ggml_flash_attn_ext(struct ggml_context *ctx,
                                        struct ggml_tensor *q,
                                        struct ggml_tensor *k,
                                        struct ggml_tensor *v,
                                        struct ggml_tensor *mask, float scale,
                                        float max_bias, float logit_softcap);
struct ggml_cgraph *ggml_new_graph(struct ggml_context *ctx);
void ggml_build_forward_expand(struct ggml_cgraph *cgraph,
                               struct ggml_tensor *tensor);
void ggml_fp32_to_fp16_row(const float *x, ggml_fp16_t *y, int64_t n);
void ggml_fp16_to_fp32_row(const ggml_fp16_t *x, float *y, int64_t n);
const char *ggml_version(void);
const char *ggml_commit(void);
/* from the CPU variant library, looked up with dlsym */
typedef int (*graph_compute_fn)(struct ggml_context *ctx,
                                struct ggml_cgraph *cgraph, int n_threads);
typedef void (*cpu_init_fn)(void);
typedef int (*score_fn)(void);

#define FP16_NEG_INF 0xFC00u

static graph_compute_fn graph_compute;
static char variant[256];
static int variant_score;

static void die(const char *msg) {
  fprintf(stderr, "ggml_fa: %s\n", msg);
  exit(2);
}

/* the folder of libggml-base.so, as loaded */
static void base_dir(char *dir, size_t size) {
  Dl_info info;
  if (!dladdr((void *)ggml_init, &info) || !info.dli_fname) {
    die("cannot locate libggml-base.so (dladdr)");
  }
  snprintf(dir, size, "%s", info.dli_fname);
  char *slash = strrchr(dir, '/');
  if (slash) {
    *slash = '\0';
  } else {
    snprintf(dir, size, ".");
  }
}

static int cmp_str(const void *a, const void *b) {
  return strcmp(*(char *const *)a, *(char *const *)b);
}

/* dlopen the CPU variant: NAME if given, else the best-scoring one */
static void load_cpu(const char *want) {
  char dir[4096];
  base_dir(dir, sizeof dir);
  char *names[64];
  int n = 0;
  DIR *d = opendir(dir);
  if (!d) {
    die("cannot list the ggml library folder");
  }
  struct dirent *e;
  const char *prefix = "libggml-cpu-";
  while ((e = readdir(d)) != NULL && n < 64) {
    size_t len = strlen(e->d_name);
    if (strncmp(e->d_name, prefix, strlen(prefix)) == 0 && len > 3 &&
        strcmp(e->d_name + len - 3, ".so") == 0) {
      names[n++] = strdup(e->d_name);
    }
  }
  closedir(d);
  if (n == 0) {
    die("no libggml-cpu-*.so beside libggml-base.so");
  }
  qsort(names, (size_t)n, sizeof names[0], cmp_str);
  void *best = NULL;
  for (int i = 0; i < n; i++) {
    char name[256];
    snprintf(name, sizeof name, "%.*s", (int)(strlen(names[i]) - 3 -
                                              strlen(prefix)),
             names[i] + strlen(prefix));
    if (want && strcmp(want, name) != 0) {
      continue;
    }
    char path[8192];
    snprintf(path, sizeof path, "%s/%s", dir, names[i]);
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
      fprintf(stderr, "ggml_fa: %s: %s\n", names[i], dlerror());
      continue;
    }
    score_fn score = (score_fn)dlsym(h, "ggml_backend_score");
    int s = score ? score() : 0;
    fprintf(stderr, "ggml_fa: cpu variant %-16s score %d\n", name, s);
    if (s > variant_score) {
      if (best) {
        dlclose(best);
      }
      best = h;
      variant_score = s;
      snprintf(variant, sizeof variant, "%s", name);
    } else {
      dlclose(h);
    }
  }
  for (int i = 0; i < n; i++) {
    free(names[i]);
  }
  if (!best) {
    die(want ? "the --cpu-lib variant is missing or unsupported here"
             : "no CPU variant is supported on this CPU");
  }
  cpu_init_fn init = (cpu_init_fn)dlsym(best, "ggml_cpu_init");
  graph_compute = (graph_compute_fn)dlsym(best, "ggml_graph_compute_with_ctx");
  if (!init || !graph_compute) {
    die("the CPU variant lacks ggml_cpu_init or ggml_graph_compute_with_ctx");
  }
  init();
  fprintf(stderr, "ggml_fa: using cpu variant %s (score %d), ggml %s (%s)\n",
          variant, variant_score, ggml_version(), ggml_commit());
}

/* ---- inputs ---- */
static uint64_t rng_state = 0x9E3779B97F4A7C15ull;
static double uniform01(void) { /* xorshift64*, (0, 1) */
  rng_state ^= rng_state >> 12;
  rng_state ^= rng_state << 25;
  rng_state ^= rng_state >> 27;
  uint64_t r = rng_state * 0x2545F4914F6CDD1Dull;
  return ((double)(r >> 11) + 0.5) / 9007199254740992.0;
}
static float normal(void) {
  return (float)(sqrt(-2.0 * log(uniform01())) * cos(6.283185307179586 *
                                                     uniform01()));
}

struct problem {
  int64_t n, h, d;
  bool causal;
  struct ggml_context *ctx;
  struct ggml_tensor *q, *k, *v, *mask, *out;
  struct ggml_cgraph *graph;
};

/* q: [D, N, H, 1] f32; k, v: [D, N, H, 1] f16; mask: [N, N, 1, 1] f16;
 * out: [D, H, N, 1] f32 (heads and rows swapped, "permuted") */
static void build(struct problem *p) {
  const int64_t n = p->n, h = p->h, d = p->d;
  size_t data = (size_t)(d * n * h) * (4 + 2 + 2 + 4) +
                (p->causal ? (size_t)(n * n) * 2 : 0);
  struct ggml_init_params ip = {
      /* tensors, graph, and each compute's work buffer (taken from the
       * context by ggml_graph_compute_with_ctx) */
      .mem_size = data + 16 * ggml_tensor_overhead() + ggml_graph_overhead() +
                  ((size_t)256 << 20),
      .mem_buffer = NULL,
      .no_alloc = false,
  };
  p->ctx = ggml_init(ip);
  if (!p->ctx) {
    die("ggml_init failed");
  }
  p->q = ggml_new_tensor_4d(p->ctx, GGML_TYPE_F32, d, n, h, 1);
  p->k = ggml_new_tensor_4d(p->ctx, GGML_TYPE_F16, d, n, h, 1);
  p->v = ggml_new_tensor_4d(p->ctx, GGML_TYPE_F16, d, n, h, 1);
  p->mask = NULL;
  if (p->causal) {
    p->mask = ggml_new_tensor_4d(p->ctx, GGML_TYPE_F16, n, n, 1, 1);
    ggml_fp16_t *m = ggml_get_data(p->mask);
    for (int64_t i = 0; i < n; i++) {
      for (int64_t j = 0; j < n; j++) {
        m[i * n + j] = j <= i ? 0 : (ggml_fp16_t)FP16_NEG_INF;
      }
    }
  }
  float *q = ggml_get_data(p->q);
  for (int64_t i = 0; i < d * n * h; i++) {
    q[i] = normal();
  }
  float *tmp = malloc((size_t)(d * n * h) * sizeof(float));
  if (!tmp) {
    die("out of memory");
  }
  struct ggml_tensor *kv[2] = {p->k, p->v};
  for (int t = 0; t < 2; t++) {
    for (int64_t i = 0; i < d * n * h; i++) {
      tmp[i] = normal();
    }
    ggml_fp32_to_fp16_row(tmp, ggml_get_data(kv[t]), d * n * h);
  }
  free(tmp);
  p->out = ggml_flash_attn_ext(p->ctx, p->q, p->k, p->v, p->mask,
                               (float)(1.0 / sqrt((double)d)), 0.0f, 0.0f);
  p->graph = ggml_new_graph(p->ctx);
  ggml_build_forward_expand(p->graph, p->out);
  if (ggml_nbytes(p->out) != (size_t)(d * h * n) * sizeof(float)) {
    die("unexpected output size of ggml_flash_attn_ext");
  }
}

static double now(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}
static double cpu_seconds(void) {
  struct rusage ru;
  getrusage(RUSAGE_SELF, &ru);
  return (double)ru.ru_utime.tv_sec + 1e-6 * (double)ru.ru_utime.tv_usec +
         (double)ru.ru_stime.tv_sec + 1e-6 * (double)ru.ru_stime.tv_usec;
}

static void compute(struct problem *p, int threads) {
  int status = graph_compute(p->ctx, p->graph, threads);
  if (status != 0) {
    fprintf(stderr, "ggml_fa: graph compute returned status %d\n", status);
    exit(1);
  }
}

/* relative Frobenius error of ggml's output against fp64, over every
 * query row (every = 1), or rows 0, N/2 and N-1 of each head (every = 0) */
static double check_error(const struct problem *p, bool every) {
  const int64_t n = p->n, h = p->h, d = p->d;
  const float *q = ggml_get_data(p->q);
  const float *out = ggml_get_data(p->out);
  float *k = malloc((size_t)(d * n * h) * sizeof(float));
  float *v = malloc((size_t)(d * n * h) * sizeof(float));
  double *s = malloc((size_t)n * sizeof(double));
  double *acc = malloc((size_t)d * sizeof(double));
  if (!k || !v || !s || !acc) {
    die("out of memory");
  }
  ggml_fp16_to_fp32_row(ggml_get_data(p->k), k, d * n * h);
  ggml_fp16_to_fp32_row(ggml_get_data(p->v), v, d * n * h);
  const double scale = 1.0 / sqrt((double)d);
  double num = 0, den = 0;
  const int64_t some[3] = {0, n / 2, n - 1};
  for (int64_t hh = 0; hh < h; hh++) {
    for (int64_t r = 0; r < (every ? n : 3); r++) {
      const int64_t i = every ? r : some[r];
      const float *qi = q + (hh * n + i) * d;
      int64_t visible = p->causal ? i + 1 : n;
      double mx = -INFINITY;
      for (int64_t j = 0; j < visible; j++) {
        const float *kj = k + (hh * n + j) * d;
        double dot = 0;
        for (int64_t c = 0; c < d; c++) {
          dot += (double)qi[c] * (double)kj[c];
        }
        s[j] = scale * dot;
        mx = s[j] > mx ? s[j] : mx;
      }
      double sum = 0;
      memset(acc, 0, (size_t)d * sizeof(double));
      for (int64_t j = 0; j < visible; j++) {
        double w = exp(s[j] - mx);
        sum += w;
        const float *vj = v + (hh * n + j) * d;
        for (int64_t c = 0; c < d; c++) {
          acc[c] += w * (double)vj[c];
        }
      }
      /* ggml's result is [D, H, N]: row i, head hh at (i*H + hh)*D */
      const float *oi = out + (i * h + hh) * d;
      for (int64_t c = 0; c < d; c++) {
        double ref = acc[c] / sum;
        num += (oi[c] - ref) * (oi[c] - ref);
        den += ref * ref;
      }
    }
  }
  free(k);
  free(v);
  free(s);
  free(acc);
  return sqrt(num / den);
}

static int cmp_double(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static long parse_long(const char *opt, const char *s, long lo, long hi) {
  char *end;
  errno = 0;
  long x = strtol(s, &end, 10);
  if (errno || *s == '\0' || *end != '\0' || x < lo || x > hi) {
    fprintf(stderr, "ggml_fa: %s: bad value '%s'\n", opt, s);
    exit(2);
  }
  return x;
}

static void usage(FILE *f) {
  fprintf(f,
          "usage: ggml_fa check [--threads T] [--cpu-lib NAME]\n"
          "       ggml_fa bench --seq N --heads H --dim D [--causal] "
          "[--threads T] [--reps R]\n"
          "                     [--json FILE] [--cpu-lib NAME]\n");
}

int main(int argc, char **argv) {
  if (argc < 2) {
    usage(stderr);
    return 2;
  }
  if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
    usage(stdout);
    return 0;
  }
  bool check = !strcmp(argv[1], "check");
  if (!check && strcmp(argv[1], "bench") != 0) {
    fprintf(stderr, "ggml_fa: unknown mode '%s' (check or bench)\n", argv[1]);
    return 2;
  }
  long n = 0, h = 0, d = 0, threads = 2, reps = 3;
  bool causal = false;
  const char *json = NULL, *cpu_lib = NULL;
  for (int i = 2; i < argc; i++) {
    const char *a = argv[i];
    bool has = i + 1 < argc;
    if (!strcmp(a, "--causal")) {
      causal = true;
    } else if (!strcmp(a, "--help")) {
      usage(stdout);
      return 0;
    } else if (!has) {
      fprintf(stderr, "ggml_fa: unknown option or missing value: %s\n", a);
      return 2;
    } else if (!strcmp(a, "--seq")) {
      n = parse_long(a, argv[++i], 1, 1L << 20);
    } else if (!strcmp(a, "--heads")) {
      h = parse_long(a, argv[++i], 1, 1024);
    } else if (!strcmp(a, "--dim")) {
      d = parse_long(a, argv[++i], 1, 1024);
    } else if (!strcmp(a, "--threads")) {
      threads = parse_long(a, argv[++i], 1, 512);
    } else if (!strcmp(a, "--reps")) {
      reps = parse_long(a, argv[++i], 1, 1000);
    } else if (!strcmp(a, "--json")) {
      json = argv[++i];
    } else if (!strcmp(a, "--cpu-lib")) {
      cpu_lib = argv[++i];
    } else {
      fprintf(stderr, "ggml_fa: unknown option: %s\n", a);
      return 2;
    }
  }
  if (!check && (n == 0 || h == 0 || d == 0)) {
    fprintf(stderr, "ggml_fa: bench needs --seq, --heads and --dim\n");
    return 2;
  }
  load_cpu(cpu_lib);

  if (check) {
    int failed = 0;
    const long dims[2] = {64, 128};
    for (int di = 0; di < 2; di++) {
      for (int c = 0; c < 2; c++) {
        struct problem p = {.n = 257, .h = 2, .d = dims[di], .causal = c};
        build(&p);
        compute(&p, (int)threads);
        double err = check_error(&p, true);
        bool ok = err <= 1e-2;
        failed += !ok;
        printf("ggml_fa check: N=%ld H=%ld D=%ld causal=%d rel_frobenius=%.3e "
               "%s\n",
               (long)p.n, (long)p.h, (long)p.d, c, err, ok ? "PASS" : "FAIL");
        ggml_free(p.ctx);
      }
    }
    return failed ? 1 : 0;
  }

  struct problem p = {.n = n, .h = h, .d = d, .causal = causal};
  build(&p);
  compute(&p, (int)threads); /* warm-up */
  double *sec = malloc((size_t)reps * sizeof(double));
  double *sorted = malloc((size_t)reps * sizeof(double));
  double *ratio = malloc((size_t)reps * sizeof(double));
  if (!sec || !sorted || !ratio) {
    die("out of memory");
  }
  for (long r = 0; r < reps; r++) {
    double c0 = cpu_seconds(), t0 = now();
    compute(&p, (int)threads);
    double t1 = now(), c1 = cpu_seconds();
    sec[r] = t1 - t0;
    ratio[r] = (c1 - c0) / (t1 - t0);
  }
  memcpy(sorted, sec, (size_t)reps * sizeof(double));
  qsort(sorted, (size_t)reps, sizeof(double), cmp_double);
  double median = reps % 2 ? sorted[reps / 2]
                           : 0.5 * (sorted[reps / 2 - 1] + sorted[reps / 2]);
  qsort(ratio, (size_t)reps, sizeof(double), cmp_double);
  double busy = reps % 2 ? ratio[reps / 2]
                         : 0.5 * (ratio[reps / 2 - 1] + ratio[reps / 2]);
  double pairs = causal ? 0.5 * (double)n * (double)(n + 1)
                        : (double)n * (double)n;
  double flops = 2.0 * (double)(d + d) * pairs * (double)h;
  double gflops = flops / median * 1e-9;
  double err = check_error(&p, false);
  if (!(err <= 1e-2)) {
    fprintf(stderr, "ggml_fa: rows 0, N/2, N-1 off fp64 by %.3e\n", err);
    return 1;
  }
  printf("ggml_fa: N=%ld H=%ld D=%ld causal=%d threads=%ld seconds=%.6f "
         "gflops=%.2f cpu/wall=%.2f rel_err=%.1e variant=%s\n",
         n, h, d, (int)causal, threads, median, gflops, busy, err, variant);
  if (json) {
    FILE *f = fopen(json, "w");
    if (!f) {
      fprintf(stderr, "ggml_fa: %s: %s\n", json, strerror(errno));
      return 1;
    }
    fprintf(f,
            "{\"seq\": %ld, \"heads\": %ld, \"dim\": %ld, \"dim_v\": %ld, "
            "\"causal\": %s, \"threads\": %ld, \"reps\": %ld, "
            "\"seconds_median\": %.6e, \"seconds\": [",
            n, h, d, d, causal ? "true" : "false", threads, reps, median);
    for (long r = 0; r < reps; r++) {
      fprintf(f, "%s%.6e", r ? ", " : "", sec[r]);
    }
    fprintf(f,
            "], \"flops\": %.6e, \"gflops\": %.4f, \"cpu_per_wall\": %.3f, "
            "\"rel_err_rows\": %.3e, "
            "\"q_type\": \"f32\", \"kv_type\": \"f16\", "
            "\"mask\": \"%s\", \"cpu_variant\": \"%s\", "
            "\"cpu_variant_score\": %d, \"ggml_version\": \"%s\", "
            "\"ggml_commit\": \"%s\"}\n",
            flops, gflops, busy, err, causal ? "f16 [N, N]" : "none", variant,
            variant_score, ggml_version(), ggml_commit());
    fclose(f);
  }
  free(sec);
  free(sorted);
  free(ratio);
  ggml_free(p.ctx);
  return 0;
}
