/* masks.c: parallel reading of the optional mask datasets of an input file:
 * padding lengths /q_lens, /kv_lens (B,), read whole by every rank, and
 * packed-sequence ids /q_segments (B, N), /kv_segments (B, M) or /segments
 * (B, N) for both when N == M, each rank reading only its layout slice. */
#include <stdlib.h>
#include <string.h>

#include "h5io.h"
#include "h5util.h"
#include "internal.h"

enum { Q_LENS, KV_LENS, Q_SEGMENTS, KV_SEGMENTS, SEGMENTS, NMASKS };

static const char *const default_names[NMASKS] = {
    "/q_lens", "/kv_lens", "/q_segments", "/kv_segments", "/segments"};

/* The dataset of each mask, whether the caller named it (then it must
 * exist), and the reads' tuning. */
typedef struct {
    const char *name[NMASKS];
    int required[NMASKS];
    const ra_h5_tuning *tuning;
} mask_set;

static mask_set names_resolve(const ra_h5_source *src)
{
    const char *given[NMASKS] = {
        src ? src->q_lens : NULL, src ? src->kv_lens : NULL,
        src ? src->q_segments : NULL, src ? src->kv_segments : NULL,
        src ? src->segments : NULL};
    mask_set n;
    n.tuning = src ? src->tuning : NULL;
    for (int i = 0; i < NMASKS; i++) {
        n.name[i] = given[i] ? given[i] : default_names[i];
        n.required[i] = given[i] != NULL;
    }
    return n;
}

/* What one mask dataset must look like and where this rank's part goes. */
typedef struct {
    int present;
    int rank;          /* 1 for lens, 2 for segments */
    hsize_t want[2];   /* (B,) or (B, len) */
    const char *legend;
    ra_slice slice;    /* lens: the whole axis 0; segments: axis 1 */
    hid_t dset;
    int unsigned64;    /* stored as an unsigned 64-bit integer: read as
                          such, then every value checked against int64 */
    int64_t *buf;      /* (B) or (B, slice.count) */
} mask_spec;

/* This rank's part of every present mask, and the keys' copy of
 * /segments, carved out of one block (ra_carve_alloc): lens (B), segment
 * ids (B, slice.count); never NULL, so a rank with no tokens still holds a
 * present mask. */
static void masks_carve(void *arg, ra_carver *c)
{
    mask_spec *m = arg;
    for (int i = 0; i < NMASKS; i++)
        if (m[i].present || (i == KV_SEGMENTS && m[SEGMENTS].present))
            m[i].buf = ra_carve(c, ra_mul_checked(m[i].rank == 2 ?
                                                  (int64_t)m[i].want[0] : 1,
                                                  m[i].slice.count),
                                sizeof(int64_t));
}

/* Checks which datasets are present and that they form an allowed set. */
static ra_status masks_presence(hid_t file, const char *path,
                                const mask_set *nm, const ra_shape *s,
                                mask_spec *m)
{
    const char *const *mask_names = nm->name;
    for (int i = 0; i < NMASKS; i++) {
        m[i].present = H5Lexists(file, mask_names[i], H5P_DEFAULT) > 0;
        if (nm->required[i] && !m[i].present)
            return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: not found",
                                path, mask_names[i]);
    }
    if (m[SEGMENTS].present && (m[Q_SEGMENTS].present ||
                                m[KV_SEGMENTS].present))
        return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: present "
                            "together with %s; give one for both or one "
                            "for each side", path, mask_names[SEGMENTS],
                            mask_names[m[Q_SEGMENTS].present ? Q_SEGMENTS
                                                             : KV_SEGMENTS]);
    if (m[SEGMENTS].present && s->N != s->M)
        return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: stands for "
                            "both queries and keys, so needs N == M, found "
                            "N = %lld, M = %lld; give /q_segments and "
                            "/kv_segments instead", path, mask_names[SEGMENTS],
                            (long long)s->N, (long long)s->M);
    if (m[Q_SEGMENTS].present != m[KV_SEGMENTS].present)
        return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: present without "
                            "%s; give both or neither", path,
                            mask_names[m[Q_SEGMENTS].present ? Q_SEGMENTS
                                                             : KV_SEGMENTS],
                            mask_names[m[Q_SEGMENTS].present ? KV_SEGMENTS
                                                             : Q_SEGMENTS]);
    return RA_OK;
}

/* Integers wider than 64 bits are refused; unsigned 64-bit ones are read
 * as such and checked value by value (mask_values_check), since HDF5's
 * conversion to int64 would clamp every value above INT64_MAX to it and
 * so merge distinct ids. */
