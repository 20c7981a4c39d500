/*
 * oarlock_cpu._gemm: numpy's matmul for float32 / float64 through a cblas library loaded at run time
 * (Intel MKL's libmkl_rt, found by oarlock_cpu.mkl), so no BLAS is needed to build this module.
 *
 *   load(path) -> None                     dlopen the library, resolve cblas_[sd]gemm(_batch_strided)
 *                                          and MKL_Set_Num_Threads_Local; raises OSError if it cannot
 *   matmul(a, b, threads, out=None, split=False)
 *                                          a @ b with numpy's result (shape, dtype, C order), or None when
 *                                          the operands are not ones handled here (the caller then uses
 *                                          numpy): a and b ndarrays of one dtype, float32 or float64, at
 *                                          least 2-D, each one's matrices row-major or column-major (a
 *                                          transposed view), any positive batch strides, numpy's broadcasting
 *                                          of the batch dimensions.  `out`, when given, must have the
 *                                          result's shape and dtype, row-major matrices, and overlap neither
 *                                          operand; it is returned.
 *
 * The batch dimensions are merged where all three operands allow; the innermost merged one is one
 * cblas_?gemm_batch_strided call (a broadcast operand has stride 0), the others a loop around it, and a
 * 2-D b against stacked row-major a's is one GEMM over all their rows.
 *
 * Why: numpy's OpenBLAS runs the GEMMs of a training step (64 x 784 x 256, 2048 x 128 x 512, ...) 13-40%
 * slower per core than MKL on this machine's AVX-512 cores, and those GEMMs are most of a step.  The GIL is
 * released during the product; `threads` > 0 sets MKL's thread count for the calling thread first, or, with
 * `split`, the product is cut into pieces (batch entries, blocks of rows or columns of the result) that MKL runs
 * on one thread each, shared by `threads` threads of our own pool (_pool.c: no OpenMP team, no barrier).
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <dlfcn.h>

#define NPY_NO_DEPRECATED_API NPY_1_22_API_VERSION
#define NPY_TARGET_VERSION NPY_1_22_API_VERSION
#define PY_ARRAY_UNIQUE_SYMBOL oarlock_cpu_gemm_ARRAY_API
#include <numpy/arrayobject.h>

#include "_gemm.h"
#include "_pool.h"

typedef void (*sgemm_batch_t)(int, int, int, blas_int, blas_int, blas_int, float, const float *, blas_int,
                              blas_int, const float *, blas_int, blas_int, float, float *, blas_int, blas_int,
                              blas_int);
typedef void (*dgemm_batch_t)(int, int, int, blas_int, blas_int, blas_int, double, const double *, blas_int,
                              blas_int, const double *, blas_int, blas_int, double, double *, blas_int, blas_int,
                              blas_int);
sgemm_t gemm_sgemm;
dgemm_t gemm_dgemm;
set_threads_local_t gemm_set_threads_local;
static sgemm_batch_t sgemm_batch;
static dgemm_batch_t dgemm_batch;

static PyObject *gemm_load(PyObject *self, PyObject *args) {
    const char *path;
    if (!PyArg_ParseTuple(args, "s", &path)) return NULL;
    void *lib = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (lib == NULL) {
        PyErr_Format(PyExc_OSError, "oarlock_cpu._gemm.load: cannot open %s: %s", path, dlerror());
        return NULL;
    }
    gemm_sgemm = (sgemm_t)dlsym(lib, "cblas_sgemm");
    gemm_dgemm = (dgemm_t)dlsym(lib, "cblas_dgemm");
    sgemm_batch = (sgemm_batch_t)dlsym(lib, "cblas_sgemm_batch_strided");
    dgemm_batch = (dgemm_batch_t)dlsym(lib, "cblas_dgemm_batch_strided");
    gemm_set_threads_local = (set_threads_local_t)dlsym(lib, "MKL_Set_Num_Threads_Local");
    if (!gemm_sgemm || !gemm_dgemm || !sgemm_batch || !dgemm_batch || !gemm_set_threads_local) {
        gemm_sgemm = NULL;
        gemm_dgemm = NULL;
        PyErr_Format(PyExc_OSError, "oarlock_cpu._gemm.load: %s lacks cblas_sgemm, cblas_dgemm, their "
                     "_batch_strided forms or MKL_Set_Num_Threads_Local", path);
        return NULL;
    }
    Py_RETURN_NONE;
}

/* One operand's matrices in cblas terms: a transpose flag and the leading dimension of the row-major
 * storage, from the strides (in elements) of its last two dimensions; 0 when neither layout fits. */
