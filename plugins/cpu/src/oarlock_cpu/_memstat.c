/*
 * oarlock_cpu._memstat: byte counters for numpy array memory (NEP 49).
 *
 * numpy lets a program replace the allocator of array data buffers with a
 * PyDataMem_Handler stored in a PyCapsule named "mem_handler".  This module
 * supplies one whose malloc/calloc/realloc/free wrap the C library's and keep
 * two process-wide counters: bytes allocated now and the peak since start or
 * the last reset_peak().  The "cpu" backend reports them as
 * memory_allocated() / max_memory_allocated().
 *
 * Block layout.  realloc() is not told the old size and free()'s size argument
 * comes from numpy's bookkeeping of the array, so each block carries its own
 * size in a header placed before the pointer numpy sees:
 *
 *     base (from malloc)        base + HEADER_SIZE (given to numpy)
 *     | size_t nbytes | padding | nbytes of array data ...
 *
 * HEADER_SIZE is 16 so the data keeps the alignment the C library's malloc
 * guarantees (alignof(max_align_t), 16 on x86-64 and aarch64), the same
 * alignment numpy's default handler gives.  A 64-byte (cache-line) alignment
 * would need aligned_alloc, and there is no aligned realloc in C, so growing a
 * block would mean allocate + copy + free every time; numpy does not need it.
 *
 * Counters are C11 atomics so allocations made without the GIL (numpy
 * releases it in places; free-threaded builds have none) stay exact.
 *
 * Which arrays are counted: numpy records in each array the handler that
 * allocated it and always frees / reallocates through that same handler, so
 * arrays allocated before install() (or in a context without it) never reach
 * these functions and cannot unbalance the counters.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>

/* PyDataMem_SetHandler / GetHandler appeared in the numpy 1.22 C API.  Pinning
 * the target keeps the compiled module importable with any numpy >= 1.22 at
 * run time, whichever (newer) numpy it was built against. */
#define NPY_NO_DEPRECATED_API NPY_1_22_API_VERSION
#define NPY_TARGET_VERSION NPY_1_22_API_VERSION
#include <numpy/arrayobject.h>

#include <stdatomic.h>
#include <limits.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__linux__)
#include <sys/mman.h>
#endif
#if defined(__GLIBC__)
#include <malloc.h>
#endif

#define HEADER_SIZE 16
_Static_assert(HEADER_SIZE >= sizeof(size_t), "header must hold the block size");
_Static_assert(HEADER_SIZE % _Alignof(max_align_t) == 0, "header must keep malloc's alignment");

/* Signed so a bookkeeping bug shows up as a negative number, not a huge one. */
static atomic_llong current_bytes = 0;
static atomic_llong peak_bytes = 0;

/* Mirrors numpy's default handler: it asks the kernel for transparent huge
 * pages on large blocks, which matters for big arrays when THP is in
 * "madvise" mode.  Refreshed from numpy's own setting by install(). */
static atomic_int use_hugepage = 1;
#define HUGEPAGE_THRESHOLD ((size_t)1 << 22) /* numpy's threshold: 4 MiB */

static void
count_alloc(size_t nbytes)
{
    long long now = atomic_fetch_add_explicit(&current_bytes, (long long)nbytes, memory_order_relaxed)
                    + (long long)nbytes;
    long long peak = atomic_load_explicit(&peak_bytes, memory_order_relaxed);
    /* Raise the peak unless another thread already raised it higher. */
    while (now > peak
           && !atomic_compare_exchange_weak_explicit(&peak_bytes, &peak, now, memory_order_relaxed,
                                                     memory_order_relaxed)) {
    }
}

static void
count_free(size_t nbytes)
{
    atomic_fetch_sub_explicit(&current_bytes, (long long)nbytes, memory_order_relaxed);
}

static void
advise_hugepage(void *base, size_t total)
{
#if defined(__linux__) && defined(MADV_HUGEPAGE)
    if (total >= HUGEPAGE_THRESHOLD && atomic_load_explicit(&use_hugepage, memory_order_relaxed)) {
        /* madvise needs a page-aligned start: skip to the first page boundary. */
        uintptr_t start = ((uintptr_t)base + 4095u) & ~(uintptr_t)4095u;
        uintptr_t end = (uintptr_t)base + total;
        if (end > start) {
            madvise((void *)start, end - start, MADV_HUGEPAGE); /* advisory: failure is harmless */
        }
    }
#else
    (void)base;
    (void)total;
#endif
}

static void *
finish_block(char *base, size_t nbytes)
{
    memcpy(base, &nbytes, sizeof nbytes);
    count_alloc(nbytes);
    return base + HEADER_SIZE;
}

static size_t
block_size(const char *user)
{
    size_t nbytes;
    memcpy(&nbytes, user - HEADER_SIZE, sizeof nbytes);
    return nbytes;
}

