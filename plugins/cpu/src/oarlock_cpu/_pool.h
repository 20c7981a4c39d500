/*
 * The worker pool of oarlock_cpu._gemm (_pool.c): run independent pieces of one job on several threads.
 */
#ifndef OARLOCK_CPU_POOL_H
#define OARLOCK_CPU_POOL_H

typedef void (*pool_fn)(void *ctx, long piece);
typedef void (*worker_setup)(void);

/* Calls fn(ctx, p) for every p in [0, pieces) on the calling thread and up to threads - 1 pooled workers,
 * returning when all are done. `setup`, when not NULL, runs once on a worker before its first piece of a job
 * that names it (per-thread library settings). Call it with the GIL released. */
void pool_run(int threads, long pieces, pool_fn fn, void *ctx, worker_setup setup);

#endif
