/*
 * CLONES: compile a hot loop for x86-64-v4 (AVX-512), x86-64-v3 (AVX2 + FMA) and the baseline, and pick
 * one at load time.  Function multiversioning needs an ELF target with ifunc (glibc) and a compiler that
 * knows the x86-64 micro-architecture levels (gcc 11, clang 14); elsewhere the loops are plain C.
 * Shared by the kernels of oarlock-cpu (_kernels.c, _rows.c, _optim.c).
 */
#ifndef OARLOCK_CPU_CLONES_H
#define OARLOCK_CPU_CLONES_H

#if defined(__x86_64__) && defined(__linux__) && defined(__GLIBC__) && \
    ((defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11) || (defined(__clang__) && __clang_major__ >= 14))
#define CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define CLONES
#endif

#endif
