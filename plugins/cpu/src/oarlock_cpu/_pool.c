/*
 * A persistent pool of worker threads for oarlock_cpu._gemm: pool_run(threads, pieces, fn, ctx) calls
 * fn(ctx, p) once for every p in [0, pieces), on the calling thread and up to threads - 1 workers.
 *
 * Why not MKL's own OpenMP team: on the project's 2-vCPU VM, whose neighbours steal a quarter of its time, a
 * team that meets at a barrier waits for whichever thread the VM descheduled, and the team's idle threads spin
 * on the core the rest of oarlock needs (bench/train_step.py ran 1.4-4x slower with it). Here the pieces are
 * handed out one at a time from a shared counter: the calling thread starts at once and takes whatever a late
 * or descheduled worker has not claimed, so a busy machine degrades to one thread's speed, not below it; the
 * caller waits only for pieces a worker has already begun. Idle workers sleep on a condition variable (no
 * spinning on a core someone else could use).
 *
 * Lifetime: a job's context lives on the caller's stack. A piece is claimed by a compare-and-swap on one word
 * holding the job's number and its next piece, so a worker that wakes after its job ended claims nothing and
 * never touches that context; the caller returns when every piece is done, so a claimed piece's context is
 * alive. One job runs at a time (a second caller waits; the pool is process-wide, its workers started on first
 * use and again in a forked child).
 */

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <time.h>
#include <unistd.h>

#include "_pool.h"

#define POOL_MAX_WORKERS 63
#define DEFAULT_SPIN_US 1000   /* as KMP_BLOCKTIME=1 (ms) for MKL's own team: a 30 us window made the MLP step 1.15 ms, 1 ms 0.90 */
#include <stdlib.h>

/* How long an idle worker watches for the next job before it sleeps: OARLOCK_CPU_POOL_SPIN_US, read once */
static long spin_ns = -1;

static long spin_window(void) {
    if (spin_ns < 0) {
        const char *text = getenv("OARLOCK_CPU_POOL_SPIN_US");
        long us = text != NULL ? strtol(text, NULL, 10) : DEFAULT_SPIN_US;
        spin_ns = (us < 0 ? 0 : us) * 1000L;
    }
    return spin_ns;
}

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;   /* guards the published job's fields */
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t one_job = PTHREAD_MUTEX_INITIALIZER;   /* serialises callers */

/* the published job: its number, what to run, and for how many workers */
static atomic_long generation;
static pool_fn job_fn;
static void *job_ctx;
static long job_pieces;
static worker_setup job_setup;
static int wanted;
/* (job number << 32) | next unclaimed piece; and the pieces finished */
static atomic_ullong cursor;
static atomic_long finished;

static atomic_int running;         /* a job is under way (pool_busy) */
static int started;                /* workers started in this process */
static pid_t started_in;           /* the process that started them (a forked child has none) */

/* The next piece of job `number`, or -1 when that job has no unclaimed piece left (or is over). */
static long claim(long number, long pieces) {
    unsigned long long cur = atomic_load(&cursor);
    for (;;) {
        if ((long)(cur >> 32) != number || (long)(cur & 0xffffffffULL) >= pieces) return -1;
        if (atomic_compare_exchange_weak(&cursor, &cur, cur + 1)) return (long)(cur & 0xffffffffULL);
    }
}

static void run_pieces(long number, long pieces, pool_fn fn, void *ctx) {
    for (long p; (p = claim(number, pieces)) >= 0;) {
        fn(ctx, p);
        atomic_fetch_add(&finished, 1);
    }
}

static long now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1000000000L + t.tv_nsec;
}

/* The products of one layer come tens of microseconds apart, and waking a sleeping thread costs about as much:
 * so a worker that just finished watches for the next job for the spin window, then sleeps (no longer: a
 * spinning thread takes the core from other work). */
static void watch_briefly(long seen) {
    long until = now_ns() + spin_window();
    while (atomic_load_explicit(&generation, memory_order_relaxed) == seen && now_ns() < until) {
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
    }
}

static void *serve(void *arg) {
    long index = (long)arg, seen = 0;
    worker_setup done_setup = NULL;
    for (;;) {
        watch_briefly(seen);
        pthread_mutex_lock(&lock);
        while (atomic_load(&generation) == seen || index >= wanted) {
            seen = atomic_load(&generation);   /* a job not for this worker is skipped */
            pthread_cond_wait(&wake, &lock);
        }
        long number = seen = atomic_load(&generation), pieces = job_pieces;
        pool_fn fn = job_fn;
        void *ctx = job_ctx;
        worker_setup setup = job_setup;
        pthread_mutex_unlock(&lock);
        if (setup != NULL && setup != done_setup) {
            setup();
            done_setup = setup;
        }
        run_pieces(number, pieces, fn, ctx);
    }
    return NULL;
}

/* fork() while a caller or a worker holds a lock would leave it held forever in the child: take both first */
static void before_fork(void) {
    pthread_mutex_lock(&one_job);
    pthread_mutex_lock(&lock);
}

static void after_fork(void) {
    pthread_mutex_unlock(&lock);
    pthread_mutex_unlock(&one_job);
}

static pthread_once_t fork_handlers = PTHREAD_ONCE_INIT;

static void install_fork_handlers(void) { pthread_atfork(before_fork, after_fork, after_fork); }

/* Start workers up to `count` (under `lock`); returns how many exist. */
static int ensure_workers(int count) {
    if (started_in != getpid()) {   /* a forked child inherits the counters, not the threads */
        started = 0;
        started_in = getpid();
    }
    while (started < count && started < POOL_MAX_WORKERS) {
        pthread_t id;
        pthread_attr_t attr;
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int failed = pthread_create(&id, &attr, serve, (void *)(long)started);
        pthread_attr_destroy(&attr);
        if (failed) break;
        started++;
    }
    return started;
}

void pool_run(int threads, long pieces, pool_fn fn, void *ctx, worker_setup setup) {
    if (threads <= 1 || pieces <= 1 || pieces > 0x7fffffffL) {
        for (long p = 0; p < pieces; p++) fn(ctx, p);
        return;
    }
    pthread_once(&fork_handlers, install_fork_handlers);
    pthread_mutex_lock(&one_job);
    atomic_store(&running, 1);
    pthread_mutex_lock(&lock);
    int workers = ensure_workers(threads - 1);
    wanted = workers < threads - 1 ? workers : threads - 1;
    long number = (atomic_load(&generation) + 1) & 0x7fffffffL;
    if (number == 0) number = 1;   /* 0 is the number workers start having seen */
    job_fn = fn;
    job_ctx = ctx;
    job_pieces = pieces;
    job_setup = setup;
    atomic_store(&finished, 0);
    atomic_store(&cursor, (unsigned long long)number << 32);
    atomic_store(&generation, number);
    pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&lock);
    run_pieces(number, pieces, fn, ctx);
    for (long spins = 0; atomic_load(&finished) < pieces; spins++) {   /* pieces a worker is still running */
        if (spins < 1000) {
#if defined(__x86_64__) || defined(__i386__)
            __builtin_ia32_pause();
#endif
        } else {
            sched_yield();
        }
    }
    atomic_store(&running, 0);
    pthread_mutex_unlock(&one_job);
}

int pool_busy(void) { return atomic_load(&running); }
