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

/* Whether a job is running now (its caller is inside pool_run): a caller that would rather not wait, or that is
 * itself one of the job's pieces (a nested pool_run would wait for itself), runs its work on its own thread. */
int pool_busy(void);

/* What oarlock_cpu._gemm exports as the capsule `pool_api` for the package's other extensions (_kernels, _rows):
 * one process-wide pool, not one per extension (see _pool_api.h). */
typedef struct {
    int version;   /* 1 */
    void (*run)(int threads, long pieces, pool_fn fn, void *ctx, worker_setup setup);
    int (*busy)(void);
} pool_api;

#endif
