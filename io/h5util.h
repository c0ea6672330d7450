/* h5util.h: plumbing shared by the files of io/ only.
 *
 * Conventions: handles start as H5I_INVALID_HID and are closed on one
 * cleanup path; each function returning ra_status has set the error
 * message when the status is not RA_OK. */
#ifndef RA_H5UTIL_H
#define RA_H5UTIL_H

#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include <hdf5.h>
#include <mpi.h>

#include "agree.h"
#include "h5io.h"

/* The HDF5 error printer of the caller, saved while io/ silences it so that
 * failures surface only through ra_error_message(). */
typedef struct {
    H5E_auto2_t func;
    void *data;
} h5io_quiet;

void h5io_quiet_begin(h5io_quiet *saved);
void h5io_quiet_end(const h5io_quiet *saved);

/* The description of the most specific error on the HDF5 error stack of
 * this thread (e.g. "truncated file: eof = ..."), into buf[H5IO_DETAIL_LEN];
 * "no detail" when the stack is empty. Call right after the failing call. */
#define H5IO_DETAIL_LEN 200
void h5io_error_detail(char *buf);

/* New property lists (caller closes): MPI-IO file access over comm with
 * collective metadata and the tuning t (NULL: none; io/tuning.c), and
 * collective transfers. Negative on failure. */
hid_t h5io_fapl_mpio(MPI_Comm comm, const ra_h5_tuning *t);
hid_t h5io_dxpl_collective(void);
/* A property list whose set-up returned set: plist itself when set >= 0,
 * else closed and negative. Ends every maker of a property list. */
hid_t h5io_plist_keep(hid_t plist, herr_t set);
/* Sets MPI-IO over comm on a file-access list, with collective metadata and
 * the tuning t (NULL: none; checked by h5io_tuning_check). Negative on
 * failure. */
herr_t h5io_fapl_tune(hid_t fapl, MPI_Comm comm, const ra_h5_tuning *t);

/* Opens an existing file read-only with the given access list; explains a
 * missing, unreadable or non-HDF5 file. */
ra_status h5io_file_open(const char *path, hid_t fapl, hid_t *file);

/* An input file open for collective reading: the file, its access list
 * and the collective transfer list to read its datasets with. */
typedef struct {
    hid_t file, fapl, dxpl;
} h5io_reader;

/* Opens path read-only with MPI-IO over comm under the tuning t (NULL:
 * none), collective, not agreed; refuses a bad tuning and explains a
 * failure like h5io_file_open. Whatever it returns, *r is ready for
 * h5io_reader_close. */
ra_status h5io_reader_open(MPI_Comm comm, const char *path,
                           const ra_h5_tuning *t, h5io_reader *r);

/* Closes what h5io_reader_open made. Returns st, the status so far, or
 * RA_ERR_IO when st was RA_OK and closing the file failed. */
ra_status h5io_reader_close(h5io_reader *r, const char *path, ra_status st);

/* Opens dataset name (e.g. "/q") and checks that it has the given rank,
 * every size positive, and a datatype of class cls: H5T_FLOAT means a
 * 16-, 32- or 64-bit float of any format and byte order HDF5 converts
 * (float16, bfloat16, float32, float64), H5T_INTEGER any integer. Fills dims[rank]. On RA_OK, *dset is
 * open (caller closes) unless dset is NULL. */
ra_status h5io_dset_open(hid_t file, const char *path, const char *name,
                         H5T_class_t cls, int rank, hsize_t *dims,
                         hid_t *dset);

/* Reads the optional single string attribute name of the object obj (a
 * file: its root; or a dataset), fixed or variable length, into out[len];
 * leaves out alone when it is absent. */
ra_status h5io_attr_read_string(hid_t obj, const char *path,
                                const char *name, char *out, size_t len);

/* The axis order of the open rank-4 input dataset dset: its "axes"
 * attribute ("B,N,H,D" or "B,H,N,D") when present, else fallback; any
 * other attribute value (the empty one too), and no attribute with the
 * fallback RA_AXES_NONE, are refused naming the file and the dataset. */
ra_status h5io_axes_of(hid_t dset, const char *path, const char *name,
                       ra_axes fallback, ra_axes *out);

/* The logical sizes (B, N, H, D) of file sizes fdims under an order. */
void h5io_axes_dims(ra_axes axes, const hsize_t fdims[4], hsize_t dims[4]);

