/* fingerprint.c: what a forward output was computed from, as one text
 * attribute `fingerprint`: the input file, and per dataset read (q, k, v,
 * the masks, the additive weights, explicit ALiBi slopes) its name and a
 * 64-bit content hash of the float32 (or int64) values the engine used.
 * `run --backward --fwd` computes the same text from its own input and
 * refuses a forward whose hashes differ. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "h5io.h"
#include "h5util.h"
#include "hash.h"
#include "internal.h"

/* A tensor of rows of row_bytes, (B, slice.count) of them on this rank,
 * slice giving their positions along an axis of length len; x NULL when
 * the dataset is absent. */
typedef struct {
    const void *x;
    size_t row_bytes;
    int64_t B, len;
    ra_slice slice;
} h5io_fp_rows;

/* Sum (mod 2^64) over this rank's tokens of the hash of each token's row
 * (row_bytes of data, rows (B, slice->count) in order) seeded with its
 * global index b * len + position: the same for any P and layout, since
 * each token's term depends on its position only. */
static uint64_t rows_hash(const void *x, size_t row_bytes, int64_t B,
                          int64_t len, const ra_slice *slice)
{
    const unsigned char *p = x;
    uint64_t sum = 0;
    for (int64_t b = 0; b < B; b++)
        for (int r = 0; r < slice->nruns; r++)
            for (int64_t i = 0; i < slice->run[r].count; i++) {
                const int64_t pos = slice->run[r].start +
                                    i * slice->run[r].stride;
                sum += ra_hash64(p, row_bytes, (uint64_t)(b * len + pos));
                p += row_bytes;
            }
    return sum;
}

/* One line "key=NAME HEX" (or "key=none" when x is NULL) appended to
 * text[len]; rows_hash over every rank, combined by a modular sum. */
static ra_status line_rows(MPI_Comm comm, const char *key, const char *name,
                           const h5io_fp_rows *rows, char *text, size_t len)
{
    uint64_t mine = rows->x ? rows_hash(rows->x, rows->row_bytes, rows->B,
                                        rows->len, &rows->slice) : 0, all;
    if (MPI_Allreduce(&mine, &all, 1, MPI_UINT64_T, MPI_SUM, comm) !=
        MPI_SUCCESS)
        return ra_error_set(RA_ERR_MPI, "fingerprint: MPI_Allreduce failed");
    const size_t used = strlen(text);
    if (rows->x)
        snprintf(text + used, len - used, "%s=%s %016llx\n", key, name,
                 (unsigned long long)all);
    else
        snprintf(text + used, len - used, "%s=none\n", key);
    return RA_OK;
}

/* A line for an array every rank holds whole (lens, weights, slopes). */
static void line_whole(const char *key, const char *name, const void *x,
                       size_t bytes, char *text, size_t len)
{
    const size_t used = strlen(text);
    if (x)
        snprintf(text + used, len - used, "%s=%s %016llx\n", key, name,
                 (unsigned long long)ra_hash64(x, bytes, 0));
    else
        snprintf(text + used, len - used, "%s=none\n", key);
}

/* The additive weights and explicit ALiBi slopes, hashed in one line
 * each. */
static void lines_params(const ra_shape *s, const ra_params *p, char *text,
                         size_t len)
{
    const ra_additive *ad =
        p->num.score == RA_SCORE_ADDITIVE ? p->num.additive : NULL;
    uint64_t h = 0;
    if (ad) {
        h = ra_hash64(ad->w_q, sizeof(float) * (size_t)(ad->A * s->D), 1);
        h ^= ra_hash64(ad->w_k, sizeof(float) *
                                    (size_t)(ad->A * ra_shape_dk(s)), 2);
        h ^= ra_hash64(ad->w_v, sizeof(float) * (size_t)ad->A, 3);
    }
    line_whole("additive", "/additive", ad ? &h : NULL, sizeof h, text, len);
    line_whole("alibi_slopes", "/alibi_slopes",
               p->num.alibi ? p->num.alibi_slopes : NULL,
               sizeof(double) * (size_t)s->H, text, len);
}