typedef struct {
    int trans;
    npy_intp ld;
} layout;

static int matrix_layout(PyArrayObject *x, layout *o) {
    int nd = PyArray_NDIM(x);
    npy_intp item = PyArray_ITEMSIZE(x);
    const npy_intp *shape = PyArray_SHAPE(x), *strides = PyArray_STRIDES(x);
    npy_intp rows = shape[nd - 2], cols = shape[nd - 1];
    npy_intp rs = strides[nd - 2], cs = strides[nd - 1];
    if (rs % item || cs % item) return 0;
    rs /= item;
    cs /= item;
    /* a dimension of 1 may have any stride: give it the one that makes the layout valid */
    if (cols == 1) cs = 1;
    if (rows == 1 && cs == 1) rs = cols;
    if (cs == 1 && rs >= (cols > 1 ? cols : 1)) {
        o->trans = NO_TRANS;
        o->ld = rs;
    } else if (rs == 1 && cs >= (rows > 1 ? rows : 1)) {
        o->trans = TRANS;
        o->ld = cs;
    } else {
        return 0;
    }
    return o->ld <= INT_MAX;
}

/* The stride in elements of x's batch dimension d of the result's nbatch ones (right-aligned, numpy's
 * broadcasting): 0 where x lacks the dimension or has size 1 there; -1 where it cannot be used (negative). */
static npy_intp batch_stride(PyArrayObject *x, int d, int nbatch) {
    int xd = d - (nbatch - (PyArray_NDIM(x) - 2));
    if (xd < 0 || PyArray_SHAPE(x)[xd] == 1) return 0;
    npy_intp s = PyArray_STRIDES(x)[xd], item = PyArray_ITEMSIZE(x);
    return s >= 0 && s % item == 0 ? s / item : -1;   /* 0: a broadcast view */
}

/* whether two arrays' memory ranges overlap (a false positive only sends the product to numpy) */
static int may_share(PyArrayObject *x, PyArrayObject *y) {
    PyArrayObject *pair[2] = {x, y};
    char *lo[2], *hi[2];
    for (int i = 0; i < 2; i++) {
        npy_intp low = 0, high = PyArray_ITEMSIZE(pair[i]);
        for (int d = 0; d < PyArray_NDIM(pair[i]); d++) {
            npy_intp span = (PyArray_SHAPE(pair[i])[d] - 1) * PyArray_STRIDES(pair[i])[d];
            if (span < 0) low += span; else high += span;
        }
        lo[i] = PyArray_BYTES(pair[i]) + low;
        hi[i] = PyArray_BYTES(pair[i]) + high;
    }
    return lo[0] < hi[1] && lo[1] < hi[0];
}

/* The batch loop after merging: dims[0] outermost; count[d] matrices with strides a/b/c[d] (elements). */
typedef struct {
    int n;
    npy_intp count[NPY_MAXDIMS], a[NPY_MAXDIMS], b[NPY_MAXDIMS], c[NPY_MAXDIMS];
} batch_loop;

void gemm_one(int type, int ta, int tb, npy_intp m, npy_intp n, npy_intp k, double alpha, const void *a,
              npy_intp lda, const void *b, npy_intp ldb, double beta, void *c, npy_intp ldc) {
    if (m == 0 || n == 0) return;
    if (type == NPY_FLOAT32)
        gemm_sgemm(ROW_MAJOR, ta, tb, (blas_int)m, (blas_int)n, (blas_int)k, (float)alpha, a, (blas_int)lda, b,
                   (blas_int)ldb, (float)beta, c, (blas_int)ldc);
    else
        gemm_dgemm(ROW_MAJOR, ta, tb, (blas_int)m, (blas_int)n, (blas_int)k, alpha, a, (blas_int)lda, b,
                   (blas_int)ldb, beta, c, (blas_int)ldc);
}