static void *
memstat_malloc(void *ctx, size_t nbytes)
{
    (void)ctx;
    if (nbytes > SIZE_MAX - HEADER_SIZE) {
        return NULL;
    }
    char *base = malloc(HEADER_SIZE + nbytes);
    if (base == NULL) {
        return NULL;
    }
    advise_hugepage(base, HEADER_SIZE + nbytes);
    return finish_block(base, nbytes);
}

static void *
memstat_calloc(void *ctx, size_t nelem, size_t elsize)
{
    (void)ctx;
    if (elsize != 0 && nelem > (SIZE_MAX - HEADER_SIZE) / elsize) {
        return NULL;
    }
    size_t nbytes = nelem * elsize;
    /* calloc, not malloc + memset: large blocks come zeroed from mmap and
     * their pages stay untouched until used. */
    char *base = calloc(1, HEADER_SIZE + nbytes);
    if (base == NULL) {
        return NULL;
    }
    advise_hugepage(base, HEADER_SIZE + nbytes);
    return finish_block(base, nbytes);
}

static void *
memstat_realloc(void *ctx, void *ptr, size_t nbytes)
{
    if (ptr == NULL) {
        return memstat_malloc(ctx, nbytes);
    }
    if (nbytes > SIZE_MAX - HEADER_SIZE) {
        return NULL;
    }
    /* Read the old size before realloc may release the block. */
    size_t old = block_size(ptr);
    char *base = realloc((char *)ptr - HEADER_SIZE, HEADER_SIZE + nbytes);
    if (base == NULL) {
        return NULL; /* the old block is still valid and still counted */
    }
    memcpy(base, &nbytes, sizeof nbytes);
    if (nbytes >= old) {
        count_alloc(nbytes - old);
    }
    else {
        count_free(old - nbytes);
    }
    return base + HEADER_SIZE;
}

static void
memstat_free(void *ctx, void *ptr, size_t size)
{
    (void)ctx;
    /* numpy derives `size` from its own bookkeeping of the array; the header
     * records exactly what this handler allocated, so counting it keeps the
     * counters balanced even if the two were ever to disagree. */
    (void)size;
    if (ptr == NULL) {
        return;
    }
    count_free(block_size(ptr));
    free((char *)ptr - HEADER_SIZE);
}

static PyDataMem_Handler memstat_handler = {
    "oarlock_cpu_memstat",
    1, /* version of the PyDataMem_Handler struct */
    {
        NULL, /* ctx: the counters are process-wide statics */
        memstat_malloc,
        memstat_calloc,
        memstat_realloc,
        memstat_free,
    },
};

/* One capsule for the life of the process: arrays keep a reference to the
 * handler that allocated them, and install() compares against it. */
static PyObject *handler_capsule = NULL;

static int
handler_is_ours(PyObject *handler)
{
    return handler == handler_capsule
           || (PyCapsule_CheckExact(handler)
               && PyCapsule_GetPointer(handler, "mem_handler") == (void *)&memstat_handler);
}

static void
refresh_hugepage_setting(void)
{
    /* numpy turns huge pages off on kernels where they are known to hurt and
     * lets the user toggle them; follow its setting. Best effort. */
    static const char *modules[] = {"numpy._core.multiarray", "numpy.core.multiarray"};
    for (size_t i = 0; i < sizeof modules / sizeof modules[0]; i++) {
        PyObject *mod = PyImport_ImportModule(modules[i]);
        if (mod == NULL) {
            PyErr_Clear();
            continue;
        }
        PyObject *value = PyObject_CallMethod(mod, "_get_madvise_hugepage", NULL);
        Py_DECREF(mod);
        if (value == NULL) {
            PyErr_Clear();
            continue;
        }
        int flag = PyObject_IsTrue(value);
        Py_DECREF(value);
        if (flag >= 0) {
            atomic_store_explicit(&use_hugepage, flag, memory_order_relaxed);
        }
        else {
            PyErr_Clear();
        }
        return;
    }
}

/* 1 if numpy's handler in the current context is ours, 0 if not, -1 with an exception set. */
static int
current_handler_is_ours(void)
{
    PyObject *handler = PyDataMem_GetHandler();
    if (handler == NULL) {
        return -1;
    }
    int ours = handler_is_ours(handler);
    Py_DECREF(handler);
    return ours;
}

static PyObject *
memstat_install(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    int ours = current_handler_is_ours();
    if (ours < 0) {
        return NULL;
    }
    if (ours) {
        Py_RETURN_FALSE;
    }
    refresh_hugepage_setting();
    PyObject *old = PyDataMem_SetHandler(handler_capsule);
    if (old == NULL) {
        return NULL;
    }
    Py_DECREF(old);
    Py_RETURN_TRUE;
}

static PyObject *
memstat_installed(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    int ours = current_handler_is_ours();
    return ours < 0 ? NULL : PyBool_FromLong(ours);
}

static PyObject *
memstat_current(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    return PyLong_FromLongLong(atomic_load_explicit(&current_bytes, memory_order_relaxed));
}

static PyObject *
memstat_peak(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    return PyLong_FromLongLong(atomic_load_explicit(&peak_bytes, memory_order_relaxed));
}

