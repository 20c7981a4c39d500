/*
 * oarlock_cpu._rows: fused row kernels of RMSNorm and LayerNorm over the last axis, forward and
 * backward, for C-contiguous float32 / float64 arrays of shape [rows, n].
 *
 * numpy needs a dozen whole-array passes for a normalisation (mean, centre, square, mean, rsqrt,
 * scale, weight, bias; more for the backward), each streaming the whole array through memory.  Here
 * each row is read once for its statistics and once more, from L1, to write the result: two passes
 * over a row that stays in cache.  Sums are accumulated in double for both dtypes (as float32 values
 * are products of two floats, their double products are exact), and each result is rounded once to
 * the array's dtype, so float32 results are at least as accurate as the generic float32 kernels'.
 * The weight and bias gradients (sums over rows) are accumulated in a double buffer of n.
 *
 * The formulas are the generic kernels' (oarlock_ops.norm): xhat = (x - mean) rstd (no mean for
 * RMSNorm), rstd = 1/sqrt(mean((x - mean)^2) + eps); out = xhat w + b; backward with gh = g w:
 * dx = rstd (gh - xhat mean(gh xhat) - mean(gh)), dw = sum_rows g xhat, db = sum_rows g.
 *
 * The Python side (oarlock_cpu/rows.py) checks shapes and allocates the outputs; the functions here
 * check the dtypes, layouts and sizes they rely on (a mismatch raises, never reads out of bounds)
 * and release the GIL.  Reductions are vectorised with `omp simd reduction` (-fopenmp-simd: no
 * OpenMP runtime, and no -ffast-math, which would let the compiler reassociate everything else).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#define NPY_NO_DEPRECATED_API NPY_1_22_API_VERSION
#define NPY_TARGET_VERSION NPY_1_22_API_VERSION
#include <numpy/arrayobject.h>

#include <math.h>
#include <stdint.h>
#include <stdlib.h>

#include "_clones.h"   /* CLONES: AVX-512 / AVX2 / baseline versions picked at load */
#include "_pool_api.h" /* split_range: large calls on the worker pool */

#if defined(_MSC_VER)
#define SIMD_SUM(a)
#define SIMD_SUM2(a, b)
#else
#define PRAGMA(text) _Pragma(#text)
#define SIMD_SUM(a) PRAGMA(omp simd reduction(+ : a))
#define SIMD_SUM2(a, b) PRAGMA(omp simd reduction(+ : a, b))
#endif

