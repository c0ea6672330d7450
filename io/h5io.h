/* h5io.h: io/ functions the command line needs beyond the public header
 * (not installed).
 *
 * The readers, for the verify and info subcommands, open the file with the
 * default (sec2) driver and independent I/O, so they may run on one rank
 * alone; none is collective. h5io_gen_backward(), for the gen subcommand,
 * is collective like the ra_h5_ functions; like them, the collective
 * functions here take their MPI-IO tuning with the call. Failures return a status and set
 * ra_error_message() to one line naming the file, the dataset or attribute,
 * and the problem. */
#ifndef RA_H5IO_H
#define RA_H5IO_H

#include <limits.h>
#include <stdint.h>
#include <stdio.h>

#include "band.h"
#include "internal.h"

/* This rank's token slices under a resolved layout (the balanced one
 * weighed by cut, ra_band_slice): of the N queries into *sq, of the M keys
 * into *sk; RA_ERR_MPI naming path when comm cannot say which rank this
 * is. Not collective. */
ra_status h5io_rank_slices(MPI_Comm comm, const char *path, ra_layout layout,
                           ra_band cut, const ra_shape *s, ra_slice *sq,
                           ra_slice *sk);

/* The arguments of a reader of rank slices: a valid shape (ra_shape_check)
 * and a resolved layout (not RA_LAYOUT_AUTO); RA_ERR_ARG naming path
 * otherwise. */
ra_status h5io_slices_check(const char *path, const ra_shape *s,
                            ra_layout layout);

/* RA_ERR_ARG, naming path, when t (NULL: no tuning) has a negative
 * alignment, too many hints, or a hint that is not key=value; the check
 * every collective open makes (io/tuning.c). */
ra_status h5io_tuning_check(const ra_h5_tuning *t, const char *path);

/* The bytes h5io_gen_backward() allocates on rank of nranks (negative when
 * they overflow), for a check before it runs. */
int64_t h5io_gen_bytes(const ra_shape *shape, int rank, int nranks, int dout,
                       ra_dtype dtype);

/* What h5io_gen_backward() writes: q, k, v in dtype (RA_DTYPE_F32, F64 or
 * F16, the last rounded to nearest, ties to even) from seed. lens: also
 * /q_lens and /kv_lens (B,) int64, uniform in [0, N] and [0, M].
 * segment_avg > 0: also packed-sequence ids of that mean segment length,
 * int64: /segments (B, N) when N == M, else /q_segments (B, N) and
 * /kv_segments (B, M); root attributes lens (0/1) and segment_avg record
 * the request. dout: also /do (B, N, H, Dv), the output gradient of a
 * backward pass, stream RA_STREAM_DO. Values depend only on the seed,
 * never on P. tuning: the write's MPI-IO tuning, or NULL. */
typedef struct {
    ra_dtype dtype;
    uint64_t seed;
    int lens;
    int64_t segment_avg;
    int dout;
    const ra_h5_tuning *tuning;
    int sinks; /* also /sinks (H,) float32, unit-normal, stream
                  RA_STREAM_SINKS */
} h5io_gen_spec;

/* ra_h5_gen() as g asks, collective over comm. */
ra_status h5io_gen_backward(MPI_Comm comm, const char *path, int force,
                            const ra_shape *shape, const h5io_gen_spec *g);

/* Reads dset[b, row0 : row0 + nrows, :, :] of a rank-4 float dataset (e.g.
 * "/o" or "/q") into out, converted to double; out holds nrows * dims[2] *
 * dims[3] values, row-major. RA_ERR_ARG when the rows lie outside. */
ra_status h5io_read_rows(const char *path, const char *dset, int64_t b,
                         int64_t row0, int64_t nrows, double *out);

/* The names of an order as the option --qkv-layout and the output's
 * qkv_layout attribute spell them: "bnhd", "bhnd", "none" (no order
 * assumed). h5io_qkv_layout_parse returns RA_AXES_NONE for any other
 * name, "none" included. */
const char *h5io_qkv_layout_name(ra_axes axes);
ra_axes h5io_qkv_layout_parse(const char *name);

