/*
 * Fused scaled-dot-product attention for the "cpu" device (part of oarlock_cpu._gemm: it calls MKL's GEMMs
 * through the pointers _gemm.c resolved), float32 and float64, without mask or dropout:
 *
 *   attention_forward(q, k, v, scale, causal, threads) -> (out, probs) | None
 *   attention_backward(g, q, k, v, out, probs, scale, causal, threads) -> (dq, dk, dv) | None
 *
 * Layouts are oarlock-ops' SDPA kernel's (Paddle's): q [B, Sq, H, D], k [B, Sk, Hk, D], v [B, Sk, Hk, Dv], out and
 * g [B, Sq, H, Dv]; head h reads key/value head h / (H / Hk) (grouped-query attention); probs [B, Hk, H / Hk, Sq,
 * Sk] is the softmax saved for the backward, zero above the diagonal with `causal` (top-left aligned: query i
 * sees keys j <= i). The inputs may be any views whose last axis is contiguous (a split of a fused qkv
 * projection is read in place); results are new C-ordered arrays. None: the arguments are not ones handled
 * here (the caller then runs the generic kernel).
 *
 * Why: at the sequence lengths of small models (the GPT's 128) the generic kernel is a dozen numpy passes over
 * 32-row blocks, single-threaded between BLAS calls. Here each (batch, key head) pair is one unit of work:
 * its GEMMs (one MKL thread each) and row passes run back to back while its [Sq, Sk] block is in the cache,
 * and the units are shared by `threads` threads of the worker pool (_pool.c; the GIL released), as PyTorch's fused
 * CPU kernel does.
 * Query rows run in blocks of BLOCK; with causal, block [r0, r1) multiplies only keys [0, r1).
 *
 * Forward, per head: S = scale Q K^T; P = softmax(S) by rows (shifted by the row's max); O = P V.
 * Backward: dP = dO V^T; dS = P * (dP - rowsum(dO * O)); dQ = scale dS K; dK += scale dS^T Q; dV += P^T dO.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#define NPY_NO_DEPRECATED_API NPY_1_22_API_VERSION
#define NPY_TARGET_VERSION NPY_1_22_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL oarlock_cpu_gemm_ARRAY_API
#define NO_IMPORT_ARRAY
#include <numpy/arrayobject.h>

#include "_gemm.h"
#include "_pool.h"

#define BLOCK 64        /* query rows per block: its scores stay in the cache through the row passes */
#define MAX_THREADS 64

/* One [rows, cols] matrix family of a [B, S, heads, cols] view: element (b, s, h, c) at
 * base + b*sb + s*ld + h*sh + c (strides in elements). */
typedef struct {
    char *base;
    npy_intp sb, ld, sh;
} view4;

typedef struct {
    int type;                     /* NPY_FLOAT32 or NPY_FLOAT64 */
    npy_intp B, Sq, Sk, H, Hk, G, D, Dv;
    double scale;
    int causal;
    view4 q, k, v, o, g, dq, dk, dv;
    char *probs;                  /* C-ordered [B, Hk, G, Sq, Sk] */
    int threads;
    int backward;
    atomic_int failed;            /* a unit could not allocate its scratch rows */
} job;

static int as_view(PyArrayObject *x, int type, view4 *out) {
    if (!PyArray_CheckExact((PyObject *)x) || PyArray_TYPE(x) != type || PyArray_NDIM(x) != 4 ||
        !PyArray_ISALIGNED(x) || !PyArray_ISNOTSWAPPED(x))
        return 0;
    npy_intp item = PyArray_ITEMSIZE(x);
    const npy_intp *st = PyArray_STRIDES(x), *sh = PyArray_SHAPE(x);
    if (sh[3] > 1 && st[3] != item) return 0;
    for (int d = 0; d < 3; d++)
        if (st[d] < 0 || st[d] % item) return 0;
    out->base = PyArray_BYTES(x);
    out->sb = st[0] / item;
    out->ld = sh[1] > 1 ? st[1] / item : sh[3];
    out->sh = st[2] / item;
    if (out->ld < (sh[3] > 1 ? sh[3] : 1) || out->ld > INT_MAX) return 0;
    return 1;
}