/* The kernels, once per element type T.  w, b may be NULL (no weight: 1, no bias: 0). */
#define ROW_KERNELS(T)                                                                                      \
    CLONES static void rms_norm_##T(const T *x, const T *w, double eps, T *out, T *rstd, npy_intp rows,     \
                                    npy_intp n)                                                             \
    {                                                                                                       \
        for (npy_intp r = 0; r < rows; r++) {                                                               \
            const T *xr = x + r * n;                                                                        \
            T *o = out + r * n;                                                                             \
            double ss = 0.0;                                                                                \
            SIMD_SUM(ss)                                                                                    \
            for (npy_intp i = 0; i < n; i++) ss += (double)xr[i] * xr[i];                                   \
            double rs = 1.0 / sqrt(ss / (double)n + eps);                                                   \
            rstd[r] = (T)rs;                                                                                \
            if (w)                                                                                          \
                for (npy_intp i = 0; i < n; i++) o[i] = (T)(xr[i] * rs * w[i]);                             \
            else                                                                                            \
                for (npy_intp i = 0; i < n; i++) o[i] = (T)(xr[i] * rs);                                    \
        }                                                                                                   \
    }                                                                                                       \
                                                                                                            \
    CLONES static void layer_norm_##T(const T *x, const T *w, const T *b, double eps, T *out, T *mean,      \
                                      T *rstd, npy_intp rows, npy_intp n)                                   \
    {                                                                                                       \
        for (npy_intp r = 0; r < rows; r++) {                                                               \
            const T *xr = x + r * n;                                                                        \
            T *o = out + r * n;                                                                             \
            double s = 0.0, ss = 0.0;                                                                       \
            SIMD_SUM(s)                                                                                     \
            for (npy_intp i = 0; i < n; i++) s += xr[i];                                                    \
            double mu = s / (double)n;                                                                      \
            SIMD_SUM(ss) /* centred: no cancellation when |mean| >> std */                                 \
            for (npy_intp i = 0; i < n; i++) ss += (xr[i] - mu) * (xr[i] - mu);                             \
            double rs = 1.0 / sqrt(ss / (double)n + eps);                                                   \
            mean[r] = (T)mu;                                                                                \
            rstd[r] = (T)rs;                                                                                \
            for (npy_intp i = 0; i < n; i++) {                                                              \
                double v = (xr[i] - mu) * rs;                                                               \
                v = w ? v * w[i] : v;                                                                       \
                o[i] = (T)(b ? v + b[i] : v);                                                               \
            }                                                                                               \
        }                                                                                                   \
    }                                                                                                       \
                                                                                                            \
    /* mean is NULL for RMSNorm; db NULL when no bias gradient is wanted; dw, db: double sums of n */       \
    CLONES static void norm_grad_##T(const T *x, const T *w, const T *g, const T *mean, const T *rstd,      \
                                     T *dx, double *dw, double *db, npy_intp rows, npy_intp n)              \
    {                                                                                                       \
        for (npy_intp r = 0; r < rows; r++) {                                                               \
            const T *xr = x + r * n, *gr = g + r * n;                                                       \
            T *d = dx + r * n;                                                                              \
            double mu = mean ? (double)mean[r] : 0.0, rs = rstd[r];                                         \
            double sgx = 0.0, sg = 0.0;                                                                     \
            SIMD_SUM2(sgx, sg)                                                                              \
            for (npy_intp i = 0; i < n; i++) {                                                              \
                double gh = w ? (double)gr[i] * w[i] : (double)gr[i];                                       \
                sgx += gh * ((xr[i] - mu) * rs);                                                            \
                sg += gh;                                                                                   \
            }                                                                                               \
            double c1 = sgx / (double)n, c2 = mean ? sg / (double)n : 0.0;                                  \
            for (npy_intp i = 0; i < n; i++) {                                                              \
                double xhat = (xr[i] - mu) * rs;                                                            \
                double gh = w ? (double)gr[i] * w[i] : (double)gr[i];                                       \
                d[i] = (T)(rs * (gh - xhat * c1 - c2));                                                     \
                dw[i] += (double)gr[i] * xhat;                                                              \
            }                                                                                               \
            if (db)                                                                                         \
                for (npy_intp i = 0; i < n; i++) db[i] += gr[i];                                            \
        }                                                                                                   \
    }

ROW_KERNELS(float)
ROW_KERNELS(double)

/* ---------------------------------------------------------------------------------------------
 * argument checks: every array C-contiguous, of x's dtype, with the size the kernel reads or writes
 */

static void *data_of(PyObject *obj, const char *name, int type, npy_intp size, int optional)
{
    if (obj == Py_None) {
        if (optional)
            return NULL;
        PyErr_Format(PyExc_TypeError, "_rows: %s must be an array, got None", name);
        return (void *)-1;
    }
    if (!PyArray_Check(obj)) {
        PyErr_Format(PyExc_TypeError, "_rows: %s must be a numpy array", name);
        return (void *)-1;
    }
    PyArrayObject *a = (PyArrayObject *)obj;
    if (PyArray_TYPE(a) != type || !PyArray_IS_C_CONTIGUOUS(a) || PyArray_SIZE(a) != size) {
        PyErr_Format(PyExc_ValueError, "_rows: %s must be a C-contiguous array of x's dtype with %zd elements",
                     name, (Py_ssize_t)size);
        return (void *)-1;
    }
    return PyArray_DATA(a);
}

#define BAD ((void *)-1)

/* x's type, rows and n; x must be a 2-D C-contiguous float32 or float64 array */
static int x_shape(PyObject *obj, int *type, npy_intp *rows, npy_intp *n)
{
    if (!PyArray_Check(obj) || PyArray_NDIM((PyArrayObject *)obj) != 2) {
        PyErr_SetString(PyExc_TypeError, "_rows: x must be a 2-D numpy array");
        return -1;
    }
    PyArrayObject *a = (PyArrayObject *)obj;
    *type = PyArray_TYPE(a);
    if ((*type != NPY_FLOAT && *type != NPY_DOUBLE) || !PyArray_IS_C_CONTIGUOUS(a)) {
        PyErr_SetString(PyExc_TypeError, "_rows: x must be C-contiguous float32 or float64");
        return -1;
    }
    *rows = PyArray_DIM(a, 0);
    *n = PyArray_DIM(a, 1);
    return 0;
}