/* h5io_read_rows() of an input tensor stored in the order its "axes"
 * attribute names, else fallback (see ra_axes): out holds the rows as
 * (nrows, heads, dim) either way. */
ra_status h5io_read_rows_as(const char *path, const char *dset,
                            ra_axes fallback, int64_t b, int64_t row0,
                            int64_t nrows, double *out);

/* The longest out_group name (the readers' buffer holds one more). */
#define H5IO_OUT_GROUP_MAX 255

/* What is wrong with group as the group of an output's tensors, or NULL
 * when nothing is: it must be absolute and below the root, at most
 * H5IO_OUT_GROUP_MAX characters (one "/" may end it), without empty, "."
 * or ".." components, and its first component must not be o, lse or
 * attn_map (the names readers look for at the root). The writer and the
 * readers apply this one rule; the message is a clause ("it has ..."). */
const char *h5io_out_group_problem(const char *group);
/* The one rule for how an output's tensors are stored (--out-chunk,
 * --out-compress; the writer's check): NULL when chunk (rows, 0: not
 * chunked) and compress (a gzip level, 0: none) can be written, else the
 * problem, a phrase. */
const char *h5io_storage_problem(int64_t chunk, int compress);

/* The path of an output dataset (leaf "o", "lse", "attn_map") under the
 * file's recorded out_group (root when none) into name[len]. */
ra_status h5io_out_name(const char *path, const char *leaf, char *name,
                        size_t len);

/* h5io_read_rows() of an output file's /o, wherever out_group put it,
 * stored in either order (its axes attribute; none: (B, N, H, Dv)). */
ra_status h5io_read_o_rows(const char *path, int64_t b, int64_t row0,
                           int64_t nrows, double *out);

/* Reads lse[b, h, i0 : i0 + n] of the rank-3 /lse (B, H, N) (under the
 * recorded out_group) into out. */
ra_status h5io_read_lse(const char *path, int64_t b, int64_t h, int64_t i0,
                        int64_t n, double *out);

/* The root attributes of an output file that a check needs. Files written
 * before windows, masks or layouts existed read as window = 0,
 * window_left = window_right = 0, masks "" and layout "contiguous". */
typedef struct {
    int causal, window;
    int64_t window_left, window_right;
    double scale;    /* NaN when absent (a score without a scale) */
    int64_t seq_q, seq_kv;
    char layout[32];
    char score[16];  /* "dot" when absent */
    double sigma;    /* 1 when absent */
    char masks[128];
    char rope[16];          /* "none" when absent */
    double rope_base;       /* RA_ROPE_BASE_DEFAULT when absent */
    int alibi;              /* 0 when absent */
    char alibi_slopes[16];  /* "standard", "/alibi_slopes" or "" */
    char align[16];         /* "tensor" (also when absent) or "sequence" */
    ra_numerics features;   /* the score features' fields as recorded
                               (score_features.h; 0, off, when absent);
                               its other fields are unused */
    char sinks_dataset[256]; /* the sinks' dataset of the input, "" when
                               none (or absent) */
    char qkv_layout[8];   /* "bnhd" when absent */
    char out_dtype[8];    /* type of /o: "fp32" when absent */
    char precision[8];    /* of the tile products: "fp32" (also when
                             absent) or "bf16" */
    char wire[8];         /* how K/V travelled: "fp32" (also when absent)
                             or "bf16" (then rounded to bf16) */
    char names[3][256];   /* q, k, v datasets read; "/q", "/k", "/v" when
                             absent */
    char mask_sets[5][256]; /* mask datasets applied: q_lens, kv_lens,
                               segments, q_segments, kv_segments; "" when
                               not recorded (then the default names) */
    char forward[256];    /* a gradient file's: the forward output its o
                             and lse came from, "recomputed" (then /o and
                             /lse are in the file), "" when absent */
} h5io_run_attrs;

ra_status h5io_read_run_attrs(const char *path, h5io_run_attrs *a);

/* Reads dset[b, start : start + count] of the rank-2 integer dataset dset
 * (e.g. "/segments") into out as int64. When it is absent: *present = 0
 * and RA_OK; else *present = 1. Values are not range checked. */
