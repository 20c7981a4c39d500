/*
 * oarlock_cpu._optim: the Adam / AdamW (and SGD) updates as numpy ufuncs, one pass over the parameter, its
 * gradient and its moments instead of the dozen array passes of the generic kernel (torch's fused
 * Adam does the same).  Paddle's formula, as oarlock_ops.optimizer_update spells it:
 *
 *   p  = p * decay                      decay = 1 - lr * weight_decay (AdamW), else 1
 *   g' = g + p * l2                     l2 = weight_decay (Adam's coupled L2), else 0 (g' = g)
 *   m1 = m1 + (g' - m1) * (1 - beta1)
 *   m2 = m2 * beta2 + g'^2 * (1 - beta2)
 *   v  = max(v, m2)                     amsgrad only (adam_amsgrad): the running maximum is used
 *   p  = p - step_size * m1 / (sqrt(v or m2) + eps_scaled)
 *
 * with eps_scaled = epsilon sqrt(1 - beta2^t) and step_size = lr sqrt(1 - beta2^t) / (1 - beta1^t)
 * computed by the caller.  The scalars are 0-d inputs, so numpy broadcasts them with stride 0.
 *
 *   adam(p, g, m1, m2, decay, l2, 1 - beta1, beta2, 1 - beta2, eps_scaled, step_size, out=(p, m1, m2))
 *   adam_amsgrad(p, g, m1, m2, v, decay, l2, ..., out=(p, m1, m2, v))
 *
 * Arithmetic is in the arrays' dtype (float32 state stays float32, as in the generic kernel), with
 * the generic kernel's operations in its order and its scalars (1 - beta1 is rounded once, by the
 * caller), so the results are bit for bit the generic kernel's.  Loops take any strides; the contiguous case, every array
 * with unit stride and the scalars with stride 0, gets its own loop that gcc vectorises.
 */

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <math.h>
#include <string.h>

#define NPY_NO_DEPRECATED_API NPY_1_22_API_VERSION
#define NPY_TARGET_VERSION NPY_1_22_API_VERSION
#include <numpy/arrayobject.h>
#include <numpy/ufuncobject.h>

/* No FMA contraction (-ffp-contract=off), so every clone rounds alike. */
#include "_clones.h"   /* CLONES: AVX-512 / AVX2 / baseline versions picked at load */
#include "_pool_api.h" /* split_range: large updates on the worker pool (each element alone: the same bits) */

#define ADAM_BODY(T, SQRT, P, G, M1, M2, V, AMSGRAD)                                  \
    do {                                                                             \
        T p_ = (P) * decay;                                                          \
        T g_ = l2 != 0 ? (G) + p_ * l2 : (G);                                        \
        T m1_ = (M1) + (g_ - (M1)) * c1;                                             \
        T m2_ = (M2) * beta2 + (g_ * g_) * c2;                                       \
        T second_ = m2_;                                                             \
        if (AMSGRAD) {                                                               \
            T v_ = (V) > m2_ ? (V) : m2_;                                            \
            (V) = v_;                                                                \
            second_ = v_;                                                            \
        }                                                                            \
        (M1) = m1_;                                                                  \
        (M2) = m2_;                                                                  \
        (P) = p_ - step_size * (m1_ / (SQRT(second_) + eps));                        \
    } while (0)

#define NSCALARS 7

/* One loop per (dtype, amsgrad).  args: the array inputs, then the 6 scalars, then the outputs
 * (which are the same arrays as the first inputs for the in-place call; written through the
 * output pointers so that a call with fresh outputs is correct too). */
