/*
 * Splitting a kernel's work over oarlock_cpu._gemm's worker pool, for the package's other extensions (_kernels,
 * _rows). Include once per extension, after Python.h: each extension has its own copy of these statics.
 *
 * PyTorch runs every large elementwise or row kernel on all cores (at.parallel_for); numpy runs them on one. So do
 * these kernels, on the same pool as the matrix products (one process-wide pool, reached through the capsule
 * `oarlock_cpu._gemm.pool_api`, so no extension starts threads of its own). The thread count is set from Python
 * (`set_threads`, by oarlock_cpu.parallel from the BLAS thread policy: OARLOCK_BLAS_THREADS=1 keeps everything on
 * one core). A kernel called while the pool is busy (from another Python thread, or from inside a pooled piece)
 * runs on its own thread rather than wait. Without _gemm (Windows, a partial build) everything runs serially.
 */
#ifndef OARLOCK_CPU_POOL_API_H
#define OARLOCK_CPU_POOL_API_H

#include "_pool.h"

#define POOL_API_CAPSULE "oarlock_cpu._gemm.pool_api"

/* Elements of work below which a piece is not worth handing to another thread (some 10-40 us): a call of fewer
 * than 2 * SPLIT_GRAIN stays on its thread, as below PyTorch's grain of 32768. */
#define SPLIT_GRAIN 16384

/* The fewest rows of n elements a piece should hold to make a grain of work. */
static Py_ssize_t split_min_rows(Py_ssize_t n) { return n >= SPLIT_GRAIN ? 1 : SPLIT_GRAIN / (n > 0 ? n : 1); }

static const pool_api *split_pool = NULL;
static int split_threads = 1;   /* until set_threads: one thread, and the pool not looked up */

/* Find the pool (none: serial, and no error). At the first set_threads, not at module init: the package's
 * __init__ imports this extension before _gemm, and importing _gemm from inside that import would fail. */
static void split_import_pool(void)
{
    split_pool = (const pool_api *)PyCapsule_Import(POOL_API_CAPSULE, 0);
    if (split_pool == NULL || split_pool->version < 1) {
        split_pool = NULL;
        PyErr_Clear();
    }
}

/* set_threads(n): how many threads a large kernel call may use from now on (>= 1). */
static PyObject *py_set_threads(PyObject *self, PyObject *arg)
{
    static int looked_up = 0;
    long n = PyLong_AsLong(arg);
    (void)self;
    if (n == -1 && PyErr_Occurred())
        return NULL;
    if (n < 1) {
        PyErr_Format(PyExc_ValueError, "set_threads(): n must be at least 1, got %ld", n);
        return NULL;
    }
    if (n > 1 && !looked_up) {
        split_import_pool();
        looked_up = 1;
    }
    split_threads = (int)n;
    Py_RETURN_NONE;
}

#define SET_THREADS_METHOD                                                                                   \
    {"set_threads", py_set_threads, METH_O,                                                                  \
     "set_threads(n): the threads (of oarlock_cpu._gemm's pool) a large kernel call may use; 1: one core."}

typedef void (*range_fn)(void *ctx, Py_ssize_t begin, Py_ssize_t end);

typedef struct {
    range_fn fn;
    void *ctx;
    Py_ssize_t n, chunk;
} split_job;

static void split_piece(void *ctx, long piece)
{
    const split_job *j = (const split_job *)ctx;
    Py_ssize_t begin = (Py_ssize_t)piece * j->chunk, end = begin + j->chunk;
    j->fn(j->ctx, begin, end < j->n ? end : j->n);
}

/* fn(ctx, begin, end) over [0, n): in pieces (boundaries at multiples of `align`) on the pool when n is at least
 * 2 * min_piece and more than one thread is allowed, else in one call on this thread. Two pieces per thread, so a
 * descheduled thread's second piece is taken by the others. Call without the GIL. The pieces must be independent:
 * where they are is not part of the result. */
static void split_range(Py_ssize_t n, Py_ssize_t min_piece, Py_ssize_t align, range_fn fn, void *ctx)
{
    int threads = split_threads;
    if (split_pool == NULL || threads <= 1 || n < 2 * min_piece || split_pool->busy()) {
        fn(ctx, 0, n);
        return;
    }
    long pieces = 2L * threads;
    Py_ssize_t chunk = (n + pieces - 1) / pieces;
    if (chunk < min_piece)
        chunk = min_piece;
    chunk = (chunk + align - 1) / align * align;
    split_job job = {fn, ctx, n, chunk};
    split_pool->run(threads, (long)((n + chunk - 1) / chunk), split_piece, &job, NULL);
}

/* fn(ctx, p) for every p in [0, pieces), on the pool when more than one thread is allowed and the pool is free,
 * else in order on this thread. For work cut into pieces that do not depend on the thread count (so that a
 * reduction over the pieces gives the same bits on any number of threads). Call without the GIL. */
static void split_pieces(long pieces, pool_fn fn, void *ctx)
{
    if (split_pool == NULL || split_threads <= 1 || pieces <= 1 || split_pool->busy()) {
        for (long p = 0; p < pieces; p++)
            fn(ctx, p);
        return;
    }
    split_pool->run(split_threads, pieces, fn, ctx, NULL);
}

#endif
