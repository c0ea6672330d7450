/* cli.h: what the subcommands of `ringattn` share. launch/ is the only part
 * of the project that exits; everything below it returns a status.
 *
 * Every subcommand is parse -> validate -> set up -> run -> report. Its
 * options are declared once, in tables of cli_opt (options.c holds the
 * groups several subcommands share); parsing, range checks, defaults and
 * --help all come from those tables. */
#ifndef RA_CLI_H
#define RA_CLI_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <jansson.h>

#include "call.h"
#include "h5io.h"
#include "internal.h"
#include "run_pass.h" /* a pass from files to files (io/) */
#include "perf_json.h" /* JSON values (comm/perf/perf_json.c) */

/* Exit codes: usage and input errors, runtime failures, and a run
 * --checkpoint that saved its state and stopped as a signal asked (run
 * --resume continues it, docs/CHECKPOINT.md). */
enum { CLI_EXIT_OK = 0, CLI_EXIT_RUNTIME = 1, CLI_EXIT_USAGE = 2,
       CLI_EXIT_CHECKPOINTED = 3 };

/* The process as the subcommands see it. */
typedef struct {
    MPI_Comm comm;
    int rank, nranks;
    const char *command_line; /* argv joined, for output attributes */
    int node_aware;           /* comm is ordered node by node */
    ra_nodes nodes;           /* where the ranks of comm run */
    const char *ring_order;   /* rank 0: mpirun's ranks in ring order */
    ra_h5_tuning tuning;      /* --align, --mpiio-hint: every file call's */
} cli_ctx;

/* Takes the global options out of argv: --ring-order node|mpirun (default
 * node) points ctx->comm at a communicator in that order, which every
 * subcommand then uses for reading, computing and writing; --align BYTES
 * and --mpiio-hint KEY=VALUE (repeatable, after the hints of the
 * environment variable RINGATTN_MPIIO_HINTS, "k=v;k=v") set how files are
 * opened. Returns an exit code (CLI_EXIT_OK to go on). cli_global_free
 * releases the communicator. */
int cli_global_setup(cli_ctx *ctx, int *argc, char **argv);
void cli_global_free(cli_ctx *ctx);
/* The help rows of the global options in which (CLI_GLOBAL_*). */
void cli_global_help(int which, FILE *out);
/* The nodes, ranks per node, ring order and MPI-IO lines of a parameter
 * table (rank 0; the caller prints the rest). */
void cli_print_job(const cli_ctx *ctx, int width);
/* "read T s (R GB/s), write T s (W GB/s)" for a run of shape s: the
 * float32 bytes of q, k, v read and of o, lse written, over the slowest
 * rank's time of each; into buf (128 bytes), which it returns. */
const char *cli_io_rates(const ra_shape *s, double read_s, double write_s,
                         char *buf);

/* ---- the options registry ---------------------------------------------- */

typedef enum {
    CLI_FLAG,   /* no value: stores int 1 */
    CLI_INT,    /* int64_t within [lo, hi] */
    CLI_INT32,  /* int within [lo, hi] (a range inside int's) */
    CLI_REAL,   /* finite double within [rlo, rhi]; rlo excluded if open_lo */
    CLI_TEXT,   /* const char *, kept as given */
    CLI_CHOICE, /* int: the index of the value in choices */
    CLI_CUSTOM, /* parsed by fn */
} cli_kind;

typedef struct cli_opt cli_opt;

/* A custom parser: reads val for the option opt into the group's struct
 * at base; 0, or -1 with a message naming opt->name. */
typedef int (*cli_parse_fn)(const cli_opt *opt, const char *val, void *base);