#define DEFINE_LOOP(NAME, T, SQRT, AMSGRAD)                                                         \
    typedef struct {                                                                                \
        T s[NSCALARS]; /* decay, l2, 1 - beta1, beta2, 1 - beta2, eps_scaled, step_size */          \
        T *p;                                                                                       \
        const T *g;                                                                                 \
        T *m1, *m2, *v;                                                                             \
    } NAME##_job;                                                                                   \
    CLONES static void NAME##_unit(void *ctx, Py_ssize_t b, Py_ssize_t e)                           \
    {                                                                                               \
        const NAME##_job *j = ctx;                                                                  \
        const T decay = j->s[0], l2 = j->s[1], c1 = j->s[2], beta2 = j->s[3], c2 = j->s[4];         \
        const T eps = j->s[5], step_size = j->s[6];                                                 \
        T *restrict p = j->p;                                                                       \
        const T *restrict g = j->g;                                                                 \
        T *restrict m1 = j->m1, *restrict m2 = j->m2;                                               \
        T *restrict v = j->v;                                                                       \
        (void)v;                                                                                    \
        for (npy_intp i = b; i < e; i++) {                                                          \
            ADAM_BODY(T, SQRT, p[i], g[i], m1[i], m2[i], v[i], AMSGRAD);                            \
        }                                                                                           \
    }                                                                                               \
    CLONES static void NAME(char **args, const npy_intp *dimensions, const npy_intp *steps,        \
                            void *data)                                                             \
    {                                                                                               \
        (void)data;                                                                                 \
        const int nin_arrays = (AMSGRAD) ? 5 : 4;                                                   \
        const npy_intp n = dimensions[0];                                                           \
        char *p_in = args[0], *g_in = args[1], *m1_in = args[2], *m2_in = args[3];                  \
        char *v_in = (AMSGRAD) ? args[4] : NULL;                                                    \
        char **scal = args + nin_arrays;                                                            \
        char **outs = args + nin_arrays + NSCALARS;                                                 \
        char *p_out = outs[0], *m1_out = outs[1], *m2_out = outs[2];                                \
        char *v_out = (AMSGRAD) ? outs[3] : NULL;                                                   \
        const npy_intp *st = steps;                                                                 \
        const npy_intp *ost = steps + nin_arrays + NSCALARS;                                        \
        int scalars_fixed = 1;                                                                      \
        for (int i = 0; i < NSCALARS; i++)                                                          \
            scalars_fixed &= steps[nin_arrays + i] == 0;                                            \
        int unit = scalars_fixed;                                                                   \
        for (int i = 0; i < nin_arrays; i++)                                                        \
            unit &= st[i] == (npy_intp)sizeof(T);                                                   \
        for (int i = 0; i < nin_arrays - 1; i++)                                                    \
            unit &= ost[i] == (npy_intp)sizeof(T);                                                  \
        unit &= p_in == p_out && m1_in == m1_out && m2_in == m2_out && v_in == v_out;               \
        if (unit) { /* the in-place contiguous call: a vectorised loop over pieces on the pool */   \
            NAME##_job job = {{*(T *)scal[0], *(T *)scal[1], *(T *)scal[2], *(T *)scal[3],          \
                               *(T *)scal[4], *(T *)scal[5], *(T *)scal[6]},                        \
                              (T *)p_out, (const T *)g_in, (T *)m1_out, (T *)m2_out, (T *)v_out};   \
            split_range(n, SPLIT_GRAIN, 16, NAME##_unit, &job);                                       \
            return;                                                                                 \
        }                                                                                           \
        for (npy_intp i = 0; i < n; i++) { /* any strides; the scalars read per element too */      \
            const npy_intp *ss = steps + nin_arrays;                                                \
            const T decay = *(T *)(scal[0] + i * ss[0]), l2 = *(T *)(scal[1] + i * ss[1]);          \
            const T c1 = *(T *)(scal[2] + i * ss[2]), beta2 = *(T *)(scal[3] + i * ss[3]);          \
            const T c2 = *(T *)(scal[4] + i * ss[4]), eps = *(T *)(scal[5] + i * ss[5]);            \
            const T step_size = *(T *)(scal[6] + i * ss[6]);                                        \
            T p = *(T *)(p_in + i * st[0]), g = *(T *)(g_in + i * st[1]);                           \
            T m1 = *(T *)(m1_in + i * st[2]), m2 = *(T *)(m2_in + i * st[3]);                       \
            T v = (AMSGRAD) ? *(T *)(v_in + i * st[4]) : (T)0;                                      \
            ADAM_BODY(T, SQRT, p, g, m1, m2, v, AMSGRAD);                                           \
            *(T *)(p_out + i * ost[0]) = p;                                                         \
            *(T *)(m1_out + i * ost[1]) = m1;                                                       \
            *(T *)(m2_out + i * ost[2]) = m2;                                                       \
            if (AMSGRAD)                                                                            \
                *(T *)(v_out + i * ost[3]) = v;                                                     \
        }                                                                                           \
    }