ra_status h5io_read_segments(const char *path, const char *dset, int64_t b,
                             int64_t start, int64_t count, int64_t *out,
                             int *present);

/* Reads the whole float dataset name, which must have exactly the given
 * rank and dims, into out (converted to float32); *present = 0 and RA_OK
 * when it is absent. For weights (the additive score, the layer): a NaN or
 * an infinity is refused as h5io_scan_array() does. */
ra_status h5io_read_weights(const char *path, const char *name, int rank,
                            const int64_t *dims, float *out, int *present);

/* An integer root attribute; *present = 0 when it is absent. */
ra_status h5io_read_int_attr(const char *path, const char *name,
                             int64_t *out, int *present);

/* The rank and dims of dataset name; *present = 0 when it is absent. A
 * 4-D tensor's dims come in (B, N, H, D) order whichever order its axes
 * attribute names (none: stored so). */
ra_status h5io_dataset_dims(const char *path, const char *name, int *rank,
                            int64_t dims[4], int *present);

/* ---- fingerprints (io/fingerprint.c) ---- */

/* Room for a fingerprint text: the input path and ten lines of a dataset
 * name and a hash. */
#define H5IO_FP_LEN 8192

/* What a fingerprint is computed from: the input path, this rank's q, k,
 * v (B, n, H, D) ... as read (float32), their slices, the masks read and
 * the params (additive weights, ALiBi slopes). names: the datasets of q,
 * k, v, q_segments, kv_segments, q_lens, kv_lens (those of absent masks
 * are not used). */
typedef struct {
    const char *in;
    const ra_shape *shape;
    const ra_params *params;
    const float *q, *k, *v;
    const ra_h5_masks *masks;
    ra_slice qs, ks;
    const char *names[7];
} h5io_fp_source;

/* The fingerprint text of src into text[len] (H5IO_FP_LEN): lines
 * "input=PATH" and "KEY=NAME HEX" or "KEY=none" for q, k, v, q_segments,
 * kv_segments, q_lens, kv_lens, additive, alibi_slopes. Each hash is a
 * sum over tokens of a hash seeded by the token's global position, so it
 * is the same for every P and layout. Collective. */
ra_status h5io_fingerprint_make(MPI_Comm comm, const h5io_fp_source *src,
                                char *text, size_t len);

/* The fingerprint attribute of the output file path into text[len];
 * RA_ERR_INPUT when it has none. Not collective. */
ra_status h5io_fingerprint_read(const char *path, char *text, size_t len);

/* RA_OK when every hash of recorded (the forward output fwd's) equals
 * mine's; else RA_ERR_INPUT naming fwd, the first dataset that differs and
 * both values. The input path is not compared: a copy of the input is the
 * same data. */
ra_status h5io_fingerprint_compare(const char *fwd, const char *recorded,
                                   const char *mine);

/* ---- the backward pass (run --backward; io/backward.c) ---- */

/* The attributes of the forward output fwd against this run's problem
 * (lengths, mask rules, score, scale or sigma, and its arithmetic:
 * precision and wire): RA_ERR_INPUT naming the file, the attribute that
 * differs and the option. A file of another problem would give gradients of
 * nothing in particular. Not collective. */
ra_status h5io_fwd_check(const char *fwd, const ra_shape *s,
                         const ra_params *p);

/* The files a backward pass reads beside q, k, v: the input with /do,
 * the forward output with /o and /lse (NULL: recomputed), and the order
 * of a /do without an axes attribute (as --qkv-layout gives it for q, k,
 * v; RA_AXES_NONE refuses one). */
typedef struct {
    const char *in, *fwd;
    ra_axes axes;
    const ra_h5_tuning *tuning; /* the reads' MPI-IO tuning, or NULL */
} h5io_bwd_files;

/* Collective: this rank's slices (p->layout, resolved) of /do (B, N, H, Dv)
 * (or (B, H, N, Dv), see h5io_axes_of) from f->in and, when f->fwd is not
 * NULL, of /o (B, N, H, Dv) and /lse (B, H, N) from that forward output
 * (see h5io_fwd_check). Non-finite values are refused (lse may be -inf).
 * The same verdict on every rank. */