static ra_status mask_int_type(const char *path, const char *name,
                               mask_spec *m)
{
    const hid_t type = H5Dget_type(m->dset);
    const size_t size = type >= 0 ? H5Tget_size(type) : 0;
    const H5T_sign_t sign = type >= 0 ? H5Tget_sign(type) : H5T_SGN_ERROR;
    if (type >= 0)
        H5Tclose(type);
    if (size == 0 || sign == H5T_SGN_ERROR)
        return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: cannot read its "
                            "integer type", path, name);
    if (size > sizeof(int64_t))
        return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: a %zu-bit "
                            "integer, wider than int64", path, name,
                            size * 8);
    m->unsigned64 = sign == H5T_SGN_NONE && size == sizeof(int64_t);
    return RA_OK;
}

/* For a mask stored as uint64 (read bit for bit into int64): every value
 * must be at most INT64_MAX, else it cannot be compared exactly. */
static ra_status mask_values_check(const char *path, const char *name,
                                   const mask_spec *m)
{
    const int64_t n = ra_mul_checked(m->rank == 2 ? (int64_t)m->want[0] : 1,
                                     m->slice.count);
    for (int64_t i = 0; m->unsigned64 && i < n; i++)
        if (m->buf[i] < 0)
            return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: value %llu "
                                "is beyond int64 (at most %lld); ids and "
                                "lengths must fit in a signed 64-bit "
                                "integer", path, name,
                                (unsigned long long)(uint64_t)m->buf[i],
                                (long long)INT64_MAX);
    return RA_OK;
}

/* Opens a present dataset and checks its class and shape. */
static ra_status mask_open(hid_t file, const char *path, const char *name,
                           mask_spec *m)
{
    hsize_t dims[2];
    char found[64], want[64];
    ra_status st;

    if ((st = h5io_dset_open(file, path, name, H5T_INTEGER, m->rank, dims,
                             &m->dset)) != RA_OK ||
        (st = mask_int_type(path, name, m)) != RA_OK)
        return st;
    for (int i = 0; i < m->rank; i++) {
        if (dims[i] != m->want[i]) {
            h5io_dims_format(dims, m->rank, found, sizeof found);
            h5io_dims_format(m->want, m->rank, want, sizeof want);
            return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: expected "
                                "shape %s = %s, found %s", path, name,
                                m->legend, want, found);
        }
    }
    return RA_OK;
}

/* Checks that every length lies in [0, len]. */
static ra_status lens_check(const char *path, const char *name,
                            const char *letter, int64_t len,
                            const int64_t *lens, int64_t B)
{
    for (int64_t b = 0; b < B; b++)
        if (lens[b] < 0 || lens[b] > len)
            return ra_error_set(RA_ERR_INPUT, "%s: dataset %s: value %lld at "
                                "index %lld is outside [0, %s=%lld]", path,
                                name, (long long)lens[b], (long long)b, letter,
                                (long long)len);
    return RA_OK;
}

/* What each mask dataset must look like and which part this rank reads. */
static void masks_plan(const ra_shape *s, ra_slice sq, ra_slice sk,
                       mask_spec *m)
{
    for (int i = 0; i < NMASKS; i++) {
        const int seg = i >= Q_SEGMENTS, kv = i == KV_LENS || i == KV_SEGMENTS;
        m[i].rank = seg ? 2 : 1;
        m[i].want[0] = (hsize_t)s->B;
        m[i].want[1] = (hsize_t)(kv ? s->M : s->N);
        m[i].legend = !seg ? "(B,)" : kv ? "(B, M)" : "(B, N)";
        m[i].slice = seg ? (kv ? sk : sq)
                         : h5io_slice_range((ra_range){0, s->B});
        m[i].dset = H5I_INVALID_HID;
    }
}

/* Step 2 of masks_read(): opens and checks the present datasets and
 * allocates this rank's parts in *block (not collective). */
static ra_status masks_open(hid_t file, const char *path,
                            const char *const *mask_names, mask_spec *m,
                            void **block)
{
    int any = 0;
    for (int i = 0; i < NMASKS; i++) {
        if (!m[i].present)
            continue;
        const ra_status st = mask_open(file, path, mask_names[i], &m[i]);
        if (st != RA_OK)
            return st;
        any = 1;
    }
    if (any && !(*block = ra_carve_alloc(masks_carve, m)))
        return ra_error_set(RA_ERR_NOMEM, "%s: cannot allocate this rank's "
                            "part of the masks", path);
    return RA_OK;
}

/* Step 3's end: the keys' copy of /segments and the range of the lengths
 * (every rank holds the same lengths, so reaches the same verdict). */