DEFINE_LOOP(adam_f32, float, sqrtf, 0)
DEFINE_LOOP(adam_f64, double, sqrt, 0)
DEFINE_LOOP(adam_amsgrad_f32, float, sqrtf, 1)
DEFINE_LOOP(adam_amsgrad_f64, double, sqrt, 1)

/* SGD: p = p - (g + p * weight_decay) * lr (g alone when weight_decay is 0), the generic kernel's
 * operations in its order: sgd(p, g, weight_decay, lr, out=p).  The contiguous in-place call, scalars with
 * stride 0, gets a loop gcc vectorises. */
#define DEFINE_SGD(NAME, T)                                                                          \
    typedef struct {                                                                                 \
        T *p;                                                                                        \
        const T *g;                                                                                  \
        T wd, lr;                                                                                    \
    } NAME##_job;                                                                                    \
    CLONES static void NAME##_unit(void *ctx, Py_ssize_t b, Py_ssize_t e)                            \
    {                                                                                                \
        const NAME##_job *j = ctx;                                                                   \
        T *restrict p = j->p;                                                                        \
        const T *restrict g = j->g;                                                                  \
        const T wd = j->wd, lr = j->lr;                                                              \
        if (wd != 0)                                                                                 \
            for (npy_intp i = b; i < e; i++) p[i] = p[i] - (p[i] * wd + g[i]) * lr;                  \
        else                                                                                         \
            for (npy_intp i = b; i < e; i++) p[i] = p[i] - g[i] * lr;                                \
    }                                                                                                \
    CLONES static void NAME(char **args, const npy_intp *dimensions, const npy_intp *steps, void *data) \
    {                                                                                                \
        (void)data;                                                                                  \
        const npy_intp n = dimensions[0];                                                            \
        if (steps[0] == sizeof(T) && steps[1] == sizeof(T) && steps[2] == 0 && steps[3] == 0 &&      \
            steps[4] == sizeof(T) && args[0] == args[4]) {                                           \
            NAME##_job job = {(T *)args[4], (const T *)args[1], *(T *)args[2], *(T *)args[3]};       \
            split_range(n, SPLIT_GRAIN, 16, NAME##_unit, &job);                                        \
            return;                                                                                  \
        }                                                                                            \
        for (npy_intp i = 0; i < n; i++) {                                                           \
            T p = *(T *)(args[0] + i * steps[0]), g = *(T *)(args[1] + i * steps[1]);                \
            T wd = *(T *)(args[2] + i * steps[2]), lr = *(T *)(args[3] + i * steps[3]);              \
            T s = wd != 0 ? p * wd + g : g;                                                          \
            *(T *)(args[4] + i * steps[4]) = p - s * lr;                                             \
        }                                                                                            \
    }

DEFINE_SGD(sgd_f32, float)
DEFINE_SGD(sgd_f64, double)

static PyUFuncGenericFunction sgd_loops[] = {sgd_f32, sgd_f64};
static char sgd_types[2 * 5];

static PyUFuncGenericFunction adam_loops[] = {adam_f32, adam_f64};
static PyUFuncGenericFunction adam_amsgrad_loops[] = {adam_amsgrad_f32, adam_amsgrad_f64};
static void *no_data[] = {NULL, NULL};

/* type signatures: 4 (or 5) arrays, 6 scalars, 3 (or 4) outputs, all of the loop's dtype */
static char adam_types[2 * 14];
static char adam_amsgrad_types[2 * 16];

static void fill_types(char *types, int per_loop)
{
    for (int i = 0; i < per_loop; i++) {
        types[i] = NPY_FLOAT;
        types[per_loop + i] = NPY_DOUBLE;
    }
}

/* zero_(a): a contiguous array set to 0 bytes (0.0 in every float format) in place, large ones in pieces on the
 * pool (an optimizer's clear_grad zeroes every gradient each step: memory traffic one core does not saturate) */
static void zero_range(void *ctx, Py_ssize_t b, Py_ssize_t e)
{
    memset((char *)ctx + b, 0, (size_t)(e - b));
}

static PyObject *py_zero(PyObject *self, PyObject *arg)
{
    (void)self;
    PyArrayObject *a = (PyArrayObject *)arg;
    if (!PyArray_Check(arg) || !PyArray_IS_C_CONTIGUOUS(a) || !PyArray_ISWRITEABLE(a) ||
        PyArray_DESCR(a)->kind != 'f') {
        PyErr_SetString(PyExc_TypeError, "zero_(): argument 'a' must be a writeable C-contiguous float array");
        return NULL;
    }
    char *data = PyArray_BYTES(a);
    Py_ssize_t bytes = (Py_ssize_t)PyArray_NBYTES(a);
    Py_BEGIN_ALLOW_THREADS
    split_range(bytes, SPLIT_GRAIN * 16, 64, zero_range, data);   /* pieces of at least 256 KiB: memset is fast */
    Py_END_ALLOW_THREADS
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    SET_THREADS_METHOD,
    {"zero_", py_zero, METH_O, "zero_(a): a contiguous float array set to 0 in place (large ones on the pool)."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_optim",
    "Fused one-pass optimizer updates (Adam, AdamW, amsgrad) as numpy ufuncs; see _optim.c.", -1, methods,
};

PyMODINIT_FUNC PyInit__optim(void)
{
    import_array();
    import_umath();
    PyObject *m = PyModule_Create(&module);
    if (m == NULL)
        return NULL;
    fill_types(adam_types, 14);
    fill_types(adam_amsgrad_types, 16);
    fill_types(sgd_types, 5);
    PyObject *adam = PyUFunc_FromFuncAndData(
        adam_loops, no_data, adam_types, 2, 11, 3, PyUFunc_None, "adam",
        "adam(p, g, m1, m2, decay, l2, 1 - beta1, beta2, 1 - beta2, eps_scaled, step_size, out=(p, m1, m2))", 0);
    PyObject *amsgrad = PyUFunc_FromFuncAndData(
        adam_amsgrad_loops, no_data, adam_amsgrad_types, 2, 12, 4, PyUFunc_None, "adam_amsgrad",
        "adam_amsgrad(p, g, m1, m2, v, decay, l2, 1 - beta1, beta2, 1 - beta2, eps_scaled, step_size, "
        "out=(p, m1, m2, v))", 0);
    PyObject *sgd = PyUFunc_FromFuncAndData(sgd_loops, no_data, sgd_types, 2, 4, 1, PyUFunc_None, "sgd",
                                            "sgd(p, g, weight_decay, lr, out=p)", 0);
    if (adam == NULL || amsgrad == NULL || sgd == NULL || PyModule_AddObject(m, "adam", adam) < 0 ||
        PyModule_AddObject(m, "adam_amsgrad", amsgrad) < 0 || PyModule_AddObject(m, "sgd", sgd) < 0) {
        Py_XDECREF(adam);
        Py_XDECREF(amsgrad);
        Py_XDECREF(sgd);
        Py_DECREF(m);
        return NULL;
    }
    return m;
}