ra_status h5io_read_backward(MPI_Comm comm, const h5io_bwd_files *f,
                             const ra_shape *s, const ra_params *p,
                             float *dout, float *o, float *lse);

/* The forward output fwd's lse, this rank's slice (B, H, n) under
 * p->layout, against the masks mk of this run (this rank's parts, as
 * ra_h5_read_masks gives them) and p's causal and window rules: a query
 * that sees at least one key must have a finite lse, one that sees none
 * -inf. RA_ERR_INPUT naming fwd, /lse and the first (b, h, i) that
 * differs. Gathers the key segment ids (B * M int64) on every rank when
 * there are segments. Collective; the same status on every rank. */
ra_status h5io_lse_check(MPI_Comm comm, const char *fwd, const ra_shape *s,
                         const ra_params *p, const ra_masks *mk,
                         const float *lse);

/* What a gradient file records besides the tensors. */
typedef struct {
    const ra_params *params;  /* layout resolved */
    const char *forward;      /* where o and lse came from: a file or
                                 "recomputed" */
    const char *masks;        /* mask datasets used, comma separated */
    const char *command_line;
    const ra_additive_grads *dw; /* the additive score's weight gradients
                                    (params->additive's shapes), or NULL */
    const char *fingerprint;  /* of the input read (h5io_fingerprint_make) */
    const ra_h5_source *source;  /* the inputs read (their order), or NULL */
    ra_axes out_axes;         /* RA_AXES_BHND: /dq, /dk, /dv stored
                                 heads-first (B, H, N, D), (B, G, M, Dk),
                                 (B, G, M, Dv); else tokens-first. Their
                                 attribute axes says which */
    const ra_h5_tuning *tuning; /* the write's MPI-IO tuning, or NULL */
    const float *dsinks;      /* (H) the sinks' gradient, or NULL */
    const float *o, *lse;     /* the recomputed forward's, this rank's
                                 query rows as for dq (NULL: read from the
                                 file named by forward), written as /o
                                 (B, N, H, Dv) and /lse (B, H, N) for
                                 verify --backward */
} h5io_grads_meta;

/* Collective and atomic like ra_h5_write_outputs: /dq (B, N, H, D),
 * /dk (B, M, G, Dk), /dv (B, M, G, Dv) float32 from each rank's layout
 * slices, with meta->dw also /dw_q (A, D), /dw_k (A, Dk), /dw_v (A,),
 * with meta->dsinks /dsinks (H,) (rank 0's), with meta->o /o and /lse,
 * and root attributes:
 * h5io_record's (kind = "gradients": the forward pass's rules, score,
 * RoPE, ALiBi, masks, sinks_dataset), pass = "backward", forward, seq_q,
 * seq_kv. */
ra_status h5io_write_grads(MPI_Comm comm, const char *path, int force,
                           const ra_shape *shape, const h5io_grads_meta *meta,
                           const float *dq, const float *dk, const float *dv);

/* ---- the attention layer (run --mha, gen --mha) ---- */

/* Collective: this rank's tokens (a layout slice of axis 1) of the float
 * dataset name, which must be (dims[0], dims[1], dims[2]); a NaN or an
 * infinity is refused as h5io_scan_tokens() does. tuning: the read's
 * MPI-IO tuning, or NULL. */
ra_status h5io_read_tokens(MPI_Comm comm, const char *path, const char *name,
                           const int64_t dims[3], const ra_slice *slice,
                           const ra_h5_tuning *tuning, float *out);

/* What the layer writes: /y of dims (B, N, Eout) from each rank's tokens
 * y (a slice of axis 1), and the root attributes of the layer run. */
typedef struct {
    const ra_shape *shape;
    const ra_params *params;
    int pos_encoding;
    const int64_t *dims;
    const ra_slice *slice;
    const float *y;
    const char *command_line;
    const ra_h5_tuning *tuning; /* the write's MPI-IO tuning, or NULL */
} h5io_layer_output;

/* Writes out into path, collective and atomic like ra_h5_write_outputs. */
ra_status h5io_write_layer_output(MPI_Comm comm, const char *path, int force,
                                  const h5io_layer_output *out);