/* One option, declared once. */
struct cli_opt {
    const char *name;   /* "--seq" */
    cli_kind kind;
    const char *meta;   /* the value in --help ("N", "FILE"); NULL: a flag */
    size_t offset;      /* destination within the group's struct */
    size_t seen;        /* CLI_SEEN(...) of an int set to 1 when given, or 0 */
    int64_t lo, hi;     /* CLI_INT, CLI_INT32 range */
    double rlo, rhi;    /* CLI_REAL range */
    int open_lo;        /* CLI_REAL: rlo itself is refused */
    const char *const *choices; /* CLI_CHOICE: NULL-terminated names */
    const char *noun;   /* CLI_CHOICE: "unknown NOUN 'x'" in the message */
    cli_parse_fn fn;    /* CLI_CUSTOM */
    const char *def;    /* default, parsed before argv and shown in --help */
    const char *shown;  /* or the default --help shows when another part
                           applies it (a library default, a rule) */
    int required;       /* CLI_TEXT: refused when absent after parsing */
    const char *help;   /* one line */
};

/* The offset of a destination whose C type must be ctype (the kind's:
 * int for flags, choices and CLI_INT32, int64_t for CLI_INT, double for
 * CLI_REAL, const char * for CLI_TEXT): a field of another size does not
 * compile. */
#define CLI_FIELD(type, field, ctype)                                         \
    (offsetof(type, field) +                                                  \
     0 * sizeof(char[sizeof(((type *)0)->field) == sizeof(ctype) ? 1 : -1]))

/* The offset of a "given" marker (an int), distinct from "none" (0). */
#define CLI_SEEN(type, field) (CLI_FIELD(type, field, int) + 1)

/* Typed constructors of the common entries: each names only what is
 * particular to its option. T is the group's struct and FIELD the
 * destination within it (checked against the kind's C type); DEF is the
 * default as text, or NULL (none, or it is in the help). */
#define CLI_OPT_FLAG(T, NAME, FIELD, HELP)                                    \
    {.name = NAME, .kind = CLI_FLAG, .offset = CLI_FIELD(T, FIELD, int),      \
     .help = HELP}
#define CLI_OPT_TEXT(T, NAME, META, FIELD, DEF, HELP)                         \
    {.name = NAME, .kind = CLI_TEXT, .meta = META,                            \
     .offset = CLI_FIELD(T, FIELD, const char *), .def = DEF, .help = HELP}
#define CLI_OPT_REQUIRED(T, NAME, META, FIELD, HELP)                          \
    {.name = NAME, .kind = CLI_TEXT, .meta = META, .required = 1,             \
     .offset = CLI_FIELD(T, FIELD, const char *), .help = HELP}
#define CLI_OPT_INT(T, NAME, META, FIELD, LO, HI, DEF, HELP)                  \
    {.name = NAME, .kind = CLI_INT, .meta = META,                             \
     .offset = CLI_FIELD(T, FIELD, int64_t), .lo = LO, .hi = HI, .def = DEF,  \
     .help = HELP}
#define CLI_OPT_INT32(T, NAME, META, FIELD, LO, HI, DEF, HELP)                \
    {.name = NAME, .kind = CLI_INT32, .meta = META,                           \
     .offset = CLI_FIELD(T, FIELD, int), .lo = LO, .hi = HI, .def = DEF,      \
     .help = HELP}
#define CLI_OPT_REAL(T, NAME, META, FIELD, LO, HI, DEF, HELP)                 \
    {.name = NAME, .kind = CLI_REAL, .meta = META,                            \
     .offset = CLI_FIELD(T, FIELD, double), .rlo = LO, .rhi = HI,             \
     .def = DEF, .help = HELP}
#define CLI_OPT_POSITIVE(T, NAME, META, FIELD, HI, DEF, HELP)                 \
    {.name = NAME, .kind = CLI_REAL, .meta = META,                            \
     .offset = CLI_FIELD(T, FIELD, double), .rlo = 0, .open_lo = 1,           \
     .rhi = HI, .def = DEF, .help = HELP}
/* An int: the index of the value in CHOICES; NOUN, or NULL, names the
 * kind of value in the message on an unknown one. */
