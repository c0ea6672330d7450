/* record.c: the one place that says how an output was made: every option
 * that changed the result, written as root attributes by every mode (run,
 * run --mha), so that `info` shows them and `verify` follows them. */
#include <math.h>
#include <string.h>

#include "h5io.h"
#include "h5util.h"
#include "internal.h"
#include "score_features.h"

/* The rules of the forward pass: mask, window, score and its one
 * parameter (scale for dot, sigma for gaussian; the other is not
 * recorded, since it was not applied), every score feature's value
 * (0: off) and the sinks' dataset ("" without sinks), the layout over ranks, the
 * precision and how K/V travelled (wire: "bf16" means rounded). */
static ra_status record_rules(MPI_Comm comm, hid_t file, const char *path,
                              const h5io_recipe *r)
{
    const ra_params *p = r->params;
    ra_status st;
    if ((st = h5io_attr_write_int(comm, file, path, "causal", p->num.causal)) !=
            RA_OK ||
        (st = h5io_attr_write_int(comm, file, path, "window",
                                  p->num.window ? 1 : 0)) != RA_OK ||
        (st = h5io_attr_write_int64(comm, file, path, "window_left",
                                    p->num.window_left)) != RA_OK ||
        (st = h5io_attr_write_int64(comm, file, path, "window_right",
                                    p->num.window_right)) != RA_OK ||
        (st = h5io_attr_write_string(comm, file, path, "score",
                                     ra_score_name(p->num.score))) != RA_OK ||
        (st = h5io_attr_write_string(comm, file, path, "layout",
                                     ra_layout_name(ra_params_layout(p, 0)))) !=
            RA_OK ||
        (st = h5io_attr_write_int(comm, file, path, "ranks", r->nranks)) !=
            RA_OK ||
        (st = h5io_attr_write_string(comm, file, path, "strategy",
                                     ra_strategy_name(p->exec.strategy))) !=
            RA_OK ||
        (st = h5io_attr_write_string(comm, file, path, "precision",
                                     ra_precision_name(p->num.precision))) !=
            RA_OK ||
        (st = h5io_attr_write_string(comm, file, path, "wire",
                                     ra_params_wire_bf16(p) ? "bf16"
                                                            : "fp32")) != RA_OK)
        return st;
    for (int i = 0; i < ra_score_feature_count; i++)
        if ((st = h5io_attr_write_double(comm, file, path,
                                         ra_score_features[i].name,
                                         ra_feature_get(&p->num, i))) != RA_OK)
            return st;
    if ((st = h5io_attr_write_string(comm, file, path, "sinks_dataset",
                                     p->num.sinks && r->source &&
                                             r->source->sinks
                                         ? r->source->sinks
                                         : "")) != RA_OK)
        return st;
    if (p->num.score == RA_SCORE_DOT)
        st = h5io_attr_write_double(comm, file, path, "scale", r->scale);
    else if (p->num.score == RA_SCORE_GAUSSIAN)
        st = h5io_attr_write_double(comm, file, path, "sigma", p->num.sigma);
    return st;
}

/* The mask datasets applied (those src names), one attribute each. */
static ra_status record_masks(MPI_Comm comm, hid_t file, const char *path,
                              const ra_h5_source *src)
{
    const char *const names[5] = {src->q_lens, src->kv_lens, src->segments,
                                  src->q_segments, src->kv_segments};
    static const char *const attrs[5] = {
        "q_lens_dataset", "kv_lens_dataset", "segments_dataset",
        "q_segments_dataset", "kv_segments_dataset"};
    ra_status st = RA_OK;
    for (int i = 0; i < 5 && st == RA_OK; i++)
        if (names[i])
            st = h5io_attr_write_string(comm, file, path, attrs[i], names[i]);
    return st;
}

/* The data: the input datasets read and the order of those without an
 * axes attribute, the mask datasets applied, the output's type and
 * storage, the fingerprint of the values read. */