static ra_status masks_finish(const char *path,
                              const char *const *mask_names,
                              const ra_shape *s, ra_slice sk, mask_spec *m)
{
    if (m[SEGMENTS].present) /* with N == M the q and kv slices are equal */
        memcpy(m[KV_SEGMENTS].buf, m[SEGMENTS].buf,
               (size_t)ra_mul_checked(s->B, sk.count) *
                   sizeof *m[SEGMENTS].buf);
    ra_status st = RA_OK;
    for (int i = 0; i < NMASKS && st == RA_OK; i++)
        if (m[i].present)
            st = mask_values_check(path, mask_names[i], &m[i]);
    if (st == RA_OK && m[Q_LENS].present)
        st = lens_check(path, mask_names[Q_LENS], "N", s->N, m[Q_LENS].buf,
                        s->B);
    if (st == RA_OK && m[KV_LENS].present)
        st = lens_check(path, mask_names[KV_LENS], "M", s->M, m[KV_LENS].buf,
                        s->B);
    return st;
}

/* The collective body of ra_h5_read_masks(): every rank returns the same
 * status. m[i].buf receives the present masks (with /segments, also
 * m[KV_SEGMENTS].buf, a copy), all in *block, which the caller owns, on
 * failure too. */
static ra_status masks_read(MPI_Comm comm, const char *path,
                            const mask_set *nm, const ra_shape *s,
                            ra_layout layout, ra_band cut, mask_spec *m,
                            void **block)
{
    const char *const *mask_names = nm->name;
    h5io_reader in = {H5I_INVALID_HID, H5I_INVALID_HID, H5I_INVALID_HID};
    ra_slice sq, sk;
    ra_status st = h5io_rank_slices(comm, path, layout, cut, s, &sq, &sk);
    if (st != RA_OK)
        return st;
    masks_plan(s, sq, sk, m);

    /* step 1: open the file; which masks are there (same on every rank) */
    st = h5io_reader_open(comm, path, nm->tuning, &in);
    if ((st = ra_agree(comm, st)) != RA_OK ||
        (st = ra_agree(comm, masks_presence(in.file, path, nm, s,
                                            m))) != RA_OK)
        goto cleanup;

    /* step 2: open and check the present datasets, allocate their parts */
    if ((st = ra_agree(comm, masks_open(in.file, path, mask_names, m,
                                        block))) != RA_OK)
        goto cleanup;

    /* step 3: collective reads, then the range of the lengths */
    for (int i = 0; i < NMASKS && st == RA_OK; i++)
        if (m[i].present)
            st = h5io_dset_read(
                m[i].dset, in.dxpl, path, mask_names[i],
                &(h5io_region){m[i].unsigned64 ? H5T_NATIVE_UINT64
                                               : H5T_NATIVE_INT64,
                               m[i].rank, m[i].want, m[i].rank - 1,
                               &m[i].slice},
                m[i].buf);
    if ((st = ra_agree(comm, st)) == RA_OK)
        st = masks_finish(path, mask_names, s, sk, m);

cleanup:
    for (int i = 0; i < NMASKS; i++)
        if (m[i].dset >= 0)
            H5Dclose(m[i].dset);
    return h5io_reader_close(&in, path, st);
}

ra_status ra_h5_read_masks(MPI_Comm comm, const char *path,
                           const ra_h5_source *src, const ra_shape *shape,
                           ra_layout layout, const ra_numerics *num,
                           ra_h5_masks *masks)
{
    ra_error_clear();
    const mask_set nm = names_resolve(src);
    mask_spec m[NMASKS];
    h5io_quiet quiet;
    ra_status st = ra_comm_usable(comm, "ra_h5_read_masks");
    if (st != RA_OK)
        return st;
    if (masks)
        memset(masks, 0, sizeof *masks);
    if (!path || !masks)
        st = ra_error_set(RA_ERR_ARG, "ra_h5_read_masks: path and masks are "
                          "required");
    memset(m, 0, sizeof m);
    if (st == RA_OK)
        st = h5io_slices_check(path, shape, layout);
    if ((st = ra_agree(comm, st)) != RA_OK)
        return st;

    h5io_quiet_begin(&quiet);
    ra_params p;
    ra_params_join(num, NULL, &p);
    st = ra_agree(comm, masks_read(comm, path, &nm, shape, layout,
                                   ra_cut_band(&p), m, &masks->block));
    h5io_quiet_end(&quiet);
    if (st != RA_OK) {
        ra_h5_masks_free(masks);
        return st;
    }
    masks->q_lens = m[Q_LENS].buf;
    masks->kv_lens = m[KV_LENS].buf;
    masks->q_segments = m[SEGMENTS].buf ? m[SEGMENTS].buf : m[Q_SEGMENTS].buf;
    masks->kv_segments = m[KV_SEGMENTS].buf;
    masks->view.q_lens = masks->q_lens;
    masks->view.kv_lens = masks->kv_lens;
    masks->view.q_segments = masks->q_segments;
    masks->view.kv_segments = masks->kv_segments;
    return RA_OK;
}

void ra_h5_masks_free(ra_h5_masks *masks)
{
    if (!masks)
        return;
    free(masks->block);
    memset(masks, 0, sizeof *masks);
}