#define CLI_OPT_CHOICE(T, NAME, META, FIELD, CHOICES, NOUN, DEF, HELP)        \
    {.name = NAME, .kind = CLI_CHOICE, .meta = META,                          \
     .offset = CLI_FIELD(T, FIELD, int), .choices = CHOICES, .noun = NOUN,    \
     .def = DEF, .help = HELP}

/* The options several subcommands take alone, each declared once as an
 * entry of a subcommand's own table (T and FIELD as above). A group (below)
 * is for options that fill a struct several subcommands share. */
/* --force: replace an existing output (each output path goes through
 * cli_output_agree). */
#define CLI_OPT_FORCE(T, FIELD)                                               \
    CLI_OPT_FLAG(T, "--force", FIELD,                                         \
                 "replace the output if it exists (refused otherwise)")
/* --profile FILE: the machine profile the plan reads for --strategy auto
 * (run and bench). */
#define CLI_OPT_PROFILE(T, FIELD)                                             \
    {.name = "--profile", .kind = CLI_TEXT, .meta = "FILE",                   \
     .offset = CLI_FIELD(T, FIELD, const char *), .shown = "built-in",        \
     .help = "probe profile: auto, stall timeout"}

/* --out-axes B,N,H,D|B,H,N,D: the order the 4-D outputs (/o, the
 * gradients) are written in, into the int FIELD of T, an index of
 * cli_out_axes: the ra_axes is RA_AXES_BNHD + FIELD. */
extern const char *const cli_out_axes[];
#define CLI_OPT_OUT_AXES(T, FIELD)                                            \
    CLI_OPT_CHOICE(T, "--out-axes", "AXES", FIELD, cli_out_axes,              \
                   "output order", "B,N,H,D",                                 \
                   "4-D outputs: B,N,H,D or B,H,N,D")

/* --qkv-layout bnhd|bhnd: the order of the q, k, v (and do) datasets that
 * carry no axes attribute, into the ra_axes FIELD of T; without it such
 * datasets are refused (RA_AXES_NONE). */
int cli_parse_qkv_layout(const cli_opt *opt, const char *val, void *base);
#define CLI_OPT_QKV_LAYOUT(T, FIELD)                                          \
    {.name = "--qkv-layout", .kind = CLI_CUSTOM, .meta = "ORDER",             \
     .offset = CLI_FIELD(T, FIELD, ra_axes), .fn = cli_parse_qkv_layout,      \
     .help = "bnhd or bhnd: axis order of q, k, v without 'axes'"}

/* A file type by the library's names (ra_dtype_parse: fp32, fp16, bf16,
 * fp64, and its earlier f32, f16, f64), or gen's old spellings float32,
 * float64, float16 as aliases, into the ra_dtype field at o->offset; -1
 * with the error set otherwise. */
int cli_parse_dtype(const cli_opt *o, const char *val, void *base);

/* A table of options (ending with a NULL name) and where its struct lies
 * within a subcommand's options. */
typedef struct {
    const cli_opt *opts;
    size_t base;
} cli_group;

/* CLI_MAX_OPTIONS: the most options one subcommand (all its groups) may
 * have: the parser marks each one given, to refuse a repeated one. */
enum { CLI_MAX_GROUPS = 6, CLI_MAX_POSITIONAL = 2, CLI_MAX_OPTIONS = 128 };

/* The global options a subcommand honours (cli_global_setup takes them
 * out of every command line): the ring order, and how files are opened. */
enum { CLI_GLOBAL_RING = 1, CLI_GLOBAL_FILES = 2 };

/* A subcommand: its name, its help text around the options, its groups,
 * and its positional arguments (stored as const char * at pos_offset). */
typedef struct {
    const char *name;      /* "run", "run --mha" */
    const char *usage;     /* usage line(s) and description */
    cli_group groups[CLI_MAX_GROUPS];
    int npositional;       /* at most this many; 0: none */
    size_t pos_offset;
    const char *epilog;    /* text after the options (details), or NULL */
    int globals;           /* CLI_GLOBAL_* it honours, listed in --help */
} cli_spec;

/* The positional arguments of a spec: at most as many as the array FIELD
 * of T holds (of const char *), stored there in order. */
