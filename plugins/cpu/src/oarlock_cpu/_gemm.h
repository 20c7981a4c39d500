/*
 * What the two halves of oarlock_cpu._gemm share: the cblas entry points resolved by load() (_gemm.c) and
 * used by the fused attention kernels (_attention.c). Include it after numpy/arrayobject.h (npy_intp).
 */
#ifndef OARLOCK_CPU_GEMM_H
#define OARLOCK_CPU_GEMM_H

#include <Python.h>

/* cblas enums (the values every cblas uses) and the MKL_INT of libmkl_rt's default LP64 interface */
enum { ROW_MAJOR = 101, NO_TRANS = 111, TRANS = 112 };
typedef int blas_int;

typedef void (*sgemm_t)(int, int, int, blas_int, blas_int, blas_int, float, const float *, blas_int,
                        const float *, blas_int, float, float *, blas_int);
typedef void (*dgemm_t)(int, int, int, blas_int, blas_int, blas_int, double, const double *, blas_int,
                        const double *, blas_int, double, double *, blas_int);
typedef int (*set_threads_local_t)(int);

extern sgemm_t gemm_sgemm;
extern dgemm_t gemm_dgemm;
extern set_threads_local_t gemm_set_threads_local;

/* One GEMM in `type`'s precision (NPY_FLOAT32 or NPY_FLOAT64): C = alpha op(A) op(B) + beta C, row-major */
void gemm_one(int type, int ta, int tb, npy_intp m, npy_intp n, npy_intp k, double alpha, const void *a,
              npy_intp lda, const void *b, npy_intp ldb, double beta, void *c, npy_intp ldc);

PyObject *attention_forward(PyObject *self, PyObject *args);
PyObject *attention_backward(PyObject *self, PyObject *args);
PyObject *flashmask_forward(PyObject *self, PyObject *args);   /* _flash.c */
PyObject *flashmask_backward(PyObject *self, PyObject *args);  /* _flash.c */
PyObject *flashmask_tiles(PyObject *self, PyObject *args);  /* _flash.c */
PyObject *flashmask_transpose_heads(PyObject *self, PyObject *args);  /* _flash.c */
PyObject *flashmask_gather_heads(PyObject *self, PyObject *args);  /* _flash.c */
PyObject *flashmask_scatter_heads(PyObject *self, PyObject *args);  /* _flash.c */

#endif
