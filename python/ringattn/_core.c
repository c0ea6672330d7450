/* _core.c: the C side of `import ringattn` (private; the API is the Python
 * package around it). It hands the library the caller's own buffers:
 * ra_forward and ra_backward run on the memory of numpy arrays (and of
 * torch tensors seen through .numpy()) taken by the buffer protocol, with
 * the GIL released while the library runs. The communicator comes from
 * mpi4py's C API, the structs from ringattn.h itself, so nothing here
 * mirrors a struct layout.
 *
 * Contract with the Python layer (ringattn/_api.py): it has checked and
 * agreed over the ranks every dtype, contiguity and shape before it calls
 * forward() or backward(), so that a refusal here cannot leave the other
 * ranks in a collective. What this file refuses itself (a buffer of the
 * wrong format) is a programming error of that layer. Options travel as a
 * dict whose keys are the names of ra_numerics' and ra_exec's fields,
 * filled from defaults(), the library's own ra_numerics_default and
 * ra_exec_default. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include <mpi4py/mpi4py.h>
#include <ringattn.h>

/* ringattn.Error: a library error; .status names the ra_status. Its
 * subclasses ArgumentError (also a ValueError: an invalid argument or
 * input) and ArgumentTypeError (also a TypeError: an argument of the
 * wrong type, raised by the Python layer). */
static PyObject *core_error, *core_arg_error;

/* ---- options: one row per field, from the header's RA_OPTION_FIELDS -- */

/* The options of a call: what it computes and how it runs. */
typedef struct {
    ra_numerics num;
    ra_exec exec;
} core_opts;

/* The kinds of RA_OPTION_FIELDS. */
#define OPT_KINDS(K)                                                          \
    K(FLAG) K(INT) K(I64) K(REAL) K(LAYOUT) K(STRATEGY) K(SCORE) K(ROPE)      \
    K(GEMM) K(PRECISION) K(WIRE) K(ALIGN)

#define KIND_ENUM(kind) OPT_##kind,
typedef enum { OPT_KINDS(KIND_ENUM) } opt_kind;
#undef KIND_ENUM

/* Each kind's name, as fields() tells Python. */
#define KIND_NAME(kind) #kind,
static const char *const kind_names[] = {OPT_KINDS(KIND_NAME)};
#undef KIND_NAME

typedef struct {
    const char *name; /* the field's name, the dict's key */
    opt_kind kind;
    size_t offset;
} opt_row;

/* A row's field has its kind's C type (a row of the wrong kind fails to
 * compile). */