/* rows [r0, r1) of a causal block see keys [0, min(r1, Sk)); without causal every row sees all Sk */
static npy_intp keys_of_block(const job *j, npy_intp r1) {
    return j->causal ? (r1 < j->Sk ? r1 : j->Sk) : j->Sk;
}

static npy_intp keys_of_row(const job *j, npy_intp i) {
    return j->causal ? (i + 1 < j->Sk ? i + 1 : j->Sk) : j->Sk;
}

/* The row passes, once per dtype. */
#define DEFINE_ROWS(T, SUFFIX, EXP)                                                                          \
    /* softmax of row s[0, n) in place, s[n, width) set to 0 (width: the columns its block's GEMM wrote) */                                              \
    static void softmax_row_##SUFFIX(T *s, npy_intp n, npy_intp width) {                                      \
        if (n > 0) {                                                                                          \
            T top = s[0];                                                                                     \
            for (npy_intp c = 1; c < n; c++) top = s[c] > top ? s[c] : top;                                   \
            T total = 0;                                                                                      \
            for (npy_intp c = 0; c < n; c++) {                                                                \
                s[c] = EXP(s[c] - top);                                                                       \
                total += s[c];                                                                                \
            }                                                                                                 \
            T inverse = (T)1 / total;                                                                         \
            for (npy_intp c = 0; c < n; c++) s[c] *= inverse;                                                 \
        }                                                                                                     \
        for (npy_intp c = n; c < width; c++) s[c] = 0;                                                        \
    }                                                                                                         \
    /* ds[0, n) = p[0, n) * (ds[0, n) - delta); the rest of the row 0 */                                       \
    static void score_grad_row_##SUFFIX(T *ds, const T *p, T delta, npy_intp n, npy_intp width) {              \
        for (npy_intp c = 0; c < n; c++) ds[c] = p[c] * (ds[c] - delta);                                       \
        for (npy_intp c = n; c < width; c++) ds[c] = 0;                                                       \
    }                                                                                                         \
    static T dot_##SUFFIX(const T *x, const T *y, npy_intp n) {                                               \
        T total = 0;                                                                                          \
        for (npy_intp c = 0; c < n; c++) total += x[c] * y[c];                                                \
        return total;                                                                                         \
    }

DEFINE_ROWS(float, f32, expf)
DEFINE_ROWS(double, f64, exp)

#define AT(view, item, b, s, h) ((view).base + ((b) * (view).sb + (s) * (view).ld + (h) * (view).sh) * (item))

/* The forward of unit (b, kv): every query head of the group. */
static void forward_unit(const job *j, npy_intp b, npy_intp kv) {
    npy_intp item = j->type == NPY_FLOAT32 ? 4 : 8;
    npy_intp block = BLOCK;
    for (npy_intp gi = 0; gi < j->G; gi++) {
        npy_intp h = kv * j->G + gi;
        char *p = j->probs + (((b * j->Hk + kv) * j->G + gi) * j->Sq * j->Sk) * item;
        for (npy_intp r0 = 0; r0 < j->Sq; r0 += block) {
            npy_intp r1 = r0 + block < j->Sq ? r0 + block : j->Sq, kend = keys_of_block(j, r1);
            char *pr = p + r0 * j->Sk * item;
            gemm_one(j->type, NO_TRANS, TRANS, r1 - r0, kend, j->D, j->scale, AT(j->q, item, b, r0, h), j->q.ld,
                 AT(j->k, item, b, 0, kv), j->k.ld, 0.0, pr, j->Sk);
            for (npy_intp i = r0; i < r1; i++) {
                char *row = p + i * j->Sk * item;
                if (j->type == NPY_FLOAT32)
                    softmax_row_f32((float *)row, keys_of_row(j, i), kend);
                else
                    softmax_row_f64((double *)row, keys_of_row(j, i), kend);
            }
            if (kend == 0) {   /* no keys: zero output rows */
                for (npy_intp i = r0; i < r1; i++) memset(AT(j->o, item, b, i, h), 0, j->Dv * item);
                continue;
            }
            gemm_one(j->type, NO_TRANS, NO_TRANS, r1 - r0, j->Dv, kend, 1.0, pr, j->Sk, AT(j->v, item, b, 0, kv), j->v.ld,
                 0.0, AT(j->o, item, b, r0, h), j->o.ld);
        }
    }
}