/* ---------------------------------------------------------------------------------------------
 * the calls: rows split over the pool's threads when there are enough of them (_pool_api.h)
 */

#define MAX_GRAD_PIECES 64  /* the backward's pieces each keep 2n double sums */

typedef struct {
    int type;
    const char *x, *w, *b, *g, *mean, *rstd_in;
    char *out, *mean_out, *rstd;
    double eps;
    npy_intp n, piece_rows, rows;
    double *acc;   /* backward: per piece, 2n sums (dw, then db) */
    int want_db;
} row_job;

#define AT(ptr, type, i) ((ptr) ? (ptr) + (i) * ((type) == NPY_FLOAT ? sizeof(float) : sizeof(double)) : NULL)

static void rms_range(void *ctx, Py_ssize_t b, Py_ssize_t e)
{
    const row_job *j = ctx;
    if (j->type == NPY_FLOAT)
        rms_norm_float((const float *)AT(j->x, j->type, b * j->n), (const float *)j->w, j->eps,
                       (float *)AT(j->out, j->type, b * j->n), (float *)AT(j->rstd, j->type, b), e - b, j->n);
    else
        rms_norm_double((const double *)AT(j->x, j->type, b * j->n), (const double *)j->w, j->eps,
                        (double *)AT(j->out, j->type, b * j->n), (double *)AT(j->rstd, j->type, b), e - b, j->n);
}

static void layer_range(void *ctx, Py_ssize_t b, Py_ssize_t e)
{
    const row_job *j = ctx;
    if (j->type == NPY_FLOAT)
        layer_norm_float((const float *)AT(j->x, j->type, b * j->n), (const float *)j->w, (const float *)j->b,
                         j->eps, (float *)AT(j->out, j->type, b * j->n), (float *)AT(j->mean_out, j->type, b),
                         (float *)AT(j->rstd, j->type, b), e - b, j->n);
    else
        layer_norm_double((const double *)AT(j->x, j->type, b * j->n), (const double *)j->w, (const double *)j->b,
                          j->eps, (double *)AT(j->out, j->type, b * j->n), (double *)AT(j->mean_out, j->type, b),
                          (double *)AT(j->rstd, j->type, b), e - b, j->n);
}

static void grad_piece(void *ctx, long piece)
{
    const row_job *j = ctx;
    npy_intp b = piece * j->piece_rows, e = b + j->piece_rows < j->rows ? b + j->piece_rows : j->rows;
    double *dw = j->acc + piece * 2 * j->n, *db = j->want_db ? dw + j->n : NULL;
    if (j->type == NPY_FLOAT)
        norm_grad_float((const float *)AT(j->x, j->type, b * j->n), (const float *)j->w,
                        (const float *)AT(j->g, j->type, b * j->n), (const float *)AT(j->mean, j->type, b),
                        (const float *)AT(j->rstd_in, j->type, b), (float *)AT(j->out, j->type, b * j->n), dw, db,
                        e - b, j->n);
    else
        norm_grad_double((const double *)AT(j->x, j->type, b * j->n), (const double *)j->w,
                         (const double *)AT(j->g, j->type, b * j->n), (const double *)AT(j->mean, j->type, b),
                         (const double *)AT(j->rstd_in, j->type, b), (double *)AT(j->out, j->type, b * j->n), dw, db,
                         e - b, j->n);
}