#define KIND_TYPE_FLAG int
#define KIND_TYPE_INT int
#define KIND_TYPE_I64 int64_t
#define KIND_TYPE_REAL double
#define KIND_TYPE_LAYOUT ra_layout
#define KIND_TYPE_STRATEGY ra_strategy
#define KIND_TYPE_SCORE ra_score
#define KIND_TYPE_ROPE ra_rope
#define KIND_TYPE_GEMM ra_gemm
#define KIND_TYPE_PRECISION ra_precision
#define KIND_TYPE_WIRE ra_wire
#define KIND_TYPE_ALIGN ra_align
#define OPT_CHECK(part, field, kind)                                          \
    _Static_assert(_Generic(((core_opts *)0)->part.field,                     \
                            KIND_TYPE_##kind: 1, default: 0),                 \
                   #field ": not of kind " #kind);
RA_OPTION_FIELDS(OPT_CHECK)
/* a score feature: a REAL of ra_numerics */
#define FEATURE_CHECK(field, option, meta, help) OPT_CHECK(num, field, REAL)
RA_SCORE_FEATURES(FEATURE_CHECK)
#undef FEATURE_CHECK
#undef OPT_CHECK

#define OPT_ROW(part, field, kind)                                            \
    {#field, OPT_##kind, offsetof(core_opts, part.field)},
#define FEATURE_ROW(field, option, meta, help) OPT_ROW(num, field, REAL)
static const opt_row opt_table[] = {
    RA_OPTION_FIELDS(OPT_ROW) RA_SCORE_FEATURES(FEATURE_ROW)};
#undef FEATURE_ROW
#undef OPT_ROW
#define OPT_COUNT (sizeof opt_table / sizeof opt_table[0])

/* Raises ringattn.Error carrying status st with message text (an
 * ArgumentError for an invalid argument or input); returns NULL. */
static PyObject *raise_message(ra_status st, const char *text)
{
    PyObject *cls = st == RA_ERR_ARG || st == RA_ERR_INPUT ? core_arg_error
                                                           : core_error;
    PyObject *exc = PyObject_CallFunction(cls, "s", text);
    PyObject *name = PyUnicode_FromString(ra_status_str(st));
    if (exc && name && PyObject_SetAttrString(exc, "status", name) == 0)
        PyErr_SetObject(cls, exc);
    Py_XDECREF(name);
    Py_XDECREF(exc);
    return NULL;
}

/* Raises the library's last error; returns NULL. */
static PyObject *raise_status(ra_status st)
{
    return raise_message(st, ra_error_message());
}

/* ra_align has no name functions in the library: its names here, as the
 * header's RA_ALIGN_TENSOR and RA_ALIGN_SEQUENCE say them. */
static const char *const align_names[] = {"tensor", "sequence"};

static ra_status align_parse(const char *name, ra_align *out)
{
    for (int i = 0; i < 2; i++)
        if (strcmp(name, align_names[i]) == 0) {
            *out = (ra_align)i;
            return RA_OK;
        }
    char text[160];
    snprintf(text, sizeof text, "align: unknown alignment '%.40s' (expected "
             "tensor or sequence)", name);
    raise_message(RA_ERR_ARG, text);
    return RA_ERR_ARG;
}

/* The name of an enum field's value. */
static const char *enum_name(opt_kind kind, const void *field)
{
    switch (kind) {
    case OPT_LAYOUT: return ra_layout_name(*(const ra_layout *)field);
    case OPT_STRATEGY: return ra_strategy_name(*(const ra_strategy *)field);
    case OPT_SCORE: return ra_score_name(*(const ra_score *)field);
    case OPT_GEMM: return ra_gemm_name(*(const ra_gemm *)field);
    case OPT_PRECISION:
        return ra_precision_name(*(const ra_precision *)field);
    case OPT_WIRE: return ra_wire_name(*(const ra_wire *)field);
    case OPT_ALIGN:
        return align_names[*(const ra_align *)field == RA_ALIGN_SEQUENCE];
    default: return ra_rope_name(*(const ra_rope *)field);
    }
}

/* Parses an enum field's name with the library's own parser; ALIGN's
 * refusal is raised already. */
static ra_status enum_parse(opt_kind kind, const char *name, void *field)
{
    switch (kind) {
    case OPT_LAYOUT: return ra_layout_parse(name, field);
    case OPT_STRATEGY: return ra_strategy_parse(name, field);
    case OPT_SCORE: return ra_score_parse(name, field);
    case OPT_GEMM: return ra_gemm_parse(name, field);
    case OPT_PRECISION: return ra_precision_parse(name, field);
    case OPT_WIRE: return ra_wire_parse(name, field);
    case OPT_ALIGN: return align_parse(name, field);
    default: return ra_rope_parse(name, field);
    }
}

/* One field as a Python object (a new reference). */
static PyObject *opt_to_py(const opt_row *row, const core_opts *p)
{
    const void *field = (const char *)p + row->offset;
    switch (row->kind) {
    case OPT_FLAG:
    case OPT_INT: return PyLong_FromLong(*(const int *)field);
    case OPT_I64: return PyLong_FromLongLong(*(const int64_t *)field);
    case OPT_REAL: return PyFloat_FromDouble(*(const double *)field);
    default: return PyUnicode_FromString(enum_name(row->kind, field));
    }
}

/* An integer field from x. */
static int opt_int_from_py(const opt_row *row, PyObject *x, void *field)
{
    const long long v = PyLong_AsLongLong(x);
    if (v == -1 && PyErr_Occurred())
        return -1;
    if (row->kind == OPT_I64) {
        *(int64_t *)field = v;
        return 0;
    }
    if (v < INT_MIN || v > INT_MAX) {
        PyErr_Format(PyExc_OverflowError, "option %s: %lld is out of range",
                     row->name, v);
        return -1;
    }
    *(int *)field = (int)v;
    return 0;
}

/* One field from the dict; -1 with an exception set when it is missing or
 * of the wrong type, or an unknown name (ringattn.Error, the library's
 * message). */
static int opt_from_py(const opt_row *row, PyObject *opts, core_opts *p)
{
    void *field = (char *)p + row->offset;
    PyObject *x = PyDict_GetItemString(opts, row->name); /* borrowed */
    if (!x) {
        PyErr_Format(PyExc_KeyError, "option %s is missing", row->name);
        return -1;
    }
    if (row->kind == OPT_REAL) {
        *(double *)field = PyFloat_AsDouble(x);
        return PyErr_Occurred() ? -1 : 0;
    }
    if (row->kind == OPT_FLAG || row->kind == OPT_INT ||
        row->kind == OPT_I64)
        return opt_int_from_py(row, x, field);
    const char *name = PyUnicode_AsUTF8(x);
    if (!name)
        return -1;
    const ra_status st = enum_parse(row->kind, name, field);
    if (st != RA_OK && !PyErr_Occurred())
        raise_status(st);
    return st == RA_OK ? 0 : -1;
}

/* The defaults of both structs. */
static void opts_default(core_opts *p)
{
    ra_numerics_default(&p->num);
    ra_exec_default(&p->exec);
}

/* The options from the dict: -1 with an exception set. */
static int params_from_py(PyObject *opts, core_opts *p)
{
    opts_default(p);
    if (!PyDict_Check(opts)) {
        PyErr_SetString(PyExc_TypeError, "options must be a dict");
        return -1;
    }
    for (size_t i = 0; i < OPT_COUNT; i++)
        if (opt_from_py(&opt_table[i], opts, p) < 0)
            return -1;
    return 0;
}

/* defaults(): the library's default options as a dict. */
static PyObject *core_defaults(PyObject *self, PyObject *unused)
{
    core_opts p;
    opts_default(&p);
    PyObject *d = PyDict_New();
    for (size_t i = 0; d && i < OPT_COUNT; i++) {
        PyObject *v = opt_to_py(&opt_table[i], &p);
        if (!v || PyDict_SetItemString(d, opt_table[i].name, v) < 0)
            Py_CLEAR(d);
        Py_XDECREF(v);
    }
    return d;
}

/* fields(): ((name, kind), ...), RA_OPTION_FIELDS's rows in its order,
 * kind as the header names it ("FLAG", "I64", "LAYOUT", ...). */
static PyObject *core_fields(PyObject *self, PyObject *unused)
{
    PyObject *t = PyTuple_New((Py_ssize_t)OPT_COUNT);
    for (size_t i = 0; t && i < OPT_COUNT; i++) {
        PyObject *row = Py_BuildValue("(ss)", opt_table[i].name,
                                      kind_names[opt_table[i].kind]);
        if (!row)
            Py_CLEAR(t);
        else
            PyTuple_SET_ITEM(t, (Py_ssize_t)i, row);
    }
    return t;
}

/* check_options(opts): refuses what the library's parsers refuse. */
static PyObject *core_check_options(PyObject *self, PyObject *opts)
{
    core_opts p;
    if (params_from_py(opts, &p) < 0)
        return NULL;
    Py_RETURN_NONE;
}

/* ---- buffers ----------------------------------------------------------- */

enum { MAX_VIEWS = 24 };

/* The buffers of one call, released together. */
typedef struct {
    Py_buffer view[MAX_VIEWS];
    int n;
} views;

/* Whether a buffer holds items of struct type code `type` ('f' float32,
 * 'd' float64, 'q' int64), native order. */
static int format_is(const Py_buffer *b, char type)
{
    const char *f = b->format ? b->format : "B";
    if (*f == '@' || *f == '=' || *f == '<')
        f++;
    if (type == 'q')
        return b->itemsize == 8 && (strcmp(f, "q") == 0 || strcmp(f, "l") == 0);
    return strlen(f) == 1 && *f == type &&
           b->itemsize == (type == 'f' ? 4 : 8);
}

/* The C-contiguous buffer of obj (NULL for None) into *ptr; -1 with an
 * exception set. The view stays held until views_release. */
static int views_get(views *vs, PyObject *obj, char type, int writable,
                     void **ptr)
{
    *ptr = NULL;
    if (obj == Py_None)
        return 0;
    if (vs->n == MAX_VIEWS) {
        PyErr_SetString(PyExc_ValueError, "too many buffers");
        return -1;
    }
    Py_buffer *b = &vs->view[vs->n];
    const int flags = PyBUF_C_CONTIGUOUS | PyBUF_FORMAT |
                      (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj, b, flags) < 0)
        return -1;
    vs->n++;
    if (!format_is(b, type)) {
        PyErr_Format(PyExc_TypeError, "a buffer of format '%s' where '%c' "
                     "is expected", b->format ? b->format : "B", type);
        return -1;
    }
    *ptr = b->buf;
    return 0;
}

/* The buffers of a tuple, item i of struct type types[i]; items from
 * index `writable` on are written. */
static int views_tuple(views *vs, PyObject *tuple, const char *types,
                       Py_ssize_t writable, void **ptr)
{
    const Py_ssize_t count = (Py_ssize_t)strlen(types);
    if (!PyTuple_Check(tuple) || PyTuple_GET_SIZE(tuple) != count) {
        PyErr_Format(PyExc_TypeError, "a tuple of %zd buffers is expected",
                     count);
        return -1;
    }
    for (Py_ssize_t i = 0; i < count; i++)
        if (views_get(vs, PyTuple_GET_ITEM(tuple, i), types[i], i >= writable,
                      &ptr[i]) < 0)
            return -1;
    return 0;
}

static void views_release(views *vs)
{
    for (int i = 0; i < vs->n; i++)
        PyBuffer_Release(&vs->view[i]);
    vs->n = 0;
}

/* ---- one forward or backward call ------------------------------------- */

/* The addresses of q, k, v, o, lse (and dout, dq, dk, dv) that the last
 * call handed the library: what the zero-copy test compares. */
static uintptr_t last_ptr[9];
static int last_count;

enum { T_Q, T_K, T_V, T_O, T_LSE, T_DOUT, T_DQ, T_DK, T_DV };
enum { X_SLOPES, X_WQ, X_WK, X_WV, X_DWQ, X_DWK, X_DWV, X_SINKS, X_DSINKS,
       X_COUNT };
/* The extras' buffer types, by X_*: the same tuple for both calls (the
 * forward passes None for the gradients). */
static const char extras_types[] = "dffffffff";

/* Everything one library call takes, from the arguments
 * (comm, shape, opts, tensors, masks, extras). */
typedef struct {
    MPI_Comm comm;
    ra_shape s;
    core_opts p;
    ra_additive ad;
    ra_masks mk;
    void *t[9];     /* tensors, by T_* */
    void *m[4];     /* q_lens, kv_lens, q_segments, kv_segments */
    void *x[X_COUNT]; /* extras, by X_* */
    views vs;
    PyObject *on_step, *on_tick; /* the caller's callables, or NULL */
    PyObject *raised[3]; /* the first exception a callable raised */
} core_call;

/* ---- progress callbacks ------------------------------------------------ */

/* Calls fn(args) with the GIL held; the first exception is kept for
 * call_close and stops every later call. */
static void progress_call(core_call *c, PyObject *fn, const char *format,
                          ...)
{
    if (!fn || c->raised[0])
        return;
    PyGILState_STATE gil = PyGILState_Ensure();
    va_list ap;
    va_start(ap, format);
    PyObject *args = Py_VaBuildValue(format, ap);
    va_end(ap);
    PyObject *result = args ? PyObject_CallObject(fn, args) : NULL;
    if (!result)
        PyErr_Fetch(&c->raised[0], &c->raised[1], &c->raised[2]);
    Py_XDECREF(result);
    Py_XDECREF(args);
    PyGILState_Release(gil);
}

/* ra_exec.on_step: on_step(done, total). */
static void progress_step(void *ctx, int done, int total)
{
    core_call *c = ctx;
    progress_call(c, c->on_step, "(ii)", done, total);
}

/* ra_exec.on_tick: on_tick(share). */
static void progress_tick(void *ctx, double done)
{
    core_call *c = ctx;
    progress_call(c, c->on_tick, "(d)", done);
}

/* The callables of opts "on_step" and "on_tick" (None: none), borrowed
 * from opts for the call, into c's exec; -1 with an exception set. */
static int progress_from_py(core_call *c, PyObject *opts)
{
    PyObject *fn[2] = {PyDict_GetItemString(opts, "on_step"),
                       PyDict_GetItemString(opts, "on_tick")};
    for (int i = 0; i < 2; i++)
        if (fn[i] && fn[i] != Py_None && !PyCallable_Check(fn[i])) {
            PyErr_SetString(PyExc_TypeError, "on_step and on_tick must be "
                            "callables or None");
            return -1;
        }
    c->on_step = fn[0] == Py_None ? NULL : fn[0];
    c->on_tick = fn[1] == Py_None ? NULL : fn[1];
    c->p.exec.on_step = c->on_step ? progress_step : NULL;
    c->p.exec.on_tick = c->on_tick ? progress_tick : NULL;
    c->p.exec.on_step_ctx = c;
    return 0;
}

/* Ends a call: its buffers released; the result, or NULL with an
 * exception: the call's own (raised alike on every rank), else the first
 * one a callable of this rank raised. */
static PyObject *call_close(core_call *c, PyObject *result)
{
    views_release(&c->vs);
    if (!c->raised[0] || !result) {
        for (int i = 0; i < 3; i++)
            Py_CLEAR(c->raised[i]);
        return result;
    }
    Py_DECREF(result);
    PyErr_Restore(c->raised[0], c->raised[1], c->raised[2]);
    return NULL;
}

/* shape (B, N, M, H, G, D, Dv, Dk) and the additive score's hidden size A
 * (0 for the other scores) from a tuple of ints. */
static int shape_from_py(PyObject *t, ra_shape *s, int64_t *A)
{
    long long v[9];
    if (!PyArg_ParseTuple(t, "LLLLLLLLL;shape is (B, N, M, H, G, D, Dv, Dk, "
                          "A)", &v[0], &v[1], &v[2], &v[3], &v[4], &v[5],
                          &v[6], &v[7], &v[8]))
        return -1;
    *s = (ra_shape){.B = v[0], .N = v[1], .M = v[2], .H = v[3], .G = v[4],
                    .D = v[5], .Dv = v[6], .Dk = v[7]};
    *A = v[8];
    return 0;
}

/* Fills c from args (comm, shape, opts, tensors, masks, extras): tensors
 * of types ttypes whose outputs start at index tout, extras likewise.
 * -1 with an exception set. */
static int call_open(core_call *c, PyObject *args, const char *ttypes,
                     Py_ssize_t tout, const char *xtypes, Py_ssize_t xout)
{
    PyObject *comm, *shape, *opts, *tensors, *masks, *extras;
    int64_t A;
    memset(c, 0, sizeof *c);
    if (!PyArg_ParseTuple(args, "OOOOOO", &comm, &shape, &opts, &tensors,
                          &masks, &extras) ||
        shape_from_py(shape, &c->s, &A) < 0 ||
        params_from_py(opts, &c->p) < 0 || progress_from_py(c, opts) < 0)
        return -1;
    MPI_Comm *handle = PyMPIComm_Get(comm);
    if (!handle)
        return -1;
    c->comm = *handle;
    if (views_tuple(&c->vs, tensors, ttypes, tout, c->t) < 0 ||
        views_tuple(&c->vs, masks, "qqqq", 4, c->m) < 0 ||
        views_tuple(&c->vs, extras, xtypes, xout, c->x) < 0)
        return -1;
    c->mk = (ra_masks){c->m[0], c->m[1], c->m[2], c->m[3]};
    c->p.num.alibi_slopes = c->x[X_SLOPES];
    c->p.num.sinks = c->x[X_SINKS];
    if (A > 0) {
        c->ad = (ra_additive){A, c->x[X_WQ], c->x[X_WK], c->x[X_WV]};
        c->p.num.additive = &c->ad;
    }
    last_count = (int)strlen(ttypes);
    for (int i = 0; i < last_count; i++)
        last_ptr[i] = (uintptr_t)c->t[i];
    return 0;
}

/* The call's timings as a dict. */
static PyObject *timing_to_py(const ra_timing *tm)
{
    return Py_BuildValue("{s:d,s:d,s:d,s:L,s:L,s:i}", "total", tm->total,
                         "compute", tm->compute, "comm_wait", tm->comm_wait,
                         "bytes_sent", (long long)tm->bytes_sent,
                         "bytes_cross_node", (long long)tm->bytes_cross_node,
                         "steps", tm->steps);
}

/* forward(comm, shape, opts, (q, k, v, o, lse), masks, (slopes, w_q, w_k,
 * w_v, None, None, None, sinks, None)): ra_forward into o and lse;
 * returns the timings. */
static PyObject *core_forward(PyObject *self, PyObject *args)
{
    core_call c;
    ra_timing tm;
    ra_status st = RA_OK;
    PyObject *result = NULL;
    if (call_open(&c, args, "fffff", T_O, extras_types, X_DWQ) == 0) {
        Py_BEGIN_ALLOW_THREADS
        st = ra_forward(c.comm, &c.s, &c.p.num, &c.p.exec, &c.mk,
                        &(ra_qkv){c.t[T_Q], c.t[T_K], c.t[T_V]},
                        &(ra_out){c.t[T_O], c.t[T_LSE], NULL}, &tm);
        Py_END_ALLOW_THREADS
        result = st == RA_OK ? timing_to_py(&tm) : raise_status(st);
    }
    return call_close(&c, result);
}

/* backward(comm, shape, opts, (q, k, v, o, lse, dout, dq, dk, dv), masks,
 * (slopes, w_q, w_k, w_v, dw_q, dw_k, dw_v, sinks, dsinks)): ra_backward
 * into dq, dk, dv (and the additive weights' and the sinks' gradients);
 * returns the timings. */
static PyObject *core_backward(PyObject *self, PyObject *args)
{
    core_call c;
    ra_timing tm;
    ra_status st = RA_OK;
    PyObject *result = NULL;
    if (call_open(&c, args, "fffffffff", T_DQ, extras_types, X_DWQ) == 0) {
        const ra_additive_grads dw = {c.x[X_DWQ], c.x[X_DWK], c.x[X_DWV]};
        const ra_additive_grads *dwp = c.x[X_DWV] ? &dw : NULL;
        Py_BEGIN_ALLOW_THREADS
        const ra_grads g = {c.t[T_O], c.t[T_LSE], c.t[T_DOUT], c.t[T_DQ],
                            c.t[T_DK], c.t[T_DV], dwp, c.x[X_DSINKS]};
        st = ra_backward(c.comm, &c.s, &c.p.num, &c.p.exec, &c.mk,
                         &(ra_qkv){c.t[T_Q], c.t[T_K], c.t[T_V]}, &g, &tm);
        Py_END_ALLOW_THREADS
        result = st == RA_OK ? timing_to_py(&tm) : raise_status(st);
    }
    return call_close(&c, result);
}

/* ---- layouts and helpers ----------------------------------------------- */

/* layout_slice(name, length, rank, nranks, opts=None): the runs (start,
 * count, stride) of the tokens rank holds, by ra_layout_slice with the
 * numerics of opts (the balanced layout weighs by them). */
static PyObject *core_layout_slice(PyObject *self, PyObject *args)
{
    const char *name;
    long long len;
    int rank, nranks;
    ra_layout layout;
    PyObject *opts = Py_None;
    core_opts p;
    opts_default(&p);
    if (!PyArg_ParseTuple(args, "sLii|O", &name, &len, &rank, &nranks,
                          &opts) ||
        (opts != Py_None && params_from_py(opts, &p) < 0))
        return NULL;
    const ra_status st = ra_layout_parse(name, &layout);
    if (st != RA_OK)
        return raise_status(st);
    if (layout == RA_LAYOUT_AUTO || len < 0 || nranks < 1 || rank < 0 ||
        rank >= nranks)
        return PyErr_Format(PyExc_ValueError, "layout_slice: a resolved "
                            "layout, length >= 0 and 0 <= rank < nranks");
    const ra_slice sl = ra_layout_slice(layout, &p.num, len, rank, nranks);
    PyObject *runs = PyTuple_New(sl.nruns);
    for (int i = 0; runs && i < sl.nruns; i++) {
        PyObject *r = Py_BuildValue("(LLL)", (long long)sl.run[i].start,
                                    (long long)sl.run[i].count,
                                    (long long)sl.run[i].stride);
        if (!r)
            Py_CLEAR(runs);
        else
            PyTuple_SET_ITEM(runs, i, r);
    }
    return runs;
}

/* shard_move(comm, src_layout, dst_layout, opts, length, (src_rows,
 * dst_rows, outer, row_bytes), src, dst, stall_timeout): ra_shard_move
 * of src's rows into dst (C-contiguous buffers of any item type, dst
 * writable), the balanced cut weighed by opts' numerics. */
static PyObject *core_shard_move(PyObject *self, PyObject *args)
{
    PyObject *comm, *opts, *src, *dst;
    const char *from, *to;
    long long len, rows_in, rows_out, outer, row_bytes;
    ra_shard_move_spec s = {0};
    core_opts p;
    if (!PyArg_ParseTuple(args, "OssOL(LLLL)OOd", &comm, &from, &to, &opts,
                          &len, &rows_in, &rows_out, &outer, &row_bytes,
                          &src, &dst, &s.stall_timeout) ||
        params_from_py(opts, &p) < 0)
        return NULL;
    ra_status st = ra_layout_parse(from, &s.from);
    if (st == RA_OK)
        st = ra_layout_parse(to, &s.to);
    if (st != RA_OK)
        return raise_status(st);
    MPI_Comm *handle = PyMPIComm_Get(comm);
    Py_buffer in, out;
    if (!handle || PyObject_GetBuffer(src, &in, PyBUF_C_CONTIGUOUS) < 0)
        return NULL;
    if (PyObject_GetBuffer(dst, &out, PyBUF_C_CONTIGUOUS |
                                          PyBUF_WRITABLE) < 0) {
        PyBuffer_Release(&in);
        return NULL;
    }
    if (in.len < outer * rows_in * row_bytes ||
        out.len < outer * rows_out * row_bytes) {
        PyBuffer_Release(&in);
        PyBuffer_Release(&out);
        return PyErr_Format(PyExc_ValueError, "shard_move: buffers of %zd "
                            "and %zd bytes for %lld and %lld rows",
                            in.len, out.len, rows_in, rows_out);
    }
    s.num = &p.num, s.len = len, s.src_rows = rows_in;
    s.dst_rows = rows_out, s.outer = outer, s.row_bytes = row_bytes;
    Py_BEGIN_ALLOW_THREADS
    st = ra_shard_move(*handle, &s, in.buf, out.buf);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&in);
    PyBuffer_Release(&out);
    if (st != RA_OK)
        return raise_status(st);
    Py_RETURN_NONE;
}

/* layout_resolve(opts, segments): the layout the call will use, by
 * ra_exec_layout. */
static PyObject *core_layout_resolve(PyObject *self, PyObject *args)
{
    PyObject *opts;
    int segments;
    core_opts p;
    if (!PyArg_ParseTuple(args, "Op", &opts, &segments) ||
        params_from_py(opts, &p) < 0)
        return NULL;
    return PyUnicode_FromString(
        ra_layout_name(ra_exec_layout(&p.num, &p.exec, segments)));
}

/* first_nonfinite(buffer): the flat index of the first NaN or infinity of
 * a float32 buffer, or -1; scanned without the GIL. */
static PyObject *core_first_nonfinite(PyObject *self, PyObject *obj)
{
    views vs = {.n = 0};
    void *ptr;
    long long at = -1;
    if (views_get(&vs, obj, 'f', 0, &ptr) == 0) {
        const float *x = ptr;
        const long long n = (long long)(vs.view[0].len / 4);
        Py_BEGIN_ALLOW_THREADS
        for (long long i = 0; i < n && at < 0; i++)
            if (!isfinite(x[i]))
                at = i;
        Py_END_ALLOW_THREADS
    }
    views_release(&vs);
    return PyErr_Occurred() ? NULL : PyLong_FromLongLong(at);
}

/* pointers(): the tensor addresses the last call handed the library. */
static PyObject *core_pointers(PyObject *self, PyObject *unused)
{
    PyObject *t = PyTuple_New(last_count);
    for (int i = 0; t && i < last_count; i++)
        PyTuple_SET_ITEM(t, i, PyLong_FromUnsignedLongLong(last_ptr[i]));
    return t;
}

static PyMethodDef core_methods[] = {
    {"fields", core_fields, METH_NOARGS,
     "The option fields (RA_OPTION_FIELDS): ((name, kind), ...)."},
    {"defaults", core_defaults, METH_NOARGS,
     "The library's default options (ra_numerics_default, ra_exec_default) "
     "as a dict."},
    {"check_options", core_check_options, METH_O,
     "Refuses options the library's parsers refuse (ringattn.Error)."},
    {"forward", core_forward, METH_VARARGS, "ra_forward on buffers."},
    {"backward", core_backward, METH_VARARGS, "ra_backward on buffers."},
    {"layout_slice", core_layout_slice, METH_VARARGS,
     "The runs (start, count, stride) a rank holds (ra_layout_slice)."},
    {"shard_move", core_shard_move, METH_VARARGS,
     "Rows of one sequence moved between two cuts (ra_shard_move)."},
    {"layout_resolve", core_layout_resolve, METH_VARARGS,
     "The layout a call with these options uses (ra_exec_layout)."},
    {"first_nonfinite", core_first_nonfinite, METH_O,
     "Index of the first NaN or infinity of a float32 buffer, or -1."},
    {"pointers", core_pointers, METH_NOARGS,
     "The tensor addresses the last call handed the library."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef core_module = {
    PyModuleDef_HEAD_INIT, "ringattn._core",
    "The C side of ringattn (private): the library on buffers.", -1,
    core_methods, NULL, NULL, NULL, NULL,
};

/* An exception class derived from ringattn.Error and `also`, added to m. */
static PyObject *error_subclass(PyObject *m, const char *name, PyObject *also,
                                const char *doc)
{
    char full[64];
    snprintf(full, sizeof full, "ringattn.%s", name);
    PyObject *bases = PyTuple_Pack(2, core_error, also);
    PyObject *cls = bases ? PyErr_NewExceptionWithDoc(full, doc, bases, NULL)
                          : NULL;
    Py_XDECREF(bases);
    if (cls && PyModule_AddObjectRef(m, name, cls) < 0)
        Py_CLEAR(cls);
    return cls;
}

/* ringattn.Error and its subclasses; -1 with an exception set. */
static int errors_add(PyObject *m)
{
    core_error = PyErr_NewExceptionWithDoc(
        "ringattn.Error",
        "A refusal or failure of ringattn, raised alike on every rank; "
        ".status names the library's status.", PyExc_RuntimeError, NULL);
    if (!core_error || PyModule_AddObjectRef(m, "Error", core_error) < 0)
        return -1;
    core_arg_error = error_subclass(
        m, "ArgumentError", PyExc_ValueError,
        "An invalid argument or input (a ringattn.Error and a ValueError).");
    PyObject *type_error = error_subclass(
        m, "ArgumentTypeError", PyExc_TypeError,
        "An argument of the wrong type (a ringattn.Error and a TypeError).");
    return core_arg_error && type_error ? 0 : -1;
}

PyMODINIT_FUNC PyInit__core(void)
{
    if (import_mpi4py() < 0)
        return NULL;
    PyObject *m = PyModule_Create(&core_module);
    if (!m)
        return NULL;
    if (errors_add(m) < 0 ||
        PyModule_AddStringConstant(m, "version", RA_VERSION_STRING) < 0) {
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