/* `count` products C_i = op(A_i) op(B_i), the operands `sa`, `sb`, `sc` elements apart: one batched call, or
 * (`separate`: results whose rows interleave, a [B, S, H, D] view, which MKL's batched call refuses) one call each */
typedef struct {
    int type, ta, tb, separate;
    npy_intp m, n, k, count, item;
    const char *a, *b;
    char *c;
    npy_intp lda, sa, ldb, sb, ldc, sc;
    const char *bias;   /* NULL, or n values added to every row of every C_i (a linear layer's bias) */
} product;

/* C_i += bias on each row, right after the product wrote it (still in cache, on the thread that wrote it: one
 * pass less than numpy's broadcast add over the whole result afterwards) */
static void add_bias(const product *p) {
    for (npy_intp i = 0; i < p->count; i++)
        for (npy_intp r = 0; r < p->m; r++) {
            char *row = p->c + (i * p->sc + r * p->ldc) * p->item;
            if (p->type == NPY_FLOAT32) {
                float *c = (float *)row;
                const float *b = (const float *)p->bias;
                for (npy_intp j = 0; j < p->n; j++) c[j] += b[j];
            } else {
                double *c = (double *)row;
                const double *b = (const double *)p->bias;
                for (npy_intp j = 0; j < p->n; j++) c[j] += b[j];
            }
        }
}

static void run(const product *p) {
    if (p->count == 1 || p->separate) {
        for (npy_intp i = 0; i < p->count; i++)
            gemm_one(p->type, p->ta, p->tb, p->m, p->n, p->k, 1.0, p->a + i * p->sa * p->item, p->lda,
                     p->b + i * p->sb * p->item, p->ldb, 0.0, p->c + i * p->sc * p->item, p->ldc);
    } else if (p->type == NPY_FLOAT32) {
        sgemm_batch(ROW_MAJOR, p->ta, p->tb, p->m, p->n, p->k, 1.0f, (const float *)p->a, p->lda, p->sa,
                    (const float *)p->b, p->ldb, p->sb, 0.0f, (float *)p->c, p->ldc, p->sc, p->count);
    } else {
        dgemm_batch(ROW_MAJOR, p->ta, p->tb, p->m, p->n, p->k, 1.0, (const double *)p->a, p->lda, p->sa,
                    (const double *)p->b, p->ldb, p->sb, 0.0, (double *)p->c, p->ldc, p->sc, p->count);
    }
    if (p->bias != NULL) add_bias(p);
}

/* A product cut into independent pieces for the worker pool (_pool.c), each run by MKL on one thread: blocks of
 * batch entries, or of the result's rows or columns (every piece then reads all of the other operand). */
typedef struct {
    product whole;
    int axis;          /* 0: batch entries, 1: rows of C, 2: columns of C */
    npy_intp extent;   /* entries, rows or columns per piece */
} split_product;

static void run_piece(void *ctx, long piece) {
    const split_product *s = ctx;
    product p = s->whole;
    npy_intp lo = piece * s->extent, item = p.item;
    if (s->axis == 0) {
        p.count = p.count - lo < s->extent ? p.count - lo : s->extent;
        p.a += lo * p.sa * item;
        p.b += lo * p.sb * item;
        p.c += lo * p.sc * item;
    } else if (s->axis == 1) {   /* rows of op(A): rows of A, or columns of a transposed A */
        p.m = p.m - lo < s->extent ? p.m - lo : s->extent;
        p.a += (p.ta == NO_TRANS ? lo * p.lda : lo) * item;
        p.c += lo * p.ldc * item;
    } else {                     /* columns of op(B) */
        p.n = p.n - lo < s->extent ? p.n - lo : s->extent;
        p.b += (p.tb == NO_TRANS ? lo : lo * p.ldb) * item;
        p.c += lo * item;
        if (p.bias != NULL) p.bias += lo * item;
    }
    run(&p);
}

