/* gpuqos/query.h: explicit query boundaries for a latency-critical job.
 *
 * gpuqosd infers a query by default: it opens with the first GPU operation after the job's work
 * drained (or after the open query's first synchronisation) and closes once the work posted before
 * its first synchronisation is done (cuCtxSynchronize, cuStreamSynchronize, cuEventSynchronize, or
 * a synchronous copy into host memory). A job that never synchronises (it polls with
 * cuStreamQuery), or whose requests synchronise more than once each (each synchronisation would
 * close a query), says where each query begins and ends instead:
 *
 *     #include <gpuqos/query.h>
 *     gpuqos_query_begin();
 *     ... launches, copies ...
 *     cuStreamSynchronize(stream);
 *     gpuqos_query_end();
 *
 * A query's latency runs from its gpuqos_query_begin() by default. A server that queues requests
 * says when each one arrived, so the latency (and the deadline gpuqosd protects) is the request's
 * own, waiting in the server's queue included:
 *
 *     on the thread that receives a request:   gpuqos_query_arrived();
 *     on the worker, when it takes the oldest:  gpuqos_query_begin(); ... gpuqos_query_end();
 *
 * Each gpuqos_query_begin() starts the oldest arrived request not yet begun (or one arriving now,
 * if none waits): requests are served in arrival order, one query at a time per process, and
 * every gpuqos_query_arrived() wants exactly one gpuqos_query_begin() or, for a request the server
 * drops unbegun (shed, timed out), one gpuqos_query_dropped(), which forgets the oldest waiting
 * request. Without it every later begin counts from the arrival of the request before its own, for
 * as long as the process runs (at most 256 wait, beyond which the oldest is forgotten). Call
 * gpuqos_query_arrived() before handing the request to the worker. gpuqosd also
 * counts the requests still waiting: best-effort work that would make one of them late is held
 * too. Once a query of the job has closed (so gpuqosd knows how long one takes), best-effort work
 * also delays each query by at most gpuqosd's backlog bound less its safety margin; run gpuqosd
 * with [policy.baymax] adaptation = true so the bound follows the measured tail
 * (examples/gpuqos.toml).
 * A gpuqosd older than protocol 1.2 gets no arrivals: its queries run from their begin.
 *
 * Marked queries are one at a time per process: a gpuqos_query_begin() while one is open is ignored
 * (its request counts as begun), so a process serving several requests at once on several threads
 * has only the first of them measured and protected until it ends.
 *
 * Header only, C99 and C++, nothing to link (glibc before 2.34: -ldl); any thread, with or without a CUDA context, but not a
 * signal handler (they take a lock) nor a host function (cuLaunchHostFunc, cudaLaunchHostFunc: they
 * call the driver, which CUDA forbids there). Without libgpuqos.so in the process all four calls are no-ops
 * (one failed symbol lookup, cached); with it they post a mark to the daemon and return without
 * waiting for the daemon (at most for another thread of the process posting at the same moment;
 * and the process's first call into the shim, a mark or a CUDA call, registers with gpuqosd, which
 * takes up to 1.5 s if gpuqosd accepts the connection and does not answer);
 * gpuqos_query_dropped() posts none: gpuqosd forgets the request at the next begin, and until then
 * counts it as waiting (best-effort work may be held for it until its deadline has passed).
 */
#ifndef GPUQOS_QUERY_H
#define GPUQOS_QUERY_H

#include <dlfcn.h>
#ifndef RTLD_DEFAULT /* glibc declares it only for _GNU_SOURCE, which is the program's to choose (a
                        review: defining it here changed strerror_r and more in the rest of a C
                        file): glibc's own value */
#define RTLD_DEFAULT ((void*)0)
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef void (*gpuqos_query_mark_fn)(void);

/* dlsym's object pointer as a function pointer: POSIX guarantees the conversion, ISO C does not, so
 * `gcc -pedantic` warns of it unless marked as the extension it is; C++ says it with its own cast. */
#ifdef __cplusplus
#define GPUQOS_QUERY_MARK_FN_(pointer) reinterpret_cast<gpuqos_query_mark_fn>(pointer)
#else
#define GPUQOS_QUERY_MARK_FN_(pointer) (__extension__(gpuqos_query_mark_fn)(pointer))
#endif

/* The shim's function of that name, or a no-op; looked up once per call site's translation unit. */
static inline gpuqos_query_mark_fn gpuqos_query_resolve_(const char* symbol, gpuqos_query_mark_fn* cache,
                                                         int* resolved) {
  if (!__atomic_load_n(resolved, __ATOMIC_ACQUIRE)) {
    __atomic_store_n(cache, GPUQOS_QUERY_MARK_FN_(dlsym(RTLD_DEFAULT, symbol)), __ATOMIC_RELAXED);
    __atomic_store_n(resolved, 1, __ATOMIC_RELEASE);
  }
  return __atomic_load_n(cache, __ATOMIC_RELAXED);
}

static inline void gpuqos_query_arrived(void) {
  static gpuqos_query_mark_fn cache;
  static int resolved;
  gpuqos_query_mark_fn mark = gpuqos_query_resolve_("gpuqosQueryArrived", &cache, &resolved);
  if (mark) mark();
}

static inline void gpuqos_query_begin(void) {
  static gpuqos_query_mark_fn cache;
  static int resolved;
  gpuqos_query_mark_fn mark = gpuqos_query_resolve_("gpuqosQueryBegin", &cache, &resolved);
  if (mark) mark();
}

static inline void gpuqos_query_end(void) {
  static gpuqos_query_mark_fn cache;
  static int resolved;
  gpuqos_query_mark_fn mark = gpuqos_query_resolve_("gpuqosQueryEnd", &cache, &resolved);
  if (mark) mark();
}

static inline void gpuqos_query_dropped(void) {
  static gpuqos_query_mark_fn cache;
  static int resolved;
  gpuqos_query_mark_fn mark = gpuqos_query_resolve_("gpuqosQueryDropped", &cache, &resolved);
  if (mark) mark();
}

#ifdef __cplusplus
}
#endif

#endif /* GPUQOS_QUERY_H */