/* The backward of unit (b, kv); `scratch` holds BLOCK x Sk elements and `delta` Sq. dk and dv
 * start as zeros and collect every query head's and block's terms. */
static void backward_unit(const job *j, npy_intp b, npy_intp kv, char *scratch, char *delta) {
    npy_intp item = j->type == NPY_FLOAT32 ? 4 : 8;
    npy_intp block = BLOCK;
    for (npy_intp gi = 0; gi < j->G; gi++) {
        npy_intp h = kv * j->G + gi;
        const char *p = j->probs + (((b * j->Hk + kv) * j->G + gi) * j->Sq * j->Sk) * item;
        for (npy_intp i = 0; i < j->Sq; i++) {   /* delta_i = rowsum(dO * O) */
            if (j->type == NPY_FLOAT32)
                ((float *)delta)[i] = dot_f32((const float *)AT(j->g, item, b, i, h),
                                              (const float *)AT(j->o, item, b, i, h), j->Dv);
            else
                ((double *)delta)[i] = dot_f64((const double *)AT(j->g, item, b, i, h),
                                               (const double *)AT(j->o, item, b, i, h), j->Dv);
        }
        for (npy_intp r0 = 0; r0 < j->Sq; r0 += block) {
            npy_intp r1 = r0 + block < j->Sq ? r0 + block : j->Sq, kend = keys_of_block(j, r1), rows = r1 - r0;
            if (kend == 0) {
                for (npy_intp i = r0; i < r1; i++) memset(AT(j->dq, item, b, i, h), 0, j->D * item);
                continue;
            }
            const char *pr = p + r0 * j->Sk * item;
            /* dP = dO V^T, then dS in place (ld kend) */
            gemm_one(j->type, NO_TRANS, TRANS, rows, kend, j->Dv, 1.0, AT(j->g, item, b, r0, h), j->g.ld,
                 AT(j->v, item, b, 0, kv), j->v.ld, 0.0, scratch, kend);
            for (npy_intp i = r0; i < r1; i++) {
                char *row = scratch + (i - r0) * kend * item;
                const char *prow = pr + (i - r0) * j->Sk * item;
                npy_intp n = keys_of_row(j, i) < kend ? keys_of_row(j, i) : kend;
                if (j->type == NPY_FLOAT32)
                    score_grad_row_f32((float *)row, (const float *)prow, ((float *)delta)[i], n, kend);
                else
                    score_grad_row_f64((double *)row, (const double *)prow, ((double *)delta)[i], n, kend);
            }
            gemm_one(j->type, NO_TRANS, NO_TRANS, rows, j->D, kend, j->scale, scratch, kend, AT(j->k, item, b, 0, kv),
                 j->k.ld, 0.0, AT(j->dq, item, b, r0, h), j->dq.ld);
            gemm_one(j->type, TRANS, NO_TRANS, kend, j->D, rows, j->scale, scratch, kend, AT(j->q, item, b, r0, h),
                 j->q.ld, 1.0, AT(j->dk, item, b, 0, kv), j->dk.ld);
            gemm_one(j->type, TRANS, NO_TRANS, kend, j->Dv, rows, 1.0, pr, j->Sk, AT(j->g, item, b, r0, h), j->g.ld,
                 1.0, AT(j->dv, item, b, 0, kv), j->dv.ld);
        }
    }
}