static PyObject *
memstat_reset_peak(PyObject *self, PyObject *noargs)
{
    (void)self;
    (void)noargs;
    atomic_store_explicit(&peak_bytes, atomic_load_explicit(&current_bytes, memory_order_relaxed),
                          memory_order_relaxed);
    Py_RETURN_NONE;
}

/* Keep blocks below `mmap_threshold` bytes in malloc's heap instead of mmap'ing each one, and keep up to
 * `trim_threshold` bytes of freed heap: glibc's default gives every array over 128 KiB fresh pages from the
 * kernel, which then fault in page by page on first write. A training step allocates and frees the same
 * multi-megabyte activations again and again; reusing heap memory made a small GPT's step 25-40% faster. */
static PyObject *
memstat_tune_malloc(PyObject *self, PyObject *args)
{
    (void)self;
    long long mmap_threshold, trim_threshold;
    if (!PyArg_ParseTuple(args, "LL", &mmap_threshold, &trim_threshold)) {
        return NULL;
    }
#if defined(__GLIBC__)
    if (mmap_threshold < 0 || mmap_threshold > INT_MAX || trim_threshold < 0 || trim_threshold > INT_MAX) {
        PyErr_SetString(PyExc_ValueError, "tune_malloc(): thresholds must be between 0 and INT_MAX bytes");
        return NULL;
    }
    int ok = mallopt(M_MMAP_THRESHOLD, (int)mmap_threshold) && mallopt(M_TRIM_THRESHOLD, (int)trim_threshold);
    return PyBool_FromLong(ok);
#else
    (void)mmap_threshold;
    (void)trim_threshold;
    Py_RETURN_FALSE;
#endif
}

static PyMethodDef memstat_methods[] = {
    {"tune_malloc", memstat_tune_malloc, METH_VARARGS,
     "tune_malloc(mmap_threshold, trim_threshold) -> bool\n\n"
     "Set glibc's M_MMAP_THRESHOLD and M_TRIM_THRESHOLD (bytes) so that large arrays reuse heap memory\n"
     "instead of fresh, page-faulting mmap'ed pages. False where the C library is not glibc or refused."},
    {"install", memstat_install, METH_NOARGS,
     "install() -> bool\n\n"
     "Make numpy allocate array data through the counting handler in the current\n"
     "context (thread / contextvars context). Idempotent: returns True if it was\n"
     "installed now, False if it already was."},
    {"installed", memstat_installed, METH_NOARGS,
     "installed() -> bool\n\nWhether the counting handler is numpy's handler in the current context."},
    {"current", memstat_current, METH_NOARGS,
     "current() -> int\n\nBytes of array data allocated through the handler and not yet freed."},
    {"peak", memstat_peak, METH_NOARGS,
     "peak() -> int\n\nHighest value of current() since import or the last reset_peak()."},
    {"reset_peak", memstat_reset_peak, METH_NOARGS,
     "reset_peak() -> None\n\nSet the peak to the current value."},
    {NULL, NULL, 0, NULL},
};

PyDoc_STRVAR(memstat_doc,
"Byte counters for numpy array memory, through numpy's NEP 49 allocator hooks.\n"
"\n"
"install() makes numpy allocate array data buffers through a handler that wraps\n"
"the C library's malloc/calloc/realloc/free and counts bytes; current() and\n"
"peak() read the counters (process-wide, shared by all threads) and\n"
"reset_peak() sets the peak to the current value. Only the data buffers are\n"
"counted (what numpy requests: headers, padding and the ndarray objects are\n"
"not), and every array allocated under the handler counts, tensor or not.\n"
"\n"
"Each block stores its size in a 16-byte header in front of the data, so data\n"
"keeps malloc's 16-byte alignment, as with numpy's default handler.\n"
"\n"
"Limitation: numpy keeps the handler in a context variable. install() affects\n"
"the current context only; threads started afterwards begin with an empty\n"
"context and use numpy's default handler (uncounted) unless install() runs in\n"
"them too. asyncio tasks copy the context when created and inherit it. Arrays\n"
"are always freed by the handler that allocated them, so mixing contexts never\n"
"corrupts the counters; it only leaves some arrays uncounted.\n");

static struct PyModuleDef memstat_module = {
    PyModuleDef_HEAD_INIT,
    .m_name = "oarlock_cpu._memstat",
    .m_doc = memstat_doc,
    .m_size = -1, /* the state is the process-wide counters above */
    .m_methods = memstat_methods,
};

PyMODINIT_FUNC
PyInit__memstat(void)
{
    import_array();

    if (handler_capsule == NULL) {
        handler_capsule = PyCapsule_New(&memstat_handler, "mem_handler", NULL);
        if (handler_capsule == NULL) {
            return NULL;
        }
    }
    PyObject *module = PyModule_Create(&memstat_module);
    if (module == NULL) {
        return NULL;
    }
    if (PyModule_AddIntConstant(module, "HEADER_SIZE", HEADER_SIZE) < 0) {
        Py_DECREF(module);
        return NULL;
    }
    return module;
}