static PyObject *py_rms_norm(PyObject *self, PyObject *args)
{
    PyObject *xo, *wo, *oo, *ro;
    double eps;
    int type;
    npy_intp rows, n;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOdOO", &xo, &wo, &eps, &oo, &ro) || x_shape(xo, &type, &rows, &n) < 0)
        return NULL;
    void *w = data_of(wo, "weight", type, n, 1), *out = data_of(oo, "out", type, rows * n, 0);
    void *rstd = data_of(ro, "rstd", type, rows, 0);
    if (w == BAD || out == BAD || rstd == BAD)
        return NULL;
    row_job j = {.type = type, .x = PyArray_DATA((PyArrayObject *)xo), .w = w, .out = out, .rstd = rstd,
                 .eps = eps, .n = n};
    Py_BEGIN_ALLOW_THREADS
    split_range(rows, split_min_rows(n), 1, rms_range, &j);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyObject *py_layer_norm(PyObject *self, PyObject *args)
{
    PyObject *xo, *wo, *bo, *oo, *mo, *ro;
    double eps;
    int type;
    npy_intp rows, n;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOdOOO", &xo, &wo, &bo, &eps, &oo, &mo, &ro) ||
        x_shape(xo, &type, &rows, &n) < 0)
        return NULL;
    void *w = data_of(wo, "weight", type, n, 1), *b = data_of(bo, "bias", type, n, 1);
    void *out = data_of(oo, "out", type, rows * n, 0), *mean = data_of(mo, "mean", type, rows, 0);
    void *rstd = data_of(ro, "rstd", type, rows, 0);
    if (w == BAD || b == BAD || out == BAD || mean == BAD || rstd == BAD)
        return NULL;
    row_job j = {.type = type, .x = PyArray_DATA((PyArrayObject *)xo), .w = w, .b = b, .out = out,
                 .mean_out = mean, .rstd = rstd, .eps = eps, .n = n};
    Py_BEGIN_ALLOW_THREADS
    split_range(rows, split_min_rows(n), 1, layer_range, &j);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* norm_grad(x, weight|None, g, mean|None, rstd, dx, dw, db|None). The rows are cut into pieces by their count
 * alone (not by the threads), each piece sums its own dw / db, and the pieces' sums are added in order: the same
 * bits on any number of threads. */
static PyObject *py_norm_grad(PyObject *self, PyObject *args)
{
    PyObject *xo, *wo, *go, *mo, *ro, *dxo, *dwo, *dbo;
    int type;
    npy_intp rows, n;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOOOOO", &xo, &wo, &go, &mo, &ro, &dxo, &dwo, &dbo) ||
        x_shape(xo, &type, &rows, &n) < 0)
        return NULL;
    void *w = data_of(wo, "weight", type, n, 1), *g = data_of(go, "g", type, rows * n, 0);
    void *mean = data_of(mo, "mean", type, rows, 1), *rstd = data_of(ro, "rstd", type, rows, 0);
    void *dx = data_of(dxo, "dx", type, rows * n, 0), *dwt = data_of(dwo, "dweight", type, n, 0);
    void *dbt = data_of(dbo, "dbias", type, n, 1);
    if (w == BAD || g == BAD || mean == BAD || rstd == BAD || dx == BAD || dwt == BAD || dbt == BAD)
        return NULL;
    npy_intp piece_rows = split_min_rows(n);
    long pieces = rows > 0 ? (long)((rows + piece_rows - 1) / piece_rows) : 0;
    if (pieces > MAX_GRAD_PIECES) {
        pieces = MAX_GRAD_PIECES;
        piece_rows = (rows + pieces - 1) / pieces;
        pieces = (long)((rows + piece_rows - 1) / piece_rows);
    }
    double *acc = calloc((size_t)(pieces > 0 ? pieces : 1) * (size_t)(2 * n > 0 ? 2 * n : 1), sizeof(double));
    if (acc == NULL)
        return PyErr_NoMemory();
    row_job j = {.type = type, .x = PyArray_DATA((PyArrayObject *)xo), .w = w, .g = g, .mean = mean,
                 .rstd_in = rstd, .out = dx, .n = n, .piece_rows = piece_rows, .rows = rows, .acc = acc,
                 .want_db = dbt != NULL};
    Py_BEGIN_ALLOW_THREADS
    split_pieces(pieces, grad_piece, &j);
    for (npy_intp i = 0; i < n; i++) {
        double sw = 0.0, sb = 0.0;
        for (long p = 0; p < pieces; p++) {
            sw += acc[p * 2 * n + i];
            sb += acc[p * 2 * n + n + i];
        }
        if (type == NPY_FLOAT) {
            ((float *)dwt)[i] = (float)sw;
            if (dbt)
                ((float *)dbt)[i] = (float)sb;
        } else {
            ((double *)dwt)[i] = sw;
            if (dbt)
                ((double *)dbt)[i] = sb;
        }
    }
    Py_END_ALLOW_THREADS
    free(acc);
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------------------------------------
 * rotary embedding rows (oarlock_ops.rotary's fused_rotary_embedding): for each row of D values (one position
 * and head of x [B, T, H, D]) and its position's cos / sin rows (tables [T, D], sin carrying the rotation's sign):
 *   out[i] = x[i] cos[i] + x[i + D/2] sin[i],  out[i + D/2] = x[i + D/2] cos[i + D/2] + x[i] sin[i + D/2]
 * and with transpose (the gradient) sin's index swapped: x[i + D/2] sin[i + D/2], x[i] sin[i].  Each product is
 * rounded, then the sum, as the generic kernel's numpy passes round them (no FMA contraction): the same bits.
 */