/* Collective: random layer inputs: /x (B, N, E) (or /x_q (B, N, E) and
 * /x_kv (B, M, E) when cross), weights /w_q (H*D, E), /w_k (G*D, E),
 * /w_v (G*Dv, E), /w_o (E, H*Dv) with entries N(0, 1/fan_in), biases
 * /b_q /b_k /b_v /b_o, and root attributes heads, kv_heads. */
ra_status h5io_gen_mha(MPI_Comm comm, const char *path, int force,
                       const ra_shape *shape, int64_t E, int cross,
                       uint64_t seed, const ra_h5_tuning *tuning);

/* The segment datasets of an input file: "/segments" for both sides, or
 * "/q_segments" and "/kv_segments", or NULL and NULL when it has none. */
ra_status h5io_segment_names(const char *path, const char **q_name,
                             const char **kv_name);

/* The same under the mask dataset names of src (NULL: the defaults). */
ra_status h5io_segment_names_from(const char *path, const ra_h5_source *src,
                                  const char **q_name, const char **kv_name);

/* Reads the sizes of /o (B, N, H, Dv), whichever order it is stored in,
 * and /lse (B, H, N) (under the recorded out_group). */
ra_status h5io_read_out_shape(const char *path, int64_t dims_o[4],
                              int64_t dims_lse[3]);

/* The first NaN or infinity of the input tensors, in file order of /q, then
 * /k, then /v; dataset NULL when there is none. */
typedef struct {
    const char *dataset; /* the q, k or v dataset (src's name, else "/q",
                            "/k", "/v"), or NULL */
    int64_t index[4];    /* (b, i, h, d) of /q, (b, j, g, d) of /k and /v */
    const char *kind;    /* "nan", "inf" or "-inf" */
} h5io_nonfinite;

/* This rank's slices q, k, v as ra_h5_read_inputs() filled them from
 * the datasets src names (/q /k /v with NULL src) under the resolved
 * layout. */
typedef struct {
    const ra_h5_source *src;
    const ra_shape *shape;
    ra_layout layout;
    ra_band cut; /* the balanced layout's weights (ra_cut_band) */
    const float *q, *k, *v;
} h5io_inputs;

/* Scans the slices of in for values that are not finite; collective over
 * comm. RA_ERR_INPUT naming the file, dataset, value and global index when
 * any rank holds one (the same verdict on every rank), else RA_OK. A
 * float64 file value beyond the float32 range reads as inf and is caught. */
ra_status h5io_scan_nonfinite(MPI_Comm comm, const char *path,
                              const h5io_inputs *in, h5io_nonfinite *bad);

/* The same scan for the token tensors of the layer, /x or /x_q and /x_kv
 * (B, len, E), this rank holding slice of axis 1; collective, the same
 * verdict on every rank; index legend (b, i, e). */
ra_status h5io_scan_tokens(MPI_Comm comm, const char *path, const char *name,
                           const int64_t dims[3], const ra_slice *slice,
                           const float *x);

/* The same scan for an array every rank holds whole (weights, biases);
 * rank at most 4, index legend (i, j, ...); not collective. */
ra_status h5io_scan_array(const char *path, const char *name, int rank,
                          const int64_t *dims, const float *x);

/* The one check of an output path, for every subcommand that writes
 * (HDF5 or not), made on one rank before any heavy work and before the
 * first collective of the compute (h5io_commit() makes it again): the path
 * names a file whose name, and the temporary name h5io_commit() would use,
 * fit the file system's NAME_MAX, in an existing, writable directory that
 * is not on a kernel file system (proc, sysfs, devtmpfs, cgroup...); an
 * existing path is a regular file (not a directory, device, FIFO or
 * socket, also behind a symlink) and is replaced only with force; and the
 * path is none of the files the run reads. inputs: NULL-terminated list of
 * the files the run reads (or NULL); each counts with every file it
 * depends on (external link targets, external raw-data files, virtual
 * dataset sources; io/deps.c), compared by device and inode. RA_ERR_ARG or
 * RA_ERR_EXISTS with one line naming the path and the problem. Not
 * collective. */
ra_status h5io_output_check(const char *path, int force,
                            const char *const *inputs);