/* This rank's region of a dataset: the dataset's rank and sizes dims, the
 * slice on axis and the whole of every other axis; in memory, elements of
 * mtype, dense (dims with slice->count on axis, the union of the slice's
 * runs in order) unless the function says otherwise. */
typedef struct {
    hid_t mtype;
    int rank;
    const hsize_t *dims;
    int axis;
    const ra_slice *slice;
} h5io_region;

/* The token axis of a rank-4 tensor stored in order axes (resolved): 1
 * for (B, N, H, D), else 2. */
int h5io_axes_token_axis(ra_axes axes);

/* Reads region rg of the open rank-4 dataset dset (its file sizes, the
 * slice on its token axis, h5io_axes_token_axis() of its order) into buf,
 * dense (B, slice->count, H, D) whatever the order: (B, H, N, D) storage
 * is read head by head through hyperslabs, with no full-tensor copy.
 * Collective with a collective dxpl, as h5io_dset_read(). */
ra_status h5io_dset_read_axes(hid_t dset, hid_t dxpl, const char *path,
                              const char *name, const h5io_region *rg,
                              void *buf);

/* Writes this rank's slice, dense (B, slice->count, H, D) in buf as mtype,
 * into the open rank-4 dataset dset stored heads-first with file sizes
 * fdims (B, H, N, D), head by head through hyperslabs. Collective with a
 * collective dxpl, every rank the same number of transfers. */
ra_status h5io_dset_write_heads(hid_t dset, hid_t dxpl, const char *path,
                                const char *name, hid_t mtype,
                                const hsize_t fdims[4], const ra_slice *slice,
                                const void *buf);

/* Formats dims as "(2, 128, 8, 64)" into buf. */
void h5io_dims_format(const hsize_t *dims, int rank, char *buf, size_t len);

/* Names a datatype the way numpy would: float32, int64, uint8, string... */
void h5io_type_name(hid_t type, char *buf, size_t len);

/* The slice of one contiguous range, [r.start, r.start + r.count). */
ra_slice h5io_slice_range(ra_range r);

/* Which way h5io_slice_transfer() moves the data. */
typedef enum { H5IO_READ, H5IO_WRITE } h5io_dir;

/* Moves region rg of the open dataset dset (dataspace fspace) between the
 * file and buf: reads it into buf (H5IO_READ) or writes it from buf
 * (H5IO_WRITE, which only reads buf). With transfer list dxpl
 * (collective: every rank calls it, empty slices too; buf may be NULL
 * when the slice is empty). A failed read is RA_ERR_INPUT (the file's
 * fault), a failed write RA_ERR_IO. */
ra_status h5io_slice_transfer(h5io_dir dir, hid_t dset, hid_t fspace,
                              hid_t dxpl, const char *path, const char *name,
                              const h5io_region *rg, void *buf);

/* Reads region rg of the open dataset dset into buf, with transfer list
 * dxpl (collective: every rank calls it, empty slices too). buf may be
 * NULL when the slice is empty. */
ra_status h5io_dset_read(hid_t dset, hid_t dxpl, const char *path,
                         const char *name, const h5io_region *rg, void *buf);

/* Creates dataset name of file type ftype and sizes rg->dims, and writes
 * this rank's region rg of it from buf; collective over comm (the file's
 * communicator), and every rank returns the same status (ra_agree), so
 * that a failure on one rank (a full disk) never leaves the others in the
 * next collective call. buf may be NULL when the slice is empty. A 4-D
 * dataset sliced on axis 1 is a (B, N, H, D) tensor and gets the attribute
 * axes = "B,N,H,D", so that readers need not be told its order; a 3-D one
 * sliced on axis 2 (lse) gets "B,H,N", a 4-D one on axis 2 (a map of query
 * rows over keys) "B,H,N,M". */
ra_status h5io_dset_write(MPI_Comm comm, hid_t file, const char *path,
                          const char *name, hid_t ftype,
                          const h5io_region *rg, const void *buf);

/* How a dataset is stored: chunk_rows > 0 cuts it into chunks of that
 * many tokens of the token axis, gzip 1..9 compresses them (parallel HDF5
 * 1.10.2 and later writes filtered chunks collectively); heads_first
 * stores a (B, N, H, D) tensor (4-D, tokens on axis 1) as (B, H, N, D),
 * its axes attribute saying so. */
typedef struct {
    int64_t chunk_rows;
    int gzip;
    int heads_first;
} h5io_storage;

/* h5io_dset_write() with a storage layout (NULL: contiguous). */
ra_status h5io_dset_write_stored(MPI_Comm comm, hid_t file, const char *path,
                                 const char *name, hid_t ftype,
                                 const h5io_region *rg, const void *buf,
                                 const h5io_storage *storage);

