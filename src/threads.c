/* CPU threads: the thread-count setting and a small persistent pool behind bfp8_parallel_for.
 *
 * The pool keeps its workers between calls (creating threads per GEMM would cost more than a decode-sized GEMM).
 * Tasks are claimed from an atomic counter, so which thread runs a task varies from run to run: callers must make
 * every task's result independent of the thread that runs it (the `cpu` backend splits only along M/N). */
#include "internal.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <unistd.h>

#define BFP8_MAX_THREADS 256

static atomic_int num_threads_setting; /* 0 = not set: use the default */

/* BFP8_NUM_THREADS as a thread count: 0 when unset or empty, -1 when it is not an integer in [1, BFP8_MAX_THREADS]. */
static int env_num_threads(void) {
    const char *env = getenv("BFP8_NUM_THREADS");
    if (!env || !*env) return 0;
    if (*env < '0' || *env > '9') return -1; /* strtol would take leading blanks and signs */
    char *end;
    errno = 0;
    long v = strtol(env, &end, 10);
    return errno == 0 && *end == '\0' && v >= 1 && v <= BFP8_MAX_THREADS ? (int)v : -1;
}

bfp8_status bfp8_threads_check_env(void) {
    if (env_num_threads() >= 0) return BFP8_OK;
    return bfp8_fail(BFP8_ERR_INVALID_ARGUMENT, "BFP8_NUM_THREADS='%.64s' is not an integer in [1, %d] (unset it for "
                     "the number of online cores)", getenv("BFP8_NUM_THREADS"), BFP8_MAX_THREADS);
}

/* A bad BFP8_NUM_THREADS counts as unset here; bfp8_check_env and bfp8_set_num_threads(0) report it. */
static int default_num_threads(void) {
    int env = env_num_threads();
    if (env > 0) return env;
    long cores = sysconf(_SC_NPROCESSORS_ONLN);
    if (cores < 1) cores = 1;
    return cores > BFP8_MAX_THREADS ? BFP8_MAX_THREADS : (int)cores;
}

bfp8_status bfp8_set_num_threads(int n) {
    BFP8_CHECK_ARG(n <= BFP8_MAX_THREADS, "bfp8_set_num_threads: %d threads is above the limit of %d", n,
                   BFP8_MAX_THREADS);
    atomic_store(&num_threads_setting, n > 0 ? n : 0);
    return n > 0 ? BFP8_OK : bfp8_threads_check_env();
}

int bfp8_get_num_threads(void) {
    int n = atomic_load(&num_threads_setting);
    return n > 0 ? n : default_num_threads();
}

/* --- the pool ------------------------------------------------------------------------------------------------ */
typedef struct thread_pool {
    pthread_mutex_t busy; /* one parallel_for at a time; a concurrent caller runs its tasks itself */
    pthread_mutex_t lock;
    pthread_cond_t start_cv, done_cv;
    int nworkers;          /* started so far (they never exit) */
    uint64_t generation;   /* bumped for every job */
    int participants;      /* workers 1..participants-1 take part in the current job */
    int running;           /* workers of the current job not finished yet */
    bfp8_task_fn fn;
    void *ctx;
    int64_t ntasks;
    atomic_llong next_task;
} thread_pool;

static thread_pool pool = {
    .busy = PTHREAD_MUTEX_INITIALIZER,
    .lock = PTHREAD_MUTEX_INITIALIZER,
    .start_cv = PTHREAD_COND_INITIALIZER,
    .done_cv = PTHREAD_COND_INITIALIZER,
};

static void run_tasks(int thread) {
    for (;;) {
        int64_t t = atomic_fetch_add(&pool.next_task, 1);
        if (t >= pool.ntasks) return;
        pool.fn(pool.ctx, t, thread);
    }
}

/* A worker starts inside the job that created it: it counts as having seen the generation before that job. */
typedef struct worker_start {
    int index;
    uint64_t seen;
} worker_start;

static void *worker_main(void *arg) {
    worker_start start = *(worker_start *)arg;
    free(arg);
    int index = start.index;
    uint64_t seen = start.seen;
    pthread_mutex_lock(&pool.lock);
    for (;;) {
        while (pool.generation == seen) pthread_cond_wait(&pool.start_cv, &pool.lock);
        seen = pool.generation;
        if (index >= pool.participants) continue;
        pthread_mutex_unlock(&pool.lock);
        run_tasks(index);
        pthread_mutex_lock(&pool.lock);
        if (--pool.running == 0) pthread_cond_signal(&pool.done_cv);
    }
    return NULL;
}

/* Starts workers until there are `want` of them (indices 1..want); returns how many exist. Holds pool.lock. */
static int grow_pool(int want) {
    while (pool.nworkers < want) {
        pthread_t t;
        pthread_attr_t attr;
        worker_start *start = malloc(sizeof *start);
        if (!start) break; /* run with what we have: the result does not depend on the thread count */
        start->index = pool.nworkers + 1;
        start->seen = pool.generation; /* the caller bumps it for this job after growing the pool */
        pthread_attr_init(&attr);
        pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
        int rc = pthread_create(&t, &attr, worker_main, start);
        pthread_attr_destroy(&attr);
        if (rc != 0) {
            free(start);
            break;
        }
        pool.nworkers++;
    }
    return pool.nworkers;
}

static void run_serial(int64_t ntasks, bfp8_task_fn fn, void *ctx) {
    for (int64_t t = 0; t < ntasks; t++) fn(ctx, t, 0);
}

bfp8_status bfp8_parallel_for(int64_t ntasks, int max_threads, bfp8_task_fn fn, void *ctx) {
    BFP8_CHECK_ARG(fn != NULL && ntasks >= 0, "bfp8_parallel_for: fn=%p ntasks=%lld", (void *)(uintptr_t)fn,
                   (long long)ntasks);
    int threads = max_threads < 1 ? 1 : max_threads;
    if (threads > BFP8_MAX_THREADS) threads = BFP8_MAX_THREADS;
    if ((int64_t)threads > ntasks) threads = (int)ntasks;
    /* One job at a time; a nested or concurrent call runs on its caller's thread (index 0 of its own job). */
    if (threads <= 1 || pthread_mutex_trylock(&pool.busy) != 0) {
        run_serial(ntasks, fn, ctx);
        return BFP8_OK;
    }
    pthread_mutex_lock(&pool.lock);
    int workers = grow_pool(threads - 1);
    pool.participants = workers + 1 < threads ? workers + 1 : threads;
    pool.running = pool.participants - 1;
    pool.fn = fn;
    pool.ctx = ctx;
    pool.ntasks = ntasks;
    atomic_store(&pool.next_task, 0);
    pool.generation++;
    pthread_cond_broadcast(&pool.start_cv);
    pthread_mutex_unlock(&pool.lock);

    run_tasks(0);

    pthread_mutex_lock(&pool.lock);
    while (pool.running > 0) pthread_cond_wait(&pool.done_cv, &pool.lock);
    pthread_mutex_unlock(&pool.lock);
    pthread_mutex_unlock(&pool.busy);
    return BFP8_OK;
}