#define CLI_POSITIONAL(T, FIELD)                                              \
    .npositional = (int)(sizeof(((T *)0)->FIELD) / sizeof(const char *)),     \
    .pos_offset = CLI_FIELD(T, FIELD[0], const char *)

enum { CLI_PARSED = 0, CLI_HELP = 1 };

/* Applies the table defaults to opts, then parses argv[1..argc): CLI_PARSED,
 * CLI_HELP (--help was given), or -1 with a message set (a bad option, or a
 * required one absent: "NAME: --in and --out are required"). `--name value`
 * and `--name=value` both work. */
int cli_parse(const cli_spec *spec, void *opts, int argc, char **argv);

/* Writes the help of a subcommand, generated from its tables. */
void cli_help(const cli_spec *spec, FILE *out);
/* on: cli_help writes Markdown instead (`ringattn help --markdown`, the
 * generated part of docs/REFERENCE.md). */
void cli_help_markdown(int on);
/* One row of a help table, as the options' are: left from column indent,
 * the text (one line) and the default def (or NULL) from the help
 * column. */
void cli_help_row(FILE *out, int indent, const char *left, const char *text,
                  const char *def);

/* Parses and prints the help on rank 0: returns -1 when the caller goes on,
 * else the exit code (0 after --help, 2 after a bad option). */
int cli_parse_or_exit(const cli_ctx *ctx, const cli_spec *spec, void *opts,
                      int argc, char **argv);

/* Strict number parsing: the whole string, within [lo, hi]. Return 0 on
 * success, -1 with a message naming the option otherwise. */
int cli_parse_i64(const char *opt, const char *text, int64_t lo, int64_t hi,
                  int64_t *out);
int cli_parse_f64(const char *opt, const char *text, double *out);
/* Parses "1,2,4" (no empty item, none after a trailing comma, at least one,
 * at most max) into out, each within [lo, hi]: the count, or -1 with a
 * message naming the option and what the items are ("node counts"). */
int cli_parse_i64_list(const char *opt, const char *text, int64_t lo,
                       int64_t hi, int64_t *out, int max, const char *what);

/* The largest size (a length, a window) an option takes. */
#define CLI_MAX_SIZE ((int64_t)1 << 40)
/* The option's value through a library's parse of an enum (ra_*_parse, the
 * one list of names, whose message says what it expected): 0, or -1 with
 * the message naming the option. */
int cli_named(const cli_opt *o, ra_status st);
/* The destination of o in the group's struct at base, of enum type T. */
#define CLI_ENUM_AT(T, o, base) ((T *)((char *)(base) + (o)->offset))
/* The library's enums by its names (cli_named): an ra_layout, ra_rope,
 * ra_precision, ra_wire, ra_score, ra_strategy at o->offset. */
int cli_parse_layout(const cli_opt *o, const char *val, void *base);
int cli_parse_rope(const cli_opt *o, const char *val, void *base);
int cli_parse_precision(const cli_opt *o, const char *val, void *base);
int cli_parse_wire(const cli_opt *o, const char *val, void *base);
int cli_parse_score(const cli_opt *o, const char *val, void *base);
int cli_parse_strategy(const cli_opt *o, const char *val, void *base);
/* --window "L" or "L,R" (keys within L before and R after the aligned
 * diagonal) into the ra_params at base. */
int cli_parse_window(const cli_opt *o, const char *val, void *base);
/* The usage and the option rows of spec, as cli_help prints them. */
void cli_help_options(const cli_spec *spec, FILE *out);

/* ---- groups shared by several subcommands ------------------------------- */

/* Shape flags, with their defaults filled. */
typedef struct {
    ra_shape shape;
    int seq_kv_set, kv_heads_set, dim_v_set;
} cli_shape;

/* --batch --seq-kv --heads --kv-heads --dim --dim-v (into a cli_shape) and
 * --seq alone (bench takes a list instead). */