ra_status h5io_fingerprint_make(MPI_Comm comm, const h5io_fp_source *src,
                                char *text, size_t len)
{
    const ra_shape *s = src->shape;
    const h5io_fp_rows rows[5] = {
        {src->q, sizeof(float) * (size_t)(s->H * s->D), s->B, s->N, src->qs},
        {src->k, sizeof(float) * (size_t)(s->G * ra_shape_dk(s)), s->B, s->M,
         src->ks},
        {src->v, sizeof(float) * (size_t)(s->G * s->Dv), s->B, s->M, src->ks},
        {src->masks->q_segments, sizeof(int64_t), s->B, s->N, src->qs},
        {src->masks->kv_segments, sizeof(int64_t), s->B, s->M, src->ks}};
    static const char *const keys[5] = {"q", "k", "v", "q_segments",
                                        "kv_segments"};
    char where[PATH_MAX];
    ra_status st = RA_OK;
    snprintf(text, len, "input=%s\n",
             realpath(src->in, where) ? where : src->in);
    for (int i = 0; i < 5 && st == RA_OK; i++)
        st = line_rows(comm, keys[i], src->names[i], &rows[i], text, len);
    if (st != RA_OK)
        return st;
    line_whole("q_lens", src->names[5], src->masks->q_lens,
               sizeof(int64_t) * (size_t)s->B, text, len);
    line_whole("kv_lens", src->names[6], src->masks->kv_lens,
               sizeof(int64_t) * (size_t)s->B, text, len);
    lines_params(s, src->params, text, len);
    if (strlen(text) + 1 >= len)
        return ra_error_set(RA_ERR_ARG, "fingerprint: the dataset names do "
                            "not fit in %zu characters", len);
    return RA_OK;
}

ra_status h5io_fingerprint_read(const char *path, char *text, size_t len)
{
    hid_t file = H5I_INVALID_HID;
    h5io_quiet quiet;
    h5io_quiet_begin(&quiet);
    text[0] = '\0';
    ra_status st = h5io_file_open(path, H5P_DEFAULT, &file);
    if (st == RA_OK)
        st = h5io_attr_read_string(file, path, "fingerprint", text, len);
    if (file >= 0)
        H5Fclose(file);
    h5io_quiet_end(&quiet);
    if (st == RA_OK && !text[0])
        st = ra_error_set(RA_ERR_INPUT, "%s: no attribute fingerprint (a "
                          "forward output of an older ringattn): nothing "
                          "ties it to this input; rerun the forward, or pass "
                          "--recompute", path);
    return st;
}

/* The value of line key in text ("NAME HEX" or "none") into out[len];
 * "" when text has no such line. */
static void fp_value(const char *text, const char *key, char *out,
                     size_t len)
{
    const size_t klen = strlen(key);
    out[0] = '\0';
    for (const char *l = text; l && *l; l = strchr(l, '\n'), l = l ? l + 1
                                                                  : NULL)
        if (strncmp(l, key, klen) == 0 && l[klen] == '=') {
            const char *v = l + klen + 1, *end = strchr(v, '\n');
            const size_t n = end ? (size_t)(end - v) : strlen(v);
            snprintf(out, len, "%.*s", (int)(n < len ? n : len - 1), v);
            return;
        }
}

/* The hash of a value "NAME HEX", or the whole value ("none", ""). */
static const char *fp_hash(const char *value)
{
    const char *sp = strrchr(value, ' ');
    return sp ? sp + 1 : value;
}

ra_status h5io_fingerprint_compare(const char *fwd, const char *recorded,
                                   const char *mine)
{
    static const char *const keys[] = {
        "q", "k", "v", "q_lens", "kv_lens", "q_segments", "kv_segments",
        "additive", "alibi_slopes"};
    char theirs[320], ours[320];
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        fp_value(recorded, keys[i], theirs, sizeof theirs);
        fp_value(mine, keys[i], ours, sizeof ours);
        if (strcmp(fp_hash(theirs), fp_hash(ours)) != 0)
            return ra_error_set(RA_ERR_INPUT, "%s: a forward output of other "
                                "data: attribute fingerprint: %s was %s, "
                                "this run's is %s", fwd, keys[i],
                                theirs[0] ? theirs : "not recorded", ours);
    }
    return RA_OK;
}