/* x[n] as 16-bit floats, rounded to nearest (ties to even): IEEE binary16
 * (brain 0) or bfloat16 (brain 1), the bits of h5io_dtype_file_type()'s
 * types. out may not alias x. */
void h5io_half_encode(const float *x, uint16_t *out, size_t n, int brain);

/* Refuses, before anything is written, a float32 tensor whose largest
 * finite |value| over all ranks of comm becomes infinite as a 16-bit float
 * (dtype fp16 or bf16; other dtypes pass): RA_ERR_IO naming path, the
 * dataset name and that value. x[n] is this rank's part; collective, the
 * same status on every rank. */
ra_status h5io_half_range_check(MPI_Comm comm, const char *path,
                                const char *name, ra_dtype dtype,
                                const float *x, size_t n);

/* The file type of a dtype (caller closes); negative on failure. bf16 is a
 * 16-bit float with float32's 8 exponent bits and bias. */
hid_t h5io_dtype_file_type(ra_dtype dtype);

/* Write a scalar root attribute; every rank must pass the same value;
 * collective over comm with an agreed status, as h5io_dset_write(). */
ra_status h5io_attr_write_int(MPI_Comm comm, hid_t file, const char *path,
                              const char *name, int value);
ra_status h5io_attr_write_int64(MPI_Comm comm, hid_t file, const char *path,
                                const char *name, int64_t value);
ra_status h5io_attr_write_uint64(MPI_Comm comm, hid_t file, const char *path,
                                 const char *name, uint64_t value);
ra_status h5io_attr_write_double(MPI_Comm comm, hid_t file, const char *path,
                                 const char *name, double value);
/* A variable-length UTF-8 string, which h5py reads as str (value may be
 * ""). */
ra_status h5io_attr_write_string(MPI_Comm comm, hid_t file, const char *path,
                                 const char *name, const char *value);

/* How an output was made: what h5io_record() writes. */
typedef struct {
    const char *kind;            /* "attention" (run) or "mha" (run --mha) */
    const ra_params *params;     /* the options of the forward pass */
    double scale;                /* the dot score's scale actually used */
    int nranks;
    int has_qkv;                 /* q, k, v were read from datasets */
    const ra_h5_source *source;  /* those datasets, or NULL: the defaults */
    const char *masks;           /* mask datasets applied, or NULL */
    ra_dtype out_dtype;
    int64_t out_chunk;
    int out_compress;
    const char *out_group;       /* or NULL: the root */
    const char *command_line;
    const char *fingerprint;     /* h5io_fingerprint_make's text, or NULL */
} h5io_recipe;

/* The one writer of the attributes that say how an output was made:
 * every option that changed the result (causal, window, score with its
 * scale or sigma, layout, ranks, datasets and their order, masks, output
 * type and storage) as root attributes; collective like
 * h5io_attr_write_int(). A new option that changes the result is recorded
 * here. */
ra_status h5io_record(MPI_Comm comm, hid_t file, const char *path,
                      const h5io_recipe *r);

/* Fills an open new file: this rank's part of every dataset, and the
 * attributes; returns this rank's status. */
typedef ra_status (*h5io_writer)(hid_t file, MPI_Comm comm, void *ctx);

/* What h5io_commit() writes: the destination, and the writer that fills
 * the open file with the same collective HDF5 calls on every rank.
 * reserve: the bytes of raw data the writer will write (the sizes of its
 * datasets), reserved on the temporary file before the writer runs; 0:
 * none. */
typedef struct {
    const char *path;
    int force;
    uint64_t reserve;
    h5io_writer writer;
    void *ctx;
    const ra_h5_tuning *tuning; /* the write's MPI-IO tuning, or NULL */
} h5io_job;

/* Rank 0: the output check of path (h5io_output_check() without inputs),
 * then a new, empty temporary file next to it (never following a symlink),
 * open for writing as *fd and published for the signal handler (atomic.c);
 * s holds both names. */
ra_status h5io_stage_create(h5io_staged *s, const char *path, int force,
                            int *fd);

/* Collective over the file's communicator, agreed: rank 0 reserves the
 * bytes [0, end) of the file open for writing on the file system, so that
 * writes below end cannot run out of room; a file system that cannot
 * reserve is let through (commit.c checks it afterwards). Called after a
 * dataset is created, with the end of its storage, before its data is
 * written. */