extern const cli_opt cli_shape_opts[];
extern const cli_opt cli_seq_opts[];
/* The forward pass's options (into ra_params). */
extern const cli_opt cli_forward_opts[];
/* What only a command that runs passes takes (into ra_params):
 * --stall-timeout. */
extern const cli_opt cli_pass_opts[];

/* Random masks made from the seed: padding lengths and packed sequences.
 * gen writes them into its file, bench times with them and plan predicts
 * bench's (cli_random_mask_opts: --lens random, --segments AVG). */
typedef struct {
    int lens, lens_kind;  /* --lens random was given */
    int64_t segment_avg;  /* mean packed-sequence length; 0: none */
} cli_random_masks;
extern const cli_opt cli_random_mask_opts[];

/* --json FILE --csv FILE, into a cli_tables: a command's table written
 * again as JSON and as CSV, each replaced if it exists. */
typedef struct {
    const char *json, *csv;
} cli_tables;
extern const cli_opt cli_table_opts[];
/* The files of tab checked before any work (bench_report.c): neither is
 * an input (in, profile: the files the command reads, or NULL) nor the
 * other, each can be written (an existing one is replaced). Not
 * collective. */
ra_status cli_tables_check(const cli_tables *tab, const char *in,
                           const char *profile);
/* --json's file filled by json, --csv's by csv (h5io_text_write, arg
 * theirs), each atomically: the whole new file or, on a failed write, the
 * earlier one. One rank. */
ra_status cli_tables_write(const cli_tables *tab,
                           int (*json)(FILE *, const void *),
                           int (*csv)(FILE *, const void *), const void *arg);

/* What a checking tool compares, and how many rows. */
typedef struct {
    const char *in, *out;  /* the run's input, the output checked */
    int64_t sample, seed;  /* sample 0: the tool's own default */
    int all;
    double tol;
    int precision, precision_set; /* --precision: judge as this
                                     ra_precision, not the recorded one */
} cli_check;

/* --in --out (required) --sample --all --seed --tol (into a cli_check). */
extern const cli_opt cli_check_opts[];

/* cli_parse_or_exit() of a checking tool, whose spec's groups fill the
 * cli_check c, then the rule between them: --all and --sample exclude each
 * other. -1 when the caller goes on, else the exit code. */
int cli_check_parse(const cli_ctx *ctx, const cli_spec *spec, cli_check *c,
                    int argc, char **argv);

/* What `--strategy all` stores in ra_params.strategy: not a strategy, a
 * request (bench only) to measure every applicable one. */
#define CLI_STRATEGY_ALL (-1)
/* What `--strategy auto` stores until the plan (plan.h) has picked one
 * (run and bench only). */
#define CLI_STRATEGY_AUTO (-2)

void cli_shape_default(cli_shape *cs);
/* Resolves unset flags: M = N, G = H, Dv = D. */
void cli_shape_finish(cli_shape *cs);

/* After parsing: threads come from the parameters only, an unset --threads
 * resolved from OMP_NUM_THREADS (1 when that is unset). An option that
 * would not apply is the library's to refuse (cli_params_check). */
void cli_params_finish(ra_params *p);

/* What only the command line knows of the parameters of a run: --gemm
 * auto needs a valid RINGATTN_GEMM, and --strategy all/auto is refused
 * where one strategy must be named. */
ra_status cli_options_check(const ra_params *p);
/* The parameters of a run checked before anything is read: by
 * cli_options_check, then by the library's rules (ra_call_check_local),
 * for a command whose options give them (file NULL) and for verify (they
 * came from the attributes of file, named so). */
ra_status cli_params_check(const ra_params *p, const ra_shape *s,
                           const char *file);

/* ---- what the drivers share --------------------------------------------- */

/* The parse of a driver of one pass (run, run --mha, run --backward,
 * bench --backward): ra_params_default(p) (p lies in opts), the tables,
 * then cli_params_finish(p); p->stall_timeout is NaN when --stall-timeout
 * was not given (cli_pass_begin resolves it). Returns -1 when the caller
 * goes on, else the
 * exit code (0 after --help, 2 after a bad or refused option). */