/* One (batch, key head) unit on the calling thread with MKL on one thread; the backward's scratch rows are its
 * own (a unit is milliseconds of work: the allocation is noise). Sets j->failed when memory ran out. */
static void run_unit(void *ctx, long unit) {
    job *j = ctx;
    gemm_set_threads_local(1);
    if (!j->backward) {
        forward_unit(j, unit / j->Hk, unit % j->Hk);
        return;
    }
    npy_intp item = j->type == NPY_FLOAT32 ? 4 : 8;
    npy_intp rows = BLOCK < j->Sq ? BLOCK : j->Sq;
    char *scratch = malloc((size_t)((rows > 0 ? rows : 1) * (j->Sk > 0 ? j->Sk : 1) * item));
    char *delta = malloc((size_t)((j->Sq > 0 ? j->Sq : 1) * item));
    if (scratch != NULL && delta != NULL)
        backward_unit(j, unit / j->Hk, unit % j->Hk, scratch, delta);
    else
        atomic_store(&j->failed, 1);
    free(scratch);
    free(delta);
}

/* Runs the job's units on j->threads threads (this one and the worker pool's, _pool.c: units handed out one at
 * a time, so a descheduled thread delays at most the unit it holds); 0 if memory ran out. */
static int run_job(job *j) {
    Py_BEGIN_ALLOW_THREADS
    pool_run(j->threads, (long)(j->B * j->Hk), run_unit, j, NULL);
    Py_END_ALLOW_THREADS
    if (atomic_load(&j->failed)) PyErr_NoMemory();
    return !atomic_load(&j->failed);
}

/* The shapes and views shared by both directions; 0 (no error set) when not handled. */
static int describe_job(job *j, PyArrayObject *q, PyArrayObject *k, PyArrayObject *v, double scale, int causal,
                        int threads) {
    if (gemm_sgemm == NULL || !PyArray_CheckExact((PyObject *)q)) return 0;
    j->type = PyArray_TYPE(q);
    if (j->type != NPY_FLOAT32 && j->type != NPY_FLOAT64) return 0;
    if (!as_view(q, j->type, &j->q) || !as_view(k, j->type, &j->k) || !as_view(v, j->type, &j->v)) return 0;
    const npy_intp *sq = PyArray_SHAPE(q), *sk = PyArray_SHAPE(k), *sv = PyArray_SHAPE(v);
    j->B = sq[0];
    j->Sq = sq[1];
    j->H = sq[2];
    j->D = sq[3];
    j->Sk = sk[1];
    j->Hk = sk[2];
    j->Dv = sv[3];
    if (sk[0] != j->B || sv[0] != j->B || sk[3] != j->D || sv[1] != j->Sk || sv[2] != j->Hk || j->Hk == 0 ||
        j->H % j->Hk)
        return 0;
    if (j->Sq > INT_MAX || j->Sk > INT_MAX || j->D > INT_MAX || j->Dv > INT_MAX) return 0;
    j->G = j->H / j->Hk;
    j->scale = scale;
    j->causal = causal;
    npy_intp units = j->B * j->Hk;
    j->threads = threads < 1 ? 1 : threads > MAX_THREADS ? MAX_THREADS : threads;
    if (j->threads > units) j->threads = units > 0 ? (int)units : 1;
    return 1;
}

static void as_c_view(PyArrayObject *x, view4 *out) {   /* a new C-ordered [B, S, heads, cols] array */
    npy_intp item = PyArray_ITEMSIZE(x);
    out->base = PyArray_BYTES(x);
    out->sb = PyArray_STRIDES(x)[0] / item;
    out->ld = PyArray_SHAPE(x)[2] * PyArray_SHAPE(x)[3];
    out->sh = PyArray_SHAPE(x)[3];
}

