/* fuzz_options.c: libFuzzer harness for the command-line parsers: the
 * options registry (cli_parse) over the forward-pass and shape groups, and
 * the whole `bench` option parser with its --seq list. The input is a
 * list of arguments separated by NUL bytes. Invariants checked: a parser
 * either takes an argument or fails with a message set; whatever it
 * accepts is in range (abort() otherwise, which the fuzzer reports). */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "bench.h"
#include "internal.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

enum { MAX_ARGS = 64 };

/* Splits data at NUL bytes into argv[1..]; argv[0] is the subcommand. */
static int split_args(const uint8_t *data, size_t size, char *buf,
                      char **argv)
{
    int argc = 0;
    argv[argc++] = "fuzz";
    memcpy(buf, data, size);
    buf[size] = '\0';
    for (size_t i = 0; i <= size && argc < MAX_ARGS;) {
        argv[argc++] = buf + i;
        i += strlen(buf + i) + 1;
    }
    return argc;
}

static void check_params(const ra_params *p)
{
    if (p->exec.block_q < 0 || p->exec.block_q > (1 << 16) ||
        p->exec.block_kv < 0 || p->exec.block_kv > (1 << 16) ||
        p->exec.threads < 0 || p->exec.threads > 1024 ||
        (unsigned)p->exec.layout > RA_LAYOUT_AUTO || p->num.window_left < 0 ||
        p->num.window_right < 0 ||
        (!isnan(p->num.scale) && !isfinite(p->num.scale)))
        abort();
}

static void check_message(void)
{
    if (strcmp(ra_error_message(), "no error recorded") == 0)
        abort(); /* a failure must say why */
}

/* The run/gen style parse: the shared groups of the options registry. */
typedef struct {
    ra_params p;
    cli_shape cs;
} run_style;

static const cli_spec run_style_spec = {
    .name = "fuzz",
    .usage = "",
    .groups = {{cli_forward_opts, offsetof(run_style, p)},
               {cli_pass_opts, offsetof(run_style, p)},
               {cli_seq_opts, offsetof(run_style, cs)},
               {cli_shape_opts, offsetof(run_style, cs)}},
};

static void parse_run_style(int argc, char **argv)
{
    run_style rs;
    ra_params_default(&rs.p);
    cli_shape_default(&rs.cs);
    ra_error_clear();
    const int parsed = cli_parse(&run_style_spec, &rs, argc, argv);
    if (parsed < 0) {
        check_message();
        return;
    }
    if (parsed == CLI_HELP)
        return;
    const ra_params p = rs.p;
    cli_shape cs = rs.cs;
    check_params(&p);
    cli_shape_finish(&cs);
    if (ra_shape_check(&cs.shape) != RA_OK)
        return;
    int64_t bq, bkv;
    ra_params_tiles(&p, &cs.shape, &bq, &bkv);
    if (bq < 1 || bkv < 1)
        abort();
    const ra_layout lay = ra_params_layout(&p, 0);
    for (int P = 1; P <= 5; P++) {
        int64_t total = 0;
        for (int r = 0; r < P; r++) {
            ra_slice sl = ra_params_slice(&p, lay, cs.shape.N, r, P);
            int64_t last = -1;
            for (int64_t t = 0; t < sl.count && t < 4; t++) {
                int64_t pos = ra_slice_pos(&sl, t);
                if (pos <= last || pos >= cs.shape.N)
                    abort();
                last = pos;
            }
            total += sl.count;
        }
        if (total != cs.shape.N)
            abort();
    }
}

static void parse_bench_style(int argc, char **argv)
{
    bench_opts o;
    int help = 0;
    memset(&o, 0, sizeof o);
    cli_shape_default(&o.cs);
    ra_params_default(&o.p);
    o.seqs[0] = 4096;
    o.nseq = 1;
    o.reps = 5;
    ra_error_clear();
    if (parse_bench(&o, argc, argv, &help) != 0) {
        check_message();
        return;
    }
    check_params(&o.p);
    if (o.nseq < 1 || o.nseq > BENCH_MAX_SEQS || o.reps < 1 || o.warmup < 0)
        abort();
    for (int i = 0; i < o.nseq; i++)
        if (o.seqs[i] < 1)
            abort();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *argv[MAX_ARGS + 1];
    char *buf;
    if (size > 4096)
        return 0;
    if (!(buf = malloc(size + 1)))
        return 0;
    const int argc = split_args(data, size, buf, argv);
    argv[argc] = NULL;
    parse_run_style(argc, argv);
    parse_bench_style(argc, argv);
    free(buf);
    return 0;
}