#if defined(__GNUC__) && !defined(__clang__)
#define NO_CONTRACT __attribute__((optimize("fp-contract=off")))
#else
#define NO_CONTRACT   /* clang contracts only within one expression: the products are separate statements */
#endif

#define ROTARY_ROW(T)                                                                                       \
    CLONES NO_CONTRACT static void rotary_row_##T(const T *x, const T *c, const T *s, T *o, npy_intp half,  \
                                                 int transpose)                                            \
    {                                                                                                       \
        const T *s_lo = transpose ? s + half : s, *s_hi = transpose ? s : s + half;                         \
        for (npy_intp i = 0; i < half; i++) {                                                               \
            T a = x[i] * c[i];                                                                              \
            T b = x[i + half] * s_lo[i];                                                                    \
            T p = x[i + half] * c[i + half];                                                                \
            T q = x[i] * s_hi[i];                                                                           \
            o[i] = a + b;                                                                                   \
            o[i + half] = p + q;                                                                            \
        }                                                                                                   \
    }
ROTARY_ROW(float)
ROTARY_ROW(double)

typedef struct {
    int type, transpose;
    const char *x, *cos, *sin;
    char *out;
    npy_intp t, h, d;
    npy_intp sb, st, sh;   /* x's byte strides over B, T, H */
} rotary_job;

static void rotary_range(void *ctx, Py_ssize_t begin, Py_ssize_t end)
{
    const rotary_job *j = ctx;
    size_t item = j->type == NPY_FLOAT ? sizeof(float) : sizeof(double);
    for (Py_ssize_t r = begin; r < end; r++) {
        npy_intp b = r / (j->t * j->h), t = (r / j->h) % j->t, h = r % j->h;
        const char *xr = j->x + b * j->sb + t * j->st + h * j->sh;
        const char *c = j->cos + t * j->d * item, *s = j->sin + t * j->d * item;
        char *o = j->out + r * j->d * item;
        if (j->type == NPY_FLOAT)
            rotary_row_float((const float *)xr, (const float *)c, (const float *)s, (float *)o, j->d / 2, j->transpose);
        else
            rotary_row_double((const double *)xr, (const double *)c, (const double *)s, (double *)o, j->d / 2,
                              j->transpose);
    }
}