PyObject *attention_forward(PyObject *self, PyObject *args) {
    PyArrayObject *q, *k, *v;
    double scale;
    int causal, threads;
    if (!PyArg_ParseTuple(args, "OOOdpi", &q, &k, &v, &scale, &causal, &threads)) return NULL;
    job j = {0};
    if (!describe_job(&j, q, k, v, scale, causal, threads)) Py_RETURN_NONE;
    npy_intp out_shape[4] = {j.B, j.Sq, j.H, j.Dv}, probs_shape[5] = {j.B, j.Hk, j.G, j.Sq, j.Sk};
    PyArrayObject *out = (PyArrayObject *)PyArray_SimpleNew(4, out_shape, j.type);
    PyArrayObject *probs = (PyArrayObject *)PyArray_SimpleNew(5, probs_shape, j.type);
    if (out == NULL || probs == NULL) {
        Py_XDECREF(out);
        Py_XDECREF(probs);
        return NULL;
    }
    as_c_view(out, &j.o);
    j.probs = PyArray_BYTES(probs);
    if (PyArray_SIZE(probs) > 0 && j.causal)   /* the blocks above the diagonal are never written */
        memset(j.probs, 0, PyArray_NBYTES(probs));
    if (!run_job(&j)) {
        Py_DECREF(out);
        Py_DECREF(probs);
        return NULL;
    }
    return Py_BuildValue("(NN)", out, probs);
}

PyObject *attention_backward(PyObject *self, PyObject *args) {
    PyArrayObject *g, *q, *k, *v, *o, *probs;
    double scale;
    int causal, threads;
    if (!PyArg_ParseTuple(args, "OOOOOOdpi", &g, &q, &k, &v, &o, &probs, &scale, &causal, &threads)) return NULL;
    job j = {0};
    if (!describe_job(&j, q, k, v, scale, causal, threads)) Py_RETURN_NONE;
    if (!as_view(g, j.type, &j.g) || !as_view(o, j.type, &j.o)) Py_RETURN_NONE;
    const npy_intp *sg = PyArray_SHAPE(g), *so = PyArray_SHAPE(o);
    npy_intp probs_shape[5] = {j.B, j.Hk, j.G, j.Sq, j.Sk};
    for (int d = 0; d < 4; d++) {
        npy_intp want = d == 0 ? j.B : d == 1 ? j.Sq : d == 2 ? j.H : j.Dv;
        if (sg[d] != want || so[d] != want) Py_RETURN_NONE;
    }
    if (!PyArray_CheckExact((PyObject *)probs) || PyArray_TYPE(probs) != j.type || PyArray_NDIM(probs) != 5 ||
        !PyArray_IS_C_CONTIGUOUS(probs) || !PyArray_ISALIGNED(probs))
        Py_RETURN_NONE;
    for (int d = 0; d < 5; d++)
        if (PyArray_SHAPE(probs)[d] != probs_shape[d]) Py_RETURN_NONE;
    j.probs = PyArray_BYTES(probs);
    j.backward = 1;
    npy_intp dq_shape[4] = {j.B, j.Sq, j.H, j.D}, dk_shape[4] = {j.B, j.Sk, j.Hk, j.D},
             dv_shape[4] = {j.B, j.Sk, j.Hk, j.Dv};
    PyArrayObject *dq = (PyArrayObject *)PyArray_SimpleNew(4, dq_shape, j.type);
    PyArrayObject *dk = (PyArrayObject *)PyArray_ZEROS(4, dk_shape, j.type, 0);
    PyArrayObject *dv = (PyArrayObject *)PyArray_ZEROS(4, dv_shape, j.type, 0);
    if (dq == NULL || dk == NULL || dv == NULL) {
        Py_XDECREF(dq);
        Py_XDECREF(dk);
        Py_XDECREF(dv);
        return NULL;
    }
    as_c_view(dq, &j.dq);
    as_c_view(dk, &j.dk);
    as_c_view(dv, &j.dv);
    if (!run_job(&j)) {
        Py_DECREF(dq);
        Py_DECREF(dk);
        Py_DECREF(dv);
        return NULL;
    }
    return Py_BuildValue("(NNN)", dq, dk, dv);
}