static void one_mkl_thread(void) { gemm_set_threads_local(1); }

/* Runs p on `threads` threads of the pool; pieces: up to 4 per thread over the batch, else 2 per thread over
 * the longer side of C, in blocks of a multiple of 32 rows or 64 columns (whole cache lines and SIMD panels) */
static void run_split(const product *p, int threads) {
    split_product s = {.whole = *p};
    npy_intp pieces;
    if (p->count >= threads) {
        s.axis = 0;
        npy_intp want = p->count < 4 * threads ? p->count : 4 * threads;
        s.extent = (p->count + want - 1) / want;
        pieces = (p->count + s.extent - 1) / s.extent;
    } else {
        s.axis = p->m >= p->n ? 1 : 2;
        npy_intp side = s.axis == 1 ? p->m : p->n, unit = s.axis == 1 ? 32 : 64;
        s.extent = (side + threads - 1) / threads;
        s.extent = (s.extent + unit - 1) / unit * unit;
        pieces = (side + s.extent - 1) / s.extent;
        if (p->count > 1) pieces = 1;   /* a few large entries: not cut (rare; MKL's batched call on one thread) */
    }
    if (pieces <= 1) {
        run(p);
        return;
    }
    pool_run(threads, (long)pieces, run_piece, &s, one_mkl_thread);
}