ra_status h5io_reserve_allocated(MPI_Comm comm, hid_t file, const char *path,
                                 uint64_t end);

/* What a file holds, object by object, as h5io_summary_take() lists it:
 * every group and dataset by path, its attribute count, and a dataset's
 * storage size. */
typedef struct h5io_summary h5io_summary;

/* Lists the objects of the open file (collective when the file is open
 * over MPI-IO: every rank calls it); NULL with a message on failure. */
h5io_summary *h5io_summary_take(hid_t file, const char *path);
void h5io_summary_free(h5io_summary *s);
/* The end of the furthest contiguous dataset's storage in the file. */
uint64_t h5io_summary_end(const h5io_summary *s);

/* Rank 0, after the file was closed: reads the temporary file tmp back
 * through the default driver and compares it with what the writer made
 * (want), object by object; cuts the file to its end of allocation (a
 * reservation may have left it longer); and checks that the file system
 * holds at least the datasets' bytes (a sparse file means writes that were
 * lost). RA_ERR_IO naming path and the first difference otherwise. */
ra_status h5io_readback(const char *path, const char *tmp,
                        const h5io_summary *want);

/* Creates job->path atomically, collective over comm. Rank 0 refuses an
 * existing path unless force, makes an empty temporary file next to it and
 * reserves job->reserve bytes on it (a full file system is refused here,
 * before any data is written); every rank creates it as HDF5 with MPI-IO,
 * calls the writer and closes it, each step's status agreed over
 * all ranks; then rank 0 reads the file back (every object the writer made,
 * with its attribute count and storage size, and the room the file takes
 * on disk) before it fsyncs, renames it onto path and fsyncs the
 * directory. On any failure the temporary file is removed and path keeps
 * its earlier file. Every rank returns the same status and message. */
ra_status h5io_commit(MPI_Comm comm, const h5io_job *job);

/* h5io_commit() up to, not including, the rename: on RA_OK *staged (every
 * rank) holds the complete, verified temporary file for h5io_publish() or
 * h5io_discard(). */
ra_status h5io_commit_stage(MPI_Comm comm, const h5io_job *job,
                            h5io_staged *staged);

/* Splits an output path into its directory ("." when none) and its last
 * component; RA_ERR_ARG when the path names no file. */
ra_status h5io_path_split(const char *path, char *dir, size_t dirlen,
                          const char **base);

/* ---- temporary files (tmpfile.c) ---- */

/* A new temporary name for base in dir (out[PATH_MAX]), carrying this
 * process as its owner: DIR/.BASE.tmp.HOST.NS.PID.START.NONCE. */
ra_status h5io_tmp_name(const char *dir, const char *base, char *out);

/* Removes the temporary files of dir whose owner, on this host, is gone. */
void h5io_tmp_sweep(const char *dir);

/* Publishes a temporary file being written, for h5io_tmp_active(), and
 * withdraws it once it is renamed or removed. */
void h5io_tmp_publish(const char *tmp);
void h5io_tmp_unpublish(const char *tmp);

/* ---- the files an input depends on (deps.c) ---- */

/* Refuses, before dataset name of file path is opened, an external link on
 * its path whose target is not a regular file (opening a FIFO blocks). */
ra_status h5io_link_check(hid_t file, const char *path, const char *name);

/* Whether info may follow the soft or external link name (relative to
 * the root of file) to an object: it resolves, and no external link on its
 * way targets anything but a regular file. */
int h5io_link_followable(hid_t file, const char *path, const char *name);

/* Lists the soft and external links of file under a heading "links:", each
 * with its target and whether info followed it. */
void h5io_links_list(hid_t file, const char *path, FILE *out);

/* Refuses an open dataset whose external raw-data files are not regular or
 * hold fewer bytes than the dataset, or whose virtual-dataset source files
 * are missing or not regular: each would block or read as zeros. */
ra_status h5io_dset_deps_check(hid_t dset, const char *path, const char *name);

/* Every file the inputs read, by device and inode: each input, the targets
 * of its external links (walked in turn), its external raw-data files and
 * virtual-dataset sources, under every name HDF5 may resolve them to. */
#define H5IO_FILES_MAX 64
typedef struct {
    int count;
    char name[H5IO_FILES_MAX][PATH_MAX];
    uint64_t dev[H5IO_FILES_MAX], ino[H5IO_FILES_MAX];
} h5io_files;

ra_status h5io_input_files(const char *const *inputs, h5io_files *list);

#endif /* RA_H5UTIL_H */