static ra_status record_data(MPI_Comm comm, hid_t file, const char *path,
                             const h5io_recipe *r)
{
    const ra_h5_source *src = r->source;
    const char *names[3] = {src && src->q ? src->q : "/q",
                            src && src->k ? src->k : "/k",
                            src && src->v ? src->v : "/v"};
    static const char *const attrs[3] = {"q_dataset", "k_dataset",
                                         "v_dataset"};
    ra_status st = RA_OK;
    if (r->has_qkv)
        st = h5io_attr_write_string(comm, file, path, "qkv_layout",
                                    h5io_qkv_layout_name(
                                        src ? src->axes : RA_AXES_NONE));
    for (int i = 0; i < 3 && st == RA_OK && r->has_qkv; i++)
        st = h5io_attr_write_string(comm, file, path, attrs[i], names[i]);
    if (st == RA_OK && r->masks)
        st = h5io_attr_write_string(comm, file, path, "masks", r->masks);
    if (st == RA_OK && src)
        st = record_masks(comm, file, path, src);
    if (st == RA_OK)
        st = h5io_attr_write_string(comm, file, path, "out_dtype",
                                    ra_dtype_name(r->out_dtype));
    if (st == RA_OK)
        st = h5io_attr_write_int64(comm, file, path, "out_chunk",
                                   r->out_chunk);
    if (st == RA_OK)
        st = h5io_attr_write_int(comm, file, path, "out_compress",
                                 r->out_compress);
    if (st == RA_OK && r->out_group)
        st = h5io_attr_write_string(comm, file, path, "out_group",
                                    r->out_group);
    if (st == RA_OK && r->fingerprint)
        st = h5io_attr_write_string(comm, file, path, "fingerprint",
                                    r->fingerprint);
    return st;
}

/* The positional encodings: RoPE's pairing and base, ALiBi on and where
 * its slopes came from ("standard", "/alibi_slopes" or ""), and where the
 * queries sit for them and the masks (align: "tensor" or "sequence"). */
static ra_status record_posenc(MPI_Comm comm, hid_t file, const char *path,
                                const ra_params *p)
{
    ra_status st;
    if ((st = h5io_attr_write_string(comm, file, path, "rope",
                                     ra_rope_name(p->num.rope))) != RA_OK ||
        (st = h5io_attr_write_double(comm, file, path, "rope_base",
                                     p->num.rope_base)) != RA_OK ||
        (st = h5io_attr_write_int(comm, file, path, "alibi",
                                  p->num.alibi ? 1 : 0)) != RA_OK ||
        (st = h5io_attr_write_string(comm, file, path, "align",
                                     ra_align_name(p->num.align))) != RA_OK)
        return st;
    return h5io_attr_write_string(comm, file, path, "alibi_slopes",
                                  !p->num.alibi         ? ""
                                  : p->num.alibi_slopes ? "/alibi_slopes"
                                                        : "standard");
}

ra_status h5io_record(MPI_Comm comm, hid_t file, const char *path,
                      const h5io_recipe *r)
{
    ra_status st;
    if ((st = h5io_attr_write_string(comm, file, path, "engine_version",
                                     RA_VERSION_STRING)) != RA_OK ||
        (st = h5io_attr_write_int(comm, file, path, "schema_version",
                                  RA_SCHEMA_VERSION)) != RA_OK ||
        (st = h5io_attr_write_string(comm, file, path, "kind",
                                     r->kind)) != RA_OK ||
        (st = record_rules(comm, file, path, r)) != RA_OK ||
        (st = record_posenc(comm, file, path, r->params)) != RA_OK ||
        (st = record_data(comm, file, path, r)) != RA_OK)
        return st;
    return h5io_attr_write_string(comm, file, path, "command_line",
                                  r->command_line ? r->command_line : "");
}

/* A little-endian 16-bit float: sign at bit 15, ebits exponent bits with
 * the IEEE bias, the rest significand. */
static hid_t float16_type(size_t ebits)
{
    const size_t mbits = 15 - ebits;
    hid_t t = H5Tcopy(H5T_IEEE_F32LE);
    if (t < 0)
        return t;
    if (H5Tset_fields(t, 15, mbits, ebits, 0, mbits) < 0 ||
        H5Tset_offset(t, 0) < 0 || H5Tset_precision(t, 16) < 0 ||
        H5Tset_size(t, 2) < 0 ||
        H5Tset_ebias(t, ((size_t)1 << (ebits - 1)) - 1) < 0) {
        H5Tclose(t);
        return H5I_INVALID_HID;
    }
    return t;
}

hid_t h5io_dtype_file_type(ra_dtype dtype)
{
    switch (dtype) {
    case RA_DTYPE_F16: return float16_type(5);
    case RA_DTYPE_BF16: return float16_type(8);
    case RA_DTYPE_F64: return H5Tcopy(H5T_IEEE_F64LE);
    case RA_DTYPE_F32:
    default: return H5Tcopy(H5T_IEEE_F32LE);
    }
}