static PyObject *gemm_matmul(PyObject *self, PyObject *args) {
    PyObject *ao, *bo, *oo = Py_None, *biaso = Py_None;
    int threads, split = 0;
    if (!PyArg_ParseTuple(args, "OOi|OpO", &ao, &bo, &threads, &oo, &split, &biaso)) return NULL;
    if (gemm_sgemm == NULL || !PyArray_CheckExact(ao) || !PyArray_CheckExact(bo)) Py_RETURN_NONE;
    PyArrayObject *a = (PyArrayObject *)ao, *b = (PyArrayObject *)bo;
    int type = PyArray_TYPE(a);
    if ((type != NPY_FLOAT32 && type != NPY_FLOAT64) || PyArray_TYPE(b) != type) Py_RETURN_NONE;
    if (!PyArray_ISNOTSWAPPED(a) || !PyArray_ISNOTSWAPPED(b) || !PyArray_ISALIGNED(a) || !PyArray_ISALIGNED(b))
        Py_RETURN_NONE;
    int na = PyArray_NDIM(a), nb = PyArray_NDIM(b);
    if (na < 2 || nb < 2) Py_RETURN_NONE;
    const npy_intp *sa = PyArray_SHAPE(a), *sb = PyArray_SHAPE(b);
    npy_intp m = sa[na - 2], k = sa[na - 1], n = sb[nb - 1];
    if (sb[nb - 2] != k || m > INT_MAX || n > INT_MAX || k > INT_MAX) Py_RETURN_NONE;  /* numpy raises its own */
    const char *bias = NULL;   /* a contiguous [n] array of the operands' dtype, or nothing fused */
    if (biaso != Py_None) {
        PyArrayObject *bv = (PyArrayObject *)biaso;
        if (!PyArray_CheckExact(biaso) || PyArray_TYPE(bv) != type || PyArray_NDIM(bv) != 1 ||
            PyArray_SHAPE(bv)[0] != n || !PyArray_IS_C_CONTIGUOUS(bv) || !PyArray_ISALIGNED(bv) ||
            !PyArray_ISNOTSWAPPED(bv))
            Py_RETURN_NONE;
        bias = PyArray_BYTES(bv);
    }
    /* the result's batch shape: numpy's broadcasting of the two batch shapes */
    int nbatch = (na > nb ? na : nb) - 2;
    npy_intp out_shape[NPY_MAXDIMS];
    for (int d = 0; d < nbatch; d++) {
        int ad = d - (nbatch - (na - 2)), bd = d - (nbatch - (nb - 2));
        npy_intp x = ad >= 0 ? sa[ad] : 1, y = bd >= 0 ? sb[bd] : 1;
        if (x != y && x != 1 && y != 1) Py_RETURN_NONE;
        out_shape[d] = x == 1 ? y : x;
    }
    out_shape[nbatch] = m;
    out_shape[nbatch + 1] = n;
    layout la, lb, lc;
    if (!matrix_layout(a, &la) || !matrix_layout(b, &lb)) Py_RETURN_NONE;
    PyArrayObject *out;
    if (oo == Py_None) {
        out = (PyArrayObject *)PyArray_SimpleNew(nbatch + 2, out_shape, type);
        if (out == NULL) return NULL;
    } else {
        out = (PyArrayObject *)oo;
        if (!PyArray_CheckExact(oo) || PyArray_TYPE(out) != type || PyArray_NDIM(out) != nbatch + 2 ||
            !PyArray_ISWRITEABLE(out) || !PyArray_ISALIGNED(out) || !PyArray_ISNOTSWAPPED(out))
            Py_RETURN_NONE;
        for (int d = 0; d < nbatch + 2; d++)
            if (PyArray_SHAPE(out)[d] != out_shape[d]) Py_RETURN_NONE;
        /* overlapping operands: numpy's own matmul buffers them; leave those to it */
        if (may_share(out, a) || may_share(out, b)) Py_RETURN_NONE;
        Py_INCREF(out);
    }
    if (PyArray_SIZE(out) == 0) return (PyObject *)out;
    if (!matrix_layout(out, &lc) || lc.trans != NO_TRANS || k == 0) goto numpy;  /* k == 0: numpy's zeros */
    /* batch dimensions of more than one matrix, adjacent ones merged where all three operands allow */
    batch_loop loop = {0};
    for (int d = 0; d < nbatch; d++) {
        if (out_shape[d] == 1) continue;
        npy_intp xa = batch_stride(a, d, nbatch), xb = batch_stride(b, d, nbatch), xc = batch_stride(out, d, nbatch);
        if (xa < 0 || xb < 0 || xc <= 0) goto numpy;
        int last = loop.n - 1;
        if (last >= 0 && loop.a[last] == xa * out_shape[d] && loop.b[last] == xb * out_shape[d] &&
            loop.c[last] == xc * out_shape[d]) {
            loop.count[last] *= out_shape[d];
            loop.a[last] = xa;
            loop.b[last] = xb;
            loop.c[last] = xc;
        } else {
            loop.count[loop.n] = out_shape[d];
            loop.a[loop.n] = xa;
            loop.b[loop.n] = xb;
            loop.c[loop.n] = xc;
            loop.n++;
        }
    }
    npy_intp inner = loop.n ? loop.count[loop.n - 1] : 1;
    npy_intp ia = loop.n ? loop.a[loop.n - 1] : 0, ib = loop.n ? loop.b[loop.n - 1] : 0;
    npy_intp ic = loop.n ? loop.c[loop.n - 1] : 0;
    /* one b for a block of row-major a's stacked as rows: one GEMM of inner * m rows */
    int fold = loop.n == 1 && ib == 0 && la.trans == NO_TRANS && ia == m * la.ld && ic == m * lc.ld;
    if (fold ? inner * m > INT_MAX : (inner > INT_MAX || ia > INT_MAX || ib > INT_MAX || ic > INT_MAX)) goto numpy;
    npy_intp outer = 1;
    for (int d = 0; d + 1 < loop.n; d++) outer *= loop.count[d];
    npy_intp item = PyArray_ITEMSIZE(out);
    const char *pa = PyArray_BYTES(a), *pb = PyArray_BYTES(b);
    char *pc = PyArray_BYTES(out);
    /* split: MKL on one thread per piece, the pieces shared by `threads` threads of our pool (_pool.c) */
    int pool = split && threads > 1 ? threads : 1;
    Py_BEGIN_ALLOW_THREADS
    if (threads > 0) gemm_set_threads_local(pool > 1 ? 1 : threads);
    npy_intp index[NPY_MAXDIMS] = {0};
    for (npy_intp o = 0; o < outer; o++) {
        npy_intp oa = 0, ob = 0, oc = 0;   /* offsets of this outer position, from its index per loop dim */
        for (int d = 0; d + 1 < loop.n; d++) {
            oa += index[d] * loop.a[d];
            ob += index[d] * loop.b[d];
            oc += index[d] * loop.c[d];
        }
        product p = {.type = type, .ta = la.trans, .tb = lb.trans, .m = m, .n = n, .k = k, .count = inner,
                     .item = item, .a = pa + oa * item, .b = pb + ob * item, .c = pc + oc * item, .lda = la.ld,
                     .sa = ia, .ldb = lb.ld, .sb = ib, .ldc = lc.ld, .sc = ic, .separate = ic < m * lc.ld,
                     .bias = bias};
        if (fold) {   /* one GEMM of all the stacked rows */
            p.m = inner * m;
            p.count = 1;
            p.separate = 0;
        }
        run_split(&p, pool);
        for (int d = loop.n - 2; d >= 0; d--) {   /* next outer index, last dimension fastest */
            if (++index[d] < loop.count[d]) break;
            index[d] = 0;
        }
    }
    Py_END_ALLOW_THREADS
    return (PyObject *)out;
numpy:
    Py_DECREF(out);
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"load", gemm_load, METH_VARARGS, "load(path): open a cblas library (Intel MKL's libmkl_rt)."},
    {"matmul", gemm_matmul, METH_VARARGS,
     "matmul(a, b, threads, out=None, split=False, bias=None) -> ndarray or None: a @ b (+ bias, [n], added to every "
     "row) through the loaded cblas, None where not handled; split: the product cut into pieces run by MKL on one "
     "thread each, on `threads` pool threads."},
    {"attention_forward", attention_forward, METH_VARARGS,
     "attention_forward(q, k, v, scale, causal, threads) -> (out, probs) or None: see _attention.c."},
    {"attention_backward", attention_backward, METH_VARARGS,
     "attention_backward(g, q, k, v, out, probs, scale, causal, threads) -> (dq, dk, dv) or None: see _attention.c."},
    {"flashmask_forward", flashmask_forward, METH_VARARGS,
     "flashmask_forward(q, kt, v, out, lse, kv_heads, causal, block_q, block_k, threads, tiles=True) -> True or None: "
     "see _flash.c."},
    {"flashmask_tiles", flashmask_tiles, METH_NOARGS,
     "flashmask_tiles() -> bool: whether flashmask_forward can use its AVX-512 tiles on this CPU (_flash_tiles.c)."},
    {"flashmask_backward", flashmask_backward, METH_VARARGS,
     "flashmask_backward(q, do, delta, lse2, k, kt, vt, dk, dv, dqs, group, causal, block_q, block_k) -> True or None: "
     "see _flash.c."},
    {"flashmask_transpose_heads", flashmask_transpose_heads, METH_VARARGS,
     "flashmask_transpose_heads(x, dst, kv_heads, threads) -> True or None: dst[f, d, s] <- x[b, s, h, d]; see "
     "_flash.c."},
    {"flashmask_gather_heads", flashmask_gather_heads, METH_VARARGS,
     "flashmask_gather_heads(x, dst, kv_heads, scale, threads) -> True or None: dst[f, s * G + g, :D] <- scale * "
     "x[b, s, h * G + g]; see _flash.c."},
    {"flashmask_scatter_heads", flashmask_scatter_heads, METH_VARARGS,
     "flashmask_scatter_heads(x, parts, dst, kv_heads, scale, threads) -> True or None: dst[b, s, h * G + g, :] <- "
     "(x[f, s * G + g] + sum of parts[., f, s * G + g]) * scale; see _flash.c."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_gemm", NULL, -1, methods};

/* The worker pool, for oarlock-cpu's other extensions (_pool_api.h): one pool per process, not one per extension. */
static const pool_api POOL_API = {1, pool_run, pool_busy};

PyMODINIT_FUNC PyInit__gemm(void) {
    import_array();
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    PyObject *api = PyCapsule_New((void *)&POOL_API, "oarlock_cpu._gemm.pool_api", NULL);
    if (api == NULL || PyModule_AddObject(m, "pool_api", api) < 0) {
        Py_XDECREF(api);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