/* rotary(x [B, T, H, D] with contiguous rows, cos [T, D], sin [T, D], out [B, T, H, D] C-contiguous, transpose) */
static PyObject *py_rotary(PyObject *self, PyObject *args)
{
    PyObject *xo, *co, *so, *oo;
    int transpose;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOOOp", &xo, &co, &so, &oo, &transpose))
        return NULL;
    PyArrayObject *x = (PyArrayObject *)xo;
    if (!PyArray_Check(xo) || PyArray_NDIM(x) != 4 ||
        (PyArray_TYPE(x) != NPY_FLOAT && PyArray_TYPE(x) != NPY_DOUBLE) ||
        PyArray_STRIDE(x, 3) != PyArray_ITEMSIZE(x) || PyArray_DIM(x, 3) % 2) {
        PyErr_SetString(PyExc_TypeError, "_rows.rotary: x must be a 4-D float32 or float64 array [B, T, H, D] with "
                                         "contiguous rows of even D");
        return NULL;
    }
    int type = PyArray_TYPE(x);
    npy_intp B = PyArray_DIM(x, 0), T = PyArray_DIM(x, 1), H = PyArray_DIM(x, 2), D = PyArray_DIM(x, 3);
    void *c = data_of(co, "cos", type, T * D, 0), *s = data_of(so, "sin", type, T * D, 0);
    void *out = data_of(oo, "out", type, B * T * H * D, 0);
    if (c == BAD || s == BAD || out == BAD)
        return NULL;
    rotary_job j = {type, transpose, PyArray_DATA(x), c, s, out, T, H, D,
                    PyArray_STRIDE(x, 0), PyArray_STRIDE(x, 1), PyArray_STRIDE(x, 2)};
    Py_BEGIN_ALLOW_THREADS
    split_range(B * T * H, split_min_rows(D), 1, rotary_range, &j);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

/* ---------------------------------------------------------------------------------------------
 * embedding_grad(ids, g, out): out [V, D] += the rows of g [N, D] per id (out zeroed by the caller), ids in
 * order, so each output row sums its contributions in the order they came (PyTorch's CPU order). The columns are
 * split over the pool: every thread walks all ids over its own columns, so nothing is written twice and the bits
 * do not depend on the thread count.
 */
typedef struct {
    int type;
    const int64_t *ids;
    const char *g;
    char *out;
    npy_intp n, d;
} embedding_job;

static void embedding_range(void *ctx, Py_ssize_t b, Py_ssize_t e)
{
    const embedding_job *j = ctx;
    for (npy_intp r = 0; r < j->n; r++) {
        npy_intp id = (npy_intp)j->ids[r];
        if (j->type == NPY_FLOAT) {
            const float *src = (const float *)j->g + r * j->d;
            float *dst = (float *)j->out + id * j->d;
            for (Py_ssize_t c = b; c < e; c++)
                dst[c] += src[c];
        } else {
            const double *src = (const double *)j->g + r * j->d;
            double *dst = (double *)j->out + id * j->d;
            for (Py_ssize_t c = b; c < e; c++)
                dst[c] += src[c];
        }
    }
}

static PyObject *py_embedding_grad(PyObject *self, PyObject *args)
{
    PyObject *io, *go, *oo;
    int type;
    npy_intp n, d;
    (void)self;
    if (!PyArg_ParseTuple(args, "OOO", &io, &go, &oo) || x_shape(go, &type, &n, &d) < 0)
        return NULL;
    PyArrayObject *ids = (PyArrayObject *)io, *out = (PyArrayObject *)oo;
    if (!PyArray_Check(io) || PyArray_TYPE(ids) != NPY_INT64 || PyArray_NDIM(ids) != 1 || PyArray_DIM(ids, 0) != n ||
        !PyArray_IS_C_CONTIGUOUS(ids)) {
        PyErr_SetString(PyExc_TypeError, "_rows.embedding_grad: ids must be a contiguous int64 array of g's rows");
        return NULL;
    }
    if (!PyArray_Check(oo) || PyArray_TYPE(out) != type || PyArray_NDIM(out) != 2 || PyArray_DIM(out, 1) != d ||
        !PyArray_IS_C_CONTIGUOUS(out) || !PyArray_ISWRITEABLE(out)) {
        PyErr_SetString(PyExc_TypeError, "_rows.embedding_grad: out must be a writeable C-contiguous [V, D] array of "
                                         "g's dtype");
        return NULL;
    }
    const int64_t *id = PyArray_DATA(ids);
    npy_intp v = PyArray_DIM(out, 0);
    for (npy_intp r = 0; r < n; r++)
        if (id[r] < 0 || id[r] >= v) {
            PyErr_Format(PyExc_IndexError, "_rows.embedding_grad: id %lld at position %zd is outside [0, %zd)",
                         (long long)id[r], (Py_ssize_t)r, (Py_ssize_t)v);
            return NULL;
        }
    embedding_job j = {type, id, PyArray_DATA((PyArrayObject *)go), PyArray_DATA(out), n, d};
    Py_BEGIN_ALLOW_THREADS
    split_range(d, (split_min_rows(n) + 15) / 16 * 16, 16, embedding_range, &j);
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef METHODS[] = {
    SET_THREADS_METHOD,
    {"embedding_grad", py_embedding_grad, METH_VARARGS,
     "embedding_grad(ids, g, out): out [V, D] += each row of g [N, D] at its id (int64 [N]), in order."},
    {"rotary", py_rotary, METH_VARARGS,
     "rotary(x, cos, sin, out, transpose): the rotary embedding of x [B, T, H, D] (rows contiguous) by tables "
     "[T, D] into C-contiguous out (fused_rotary_embedding's formula and bits)."},
    {"rms_norm", py_rms_norm, METH_VARARGS,
     "rms_norm(x, weight|None, eps, out, rstd): RMSNorm of each row of 2-D x into out, 1/rms into rstd."},
    {"layer_norm", py_layer_norm, METH_VARARGS,
     "layer_norm(x, weight|None, bias|None, eps, out, mean, rstd): LayerNorm of each row of 2-D x."},
    {"norm_grad", py_norm_grad, METH_VARARGS,
     "norm_grad(x, weight|None, g, mean|None, rstd, dx, dweight, dbias|None): the backward of both "
     "(mean None: RMSNorm), into the given arrays."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef moduledef = {
    PyModuleDef_HEAD_INIT, "_rows", "Fused RMSNorm / LayerNorm row kernels (see _rows.c).", -1, METHODS,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__rows(void)
{
    import_array();
    return PyModule_Create(&moduledef);
}