/* The temporary files this process is writing now: slot 0 ..
 * H5IO_TMP_SLOTS - 1 each holds one or NULL; async-signal safe, for a
 * signal handler that removes them before the process dies. */
#define H5IO_TMP_SLOTS 4
const char *h5io_tmp_active(int slot);

/* ---- atomic files (io/atomic.c) ----
 *
 * Every file a command writes is first written under a temporary name in
 * its destination directory (io/tmpfile.c), made durable (fsync), and only
 * then renamed onto its name (and the directory fsynced): the name holds
 * the earlier file or the complete new one, never a part. A command that
 * writes several files stages each, and publishes them all only once every
 * one is complete. */

/* A file written under a temporary name, not yet renamed onto path. tmp
 * is "" when there is none (not begun, published or discarded); f is the
 * stream of a text file being written, else NULL. */
typedef struct {
    char path[PATH_MAX];
    char tmp[PATH_MAX];
    int force;
    FILE *f;
} h5io_staged;

/* Rank 0 alone (not collective): starts the text file path (the output
 * check of h5io_output_check() without inputs, then a new temporary file
 * open for writing as s->f). */
ra_status h5io_text_begin(h5io_staged *s, const char *path, int force);

/* Ends the writing of s->f: flushed, checked (ferror), fsynced, closed. On
 * a failure the temporary file is removed and s is empty. */
ra_status h5io_text_end(h5io_staged *s);

/* Renames the n staged files onto their paths (rank 0 alone): each is
 * checked first (an output that appeared meanwhile is refused without
 * force), then renamed, then its directory fsynced. On a failure before
 * the renames every temporary file is removed and every path keeps its
 * earlier file. Entries with no temporary file are skipped. */
ra_status h5io_staged_publish(h5io_staged *const *files, int n);

/* Removes a staged file's temporary file (rank 0 alone; a no-op when there
 * is none). */
void h5io_staged_discard(h5io_staged *s);

/* h5io_staged_publish() and h5io_staged_discard() over comm, for files
 * staged by a collective writer: rank 0 renames or removes, every rank
 * withdraws the temporary names and returns the same status. */
ra_status h5io_publish(MPI_Comm comm, h5io_staged *const *files, int n);
void h5io_discard(MPI_Comm comm, h5io_staged *s);

/* The whole text file path written by fill(f, arg) (non-zero: failed),
 * atomically; rank 0 alone. RA_ERR_IO naming path on any failure, the
 * earlier file kept. */
ra_status h5io_text_write(const char *path, int force,
                          int (*fill)(FILE *, const void *), const void *arg);

/* ra_h5_write_outputs() up to, not including, the rename: on RA_OK the
 * complete output lies under a temporary name in *staged (every rank), for
 * h5io_publish() or h5io_discard(). */
ra_status h5io_write_outputs_staged(MPI_Comm comm, const char *path,
                                    int force, const ra_shape *shape,
                                    const ra_run_meta *meta, const float *o,
                                    const float *lse, h5io_staged *staged);

/* One file named on a command line, for h5io_paths_check(). */
typedef struct {
    const char *option; /* "--out", "--json" */
    const char *path;   /* NULL: not given */
    int output;         /* written (1) or read (0) */
} h5io_named_path;

/* Refuses two entries of list (ended by an entry whose option is NULL)
 * of which at least one is an output and that name the same file: by
 * device and inode when both exist (links of any kind), else by their
 * normalised absolute paths ("./t.out" is "t.out"). RA_ERR_ARG with one
 * line naming both options and paths. Not collective; call before any
 * work. */
ra_status h5io_paths_check(const h5io_named_path *list);

/* Lists the stale temporary files (owner gone, see io/tmpfile.c) of the
 * directory of path to out, under a heading; prints nothing when none. */
void h5io_tmp_list(const char *path, FILE *out);

/* Prints every dataset (path, shape, dtype) and every root attribute
 * (name = value) of the file to out, in aligned columns, then the stale
 * temporary files of its directory (h5io_tmp_list). */
ra_status h5io_info(const char *path, FILE *out);

#endif /* RA_H5IO_H */