int cli_parse_pass(const cli_ctx *ctx, const cli_spec *spec, void *opts,
                   ra_params *p, int argc, char **argv);

/* A rank's local tensors (io/run_pass.h). */
typedef h5io_tensors cli_tensors;
#define cli_tensors_free h5io_tensors_free

/* h5io_mem_check of this rank of ctx: need bytes against limit when > 0
 * (--mem-limit), else this node's physical memory shared evenly by the
 * ranks of ctx on it. Call it before allocating. Not collective. */
ra_status cli_mem_check(const cli_ctx *ctx, int64_t need, int64_t limit,
                        const char *what);

/* h5io_tensors_alloc of this rank of ctx, against p->mem_limit as
 * cli_mem_check. Not collective. */
ra_status cli_tensors_alloc(cli_tensors *t, const ra_shape *s,
                            const ra_params *p, const cli_ctx *ctx);

/* Rank 0 checks the output path (h5io_output_check with the files the run
 * reads, NULL-terminated), then every rank agrees: call it in the validate
 * step, before the first collective of the work. */
ra_status cli_output_agree(const cli_ctx *ctx, const char *out, int force,
                           const char *const *inputs);

/* Rank 0 refuses two files of the command that are one and the same
 * (h5io_paths_check: an output that is an input or another output), then
 * every rank agrees: call it first in the validate step. list ends with an
 * entry whose option is NULL; a NULL path is an option not given. */
ra_status cli_paths_agree(const cli_ctx *ctx, const h5io_named_path *list);

/* Prints "ringattn: <message>" once, from rank 0, and returns code. */
int cli_fail(const cli_ctx *ctx, int code, const char *what);

/* For a failure that the other ranks cannot learn of (a stalled ring: they
 * wait for a stopped rank): prints "ringattn: <what>" from this rank and
 * ends the whole job with MPI_Abort, which also ends a stopped rank. */
void cli_abort(const cli_ctx *ctx, const char *what)
    __attribute__((noreturn));

/* cli_fail with the last error's message and exit code (input and argument
 * errors: 2, the rest: 1). */
int cli_fail_status(const cli_ctx *ctx, ra_status st);

/* Maps a library status to an exit code. */
int cli_exit_code(ra_status st);

/* `ringattn --version`: the version and the build's BLAS, MPI, HDF5 and the
 * SIMD path of the exp, from rank 0. */
int cli_version(const cli_ctx *ctx);
/* What cli_version prints, on one line ("ringattn X; BLAS ...; MPI ...;
 * HDF5 ...; exp ..."), into buf. */
void cli_version_line(char *buf, size_t n);

/* A subcommand: argv from its name on; returns the exit code. */
typedef int cli_command(const cli_ctx *ctx, int argc, char **argv);

/* The subcommands and the drivers of their modes (commands.c's tables
 * name them all). */
cli_command cmd_gen, cmd_run, cmd_verify, cmd_info, cmd_bench, cmd_plot,
    cmd_probe, cmd_plan;
cli_command cmd_run_mha, cmd_run_backward, cmd_bench_backward,
    cmd_verify_backward;

/* A mode: `ringattn run --backward ...` runs the mode's driver with the
 * whole command line less the flag (the flag may stand anywhere after the
 * subcommand; two modes of one subcommand exclude each other). */
typedef struct {
    const char *command, *flag;
    cli_command *fn;
    const char *help; /* for the subcommand's --help and ringattn --help */
} cli_mode;
extern const cli_mode cli_modes[]; /* ends with a NULL command */

/* Runs the subcommand argv[1] names, or its mode, or --version and --help
 * of the whole command: the exit code. */
int cli_dispatch(const cli_ctx *ctx, int argc, char **argv);
/* The "modes" section of a subcommand's --help (nothing when it has none). */
void cli_modes_help(const char *command, FILE *out);

#endif /* RA_CLI_H */
