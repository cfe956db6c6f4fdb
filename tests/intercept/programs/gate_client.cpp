// A CUDA driver-API program for the gate's integration tests (tests/intercept/gate_itest.cpp), run
// under libgpuqos.so on simgpu. Prints CLOCK_MONOTONIC times so the test can compare them with
// what its fake daemon did:
//   ops             one of each posted kind (copy h2d, kernel, memset, copy d2h, graph) + a captured launch
//   unified-2d      cuMemcpy2D with one CU_MEMORYTYPE_UNIFIED side (run_unified_2d)
//   unified         cuMemcpy / cuMemcpyAsync with unified addresses: pinned->device, device->pageable,
//                   device->device, pageable->pageable (host to host: not GPU work)
//   marks           gpuqos_query_arrived (from a thread with no context), gpuqos_query_begin, launch
//                   spin(100) + cuStreamSynchronize, gpuqos_query_end, cuCtxSynchronize, cuEventSynchronize
//   iterations <n> <us>
//                   n times, on a stream: a 16-byte memset, spin(us), synchronise (a training loop whose
//                   every iteration starts with something other than its kernel)
//   flood <m> <k> [us]
//                   gpuqos_query_arrived m times, then k launches of spin(us, default 0) on a stream,
//                   synchronised
//   dropped         after one launch: two requests arrive, the first is dropped, a query (begin, end);
//                   then a drop with none waiting, and a query that names no arrival
//   timed <us>      one spin(us) launch: "before <ns>", "after <ns>" around the call, "done <ns>" after sync
//   loop <n> <us>   n times: launch spin(us) and synchronize, sleeping 20 ms between
//   threads <t> <n> t threads, each launching spin(100) n times on its own stream
//   bench <n> [legacy]
//                   n launches of spin(0) on a stream of its own (or the legacy default stream):
//                   "bench p50_ns p99_ns mean_ns" of the cuLaunchKernel call
//   copies <bytes> <device bytes>
//                   cuMemcpyHtoD of <bytes> into a buffer of <device bytes> ("htod <result>"); if it
//                   worked, cuMemcpyDtoDAsync to a second buffer, synchronise, cuMemcpyAsync (unified) back to the
//                   host, synchronise, and every byte checked ("copies ok")
//   contexts <n>    n times: launch spin(0) on a stream of a second context, make the first current again and
//                   cuCtxSynchronize; "switched <k>": how often the current context was not the first
//   destroy         on a second context: spin(100) on each of two streams, synchronise; launch spin(20000)
//                   on one of them and destroy the context at once; create a
//                   third ("reused 1" if it got the second's handle), spin(1000) on a stream of it,
//                   synchronise, destroy it; launch spin(20000) on a stream of the primary context and
//                   release it (open_device's retain, the last); sleep 100 ms: "ended <ns>" after the release
//   destroy legacy  the same through the ABIs before _v2 (cuCtxDestroy of CUDA 2.0,
//                   cuDevicePrimaryCtxRelease of 7.0), as cuGetProcAddress answers them for those versions
//   release-beside  spin(60000) on a stream of a second context ("beside <ns>": just before); on the
//                   primary context spin(20000) and release it (the last reference: "ended <ns>");
//                   synchronise the second context's stream, sleep 100 ms
//   green           on a green context's stream: spin(100) twice, synchronise; spin(20000); release
//                   the program's reference to the primary context (the green context holds the
//                   last), spin(20000) on a stream of it, destroy the green context (which ends both
//                   contexts): "ended <ns>" after it; sleep 100 ms
//   legacy-two      spin(1000) on the legacy default stream of a second context ("short <ns>": just
//                   before), synchronised, then spin(200000) on the primary context's ("long <ns>");
//                   synchronise both, sleep 100 ms
//   burst <rounds>  rounds times, on the legacy default stream: spin(20000), then spin(200) six
//                   times, then sleep 40 ms with no synchronisation (the shim's poll finds them on its
//                   own, long after the first ended); cuCtxSynchronize at the end
//   queue <n>       on the legacy default stream: spin(100) n times back to back, then
//                   cuCtxSynchronize
//   reuse           takes the numbers of the shim's descriptors for socket pairs of its own (dup2:
//                   closes them), as a program closing descriptors it does not own and opening
//                   files would: the socket whose peer is GPUQOS_SOCKET and any datagram socket (a
//                   doorbell), or with GATE_REUSE=socket / doorbell only that one ("closed <m>");
//                   writes "hello" into each, sleeps 300 ms (the shim's monitor looks every 10 ms),
//                   launches spin(100) and synchronises: "intact <k> of <m>", the pairs that got
//                   their hello whole and nothing else, and whose other direction still works;
//                   "end <ns>" as it returns
//   signals <us>    SIGALRM every <us> from an interval timer started before the first CUDA call (a
//                   handler without SA_RESTART, as profilers and watchdogs install), then `ops`:
//                   "signals <n>" caught by its end
//   cancel <ms>     two threads each launch spin(10) on a stream of its own, then wait at
//                   pthread_testcancel in a loop; after <ms> main pthread_cancels both ("cancel
//                   sent <ns>") and joins them: "cancelled <k>", the threads that ended cancelled
//   masks           launch + sync, then for each thread whose name starts "gpuqos-" (the shim's):
//                   "thread <name> blocks <k>", k the signals of SIGINT, SIGTERM, SIGHUP, SIGUSR1,
//                   SIGALRM, SIGCHLD its mask blocks (/proc/self/task/*/status)
//   names <n>       n kernels of 200-character names, each launched once, then sync: "names ok"
//   graphs          graphs a (spin(100)) and b (spin(2000)) captured on a stream and instantiated in that
//                   order, then launched b, a, b, a and synchronised; a destroyed, c (spin(300)) made and
//                   launched: "graphs ok"
//   copy-beside-capture <bytes>
//                   captures spin(100) on a blocking stream (thread-local mode) while it copies <bytes>
//                   from pinned memory on another, idle, blocking stream (cuMemcpyHtoDAsync):
//                   "end_capture <result>"; the graph, if any, is then launched and synchronised
//   sync-copies <n> <bytes>
//                   n times: cuMemcpyHtoD then cuMemcpyDtoH of <bytes> from and to pinned memory (the
//                   calls wait for the copies), "longest_call_ns <ns>": the longest of those calls
//   orphan          launch + sync, fork a child that sleeps 3 s (stdio to /dev/null); "orphan ok", exit
//   orphan-first    the same with an arrival mark instead of the kernel, before any CUDA call
//   fork            launch + sync, fork; the child marks a query and exit()s (atexit handlers run);
//                   "child <status>" ("child hung" if it has not exited in 5 s), launch + sync again
#include <cuda.h>
#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "gpuqos/query.h"
#include "gpuqos/testing/spin_program.h"

namespace {

long long now_ns() {
  timespec t{};
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec * 1'000'000'000LL + t.tv_nsec;
}

CUfunction g_spin = nullptr;  // set once by open_device, before any thread starts

struct Dim3Args {
  unsigned gx = 1, gy = 1, bx = 32, by = 1, shared_bytes = 0;
};

// The spin kernel in the current context (each context loads modules of its own).
CUresult load_spin(CUfunction& spin) {
  CUmodule module = nullptr;
  const CUresult loaded = cuModuleLoadData(&module, kPtx);
  return loaded != CUDA_SUCCESS ? loaded : cuModuleGetFunction(&spin, module, "spin");
}

// One block of `spin` running duration_us on `stream`.
CUresult launch_spin(CUfunction spin, std::uint64_t duration_us, CUstream stream) {
  void* params[] = {&duration_us};
  return cuLaunchKernel(spin, 1, 1, 1, 32, 1, 1, 0, stream, params, nullptr);
}

int open_device() {
  CUdevice device = 0;
  CUcontext context = nullptr;
  CHECK_CU(cuInit(0));
  CHECK_CU(cuDeviceGet(&device, 0));
  CHECK_CU(cuDevicePrimaryCtxRetain(&context, device));
  CHECK_CU(cuCtxSetCurrent(context));
  CHECK_CU(load_spin(g_spin));
  std::printf("pid %d\n", static_cast<int>(getpid()));
  return 0;
}

CUresult launch(std::uint64_t duration_us, CUstream stream, Dim3Args shape = {}) {
  void* params[] = {&duration_us};
  return cuLaunchKernel(g_spin, shape.gx, shape.gy, 1, shape.bx, shape.by, 1, shape.shared_bytes, stream, params, nullptr);
}

int run_ops() {
  constexpr std::size_t kBytes = 4096;
  std::vector<unsigned char> host(kBytes, 3);
  CUdeviceptr device = 0;
  CUstream stream = nullptr;
  CHECK_CU(cuMemAlloc(&device, kBytes));
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuMemcpyHtoDAsync(device, host.data(), kBytes, stream));
  CHECK_CU(launch(1500, stream, {2, 3, 64, 2, 128}));
  CHECK_CU(cuMemsetD32Async(device, 7u, 256, stream));  // 1024 bytes
  CHECK_CU(cuMemcpyDtoHAsync(host.data(), device, kBytes, stream));
  CUgraph graph = nullptr;
  CUgraphExec exec = nullptr;
  CHECK_CU(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_RELAXED));
  CHECK_CU(launch(10, stream));
  CHECK_CU(cuStreamEndCapture(stream, &graph));
  CHECK_CU(cuGraphInstantiate(&exec, graph, 0));
  CHECK_CU(cuGraphLaunch(exec, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  CHECK(host[0] == 7);
  std::printf("ops ok\n");
  return 0;
}

int run_timed(std::uint64_t duration_us) {
  const long long before = now_ns();
  CHECK_CU(launch(duration_us, nullptr));
  const long long after = now_ns();
  CHECK_CU(cuCtxSynchronize());
  std::printf("before %lld\nafter %lld\ndone %lld\n", before, after, now_ns());
  return 0;
}

int run_loop(int count, std::uint64_t duration_us) {
  for (int i = 0; i < count; ++i) {
    CHECK_CU(launch(duration_us, nullptr));
    CHECK_CU(cuCtxSynchronize());
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::printf("loop ok\n");
  return 0;
}

int run_threads(int threads, int count) {
  CUcontext context = nullptr;
  CHECK_CU(cuCtxGetCurrent(&context));
  std::vector<std::thread> workers;
  std::vector<int> failures(threads, 0);
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      CUstream stream = nullptr;
      cuCtxSetCurrent(context);
      if (cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) ++failures[t];
      for (int i = 0; i < count; ++i) failures[t] += launch(100, stream) != CUDA_SUCCESS;
      failures[t] += cuStreamSynchronize(stream) != CUDA_SUCCESS;
    });
  }
  for (auto& w : workers) w.join();
  CHECK(std::count(failures.begin(), failures.end(), 0) == threads);
  std::printf("threads ok\n");
  return 0;
}

int run_bench(int count, bool legacy) {
  CUstream stream = nullptr;
  if (!legacy) CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  std::vector<long long> took;
  took.reserve(count);
  for (int i = 0; i < count; ++i) {
    const long long start = now_ns();
    CHECK_CU(launch(0, stream));
    took.push_back(now_ns() - start);
    if (i % 64 == 63) CHECK_CU(cuStreamSynchronize(stream));
  }
  CHECK_CU(cuStreamSynchronize(stream));
  long long sum = 0;
  for (long long t : took) sum += t;
  std::sort(took.begin(), took.end());
  std::printf("bench %lld %lld %lld\n", took[took.size() / 2], took[took.size() * 99 / 100], sum / count);
  return 0;
}

// The current context (first), a second one created on its device and made current, and the spin
// kernel loaded there.
struct SecondContext {
  CUcontext first = nullptr, second = nullptr;
  CUdevice device = 0;
  CUfunction spin = nullptr;
};

int open_second_context(SecondContext& c) {
  CHECK_CU(cuCtxGetCurrent(&c.first));
  CHECK_CU(cuCtxGetDevice(&c.device));
  CHECK_CU(cuCtxCreate(&c.second, nullptr, 0, c.device));  // and makes it current
  CHECK_CU(load_spin(c.spin));
  return 0;
}

int run_contexts(int count) {
  SecondContext c;
  if (open_second_context(c) != 0) return 1;
  const auto [first, second, device, spin] = c;
  CUcontext current = nullptr;
  CUstream stream = nullptr;  // not a default stream: those are recorded inline, never deferred
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  int switched = 0;
  for (int i = 0; i < count; ++i) {
    CHECK_CU(cuCtxSetCurrent(second));
    CHECK_CU(launch_spin(spin, 0, stream));
    CHECK_CU(cuCtxSetCurrent(first));
    CHECK_CU(cuCtxSynchronize());  // the shim may record the second context's event here
    CHECK_CU(cuCtxGetCurrent(&current));
    switched += current != first;
  }
  CHECK_CU(cuCtxSetCurrent(second));
  CHECK_CU(cuCtxSynchronize());
  CHECK_CU(cuCtxSetCurrent(first));
  std::printf("switched %d\n", switched);
  return 0;
}

int run_burst(int rounds) {
  for (int round = 0; round < rounds; ++round) {
    CHECK_CU(launch(20000, nullptr));
    for (int i = 0; i < 6; ++i) CHECK_CU(launch(200, nullptr));
    std::this_thread::sleep_for(std::chrono::milliseconds(40));
  }
  CHECK_CU(cuCtxSynchronize());
  return 0;
}

int run_queue(int n, int us) {
  for (int i = 0; i < n; ++i) CHECK_CU(launch(us, nullptr));
  CHECK_CU(cuCtxSynchronize());
  return 0;
}

int run_legacy_two() {
  SecondContext c;
  if (open_second_context(c) != 0) return 1;
  const auto [primary, second, device, spin] = c;
  std::printf("short %lld\n", now_ns());
  CHECK_CU(launch_spin(spin, 1000, nullptr));
  // Done on the device before the long one is launched: on a loaded host simgpud once took the
  // long kernel first (the CI run of 2026-11-27), and the short one then really ended after it.
  CHECK_CU(cuCtxSynchronize());
  CHECK_CU(cuCtxSetCurrent(primary));
  std::printf("long %lld\n", now_ns());
  CHECK_CU(launch(200000, nullptr));
  CHECK_CU(cuCtxSynchronize());
  CHECK_CU(cuCtxSetCurrent(second));
  CHECK_CU(cuCtxSynchronize());
  CHECK_CU(cuCtxSetCurrent(primary));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return 0;
}

// The entry point cuGetProcAddress gives for `symbol` as of CUDA `version`; nullptr if none.
void* proc_address(const char* symbol, int version) {
  void* fn = nullptr;
  CUdriverProcAddressQueryResult status{};
  return cuGetProcAddress(symbol, &fn, version, CU_GET_PROC_ADDRESS_DEFAULT, &status) == CUDA_SUCCESS &&
                 status == CU_GET_PROC_ADDRESS_SUCCESS
             ? fn
             : nullptr;
}

// On the primary context (current): spin(20000) on a stream of its own, then `end()` (a call that
// ends the primary context: its last release) while the kernel runs; "ended <ns>" after.
template <class End>
int end_primary_while_busy(End end) {
  CUstream primary_stream = nullptr;
  CHECK_CU(cuStreamCreate(&primary_stream, CU_STREAM_NON_BLOCKING));
  CHECK_CU(launch(20000, primary_stream));
  std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the completion thread records and polls
  CHECK_CU(end());
  std::printf("ended %lld\n", now_ns());
  return 0;
}

int release_primary_while_busy(CUresult (*release)(CUdevice), CUdevice device) {
  return end_primary_while_busy([&] { return release(device); });
}

int run_release_beside() {
  SecondContext c;
  if (open_second_context(c) != 0) return 1;
  const auto [primary, second, device, spin] = c;
  CUstream stream = nullptr;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  const long long launched = now_ns();  // before the call: the kernel starts inside it
  CHECK_CU(launch_spin(spin, 60000, stream));
  std::printf("beside %lld\n", launched);
  CHECK_CU(cuCtxSetCurrent(primary));
  if (release_primary_while_busy(&cuDevicePrimaryCtxRelease, device) != 0) return 1;
  CHECK_CU(cuCtxSetCurrent(second));
  CHECK_CU(cuStreamSynchronize(stream));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return 0;
}

// A kernel's handle, freed by an unload (`destroy`: by its context's destruction), given again to
// another kernel through a getter the shim does not hook (cuModuleEnumerateFunctions): its
// launches are the new kernel's, with its layout (the old one's would read parameters past the
// program's array).
int run_reload(bool destroy) {
  constexpr const char* kWide = ".version 7.0\n.target sm_70\n.address_size 64\n"
                                ".visible .entry wide(.param .u64 a, .param .u64 b, .param .u64 c, .param .u64 d) { ret; }\n";
  constexpr const char* kNarrow = ".version 7.0\n.target sm_70\n.address_size 64\n"
                                  ".visible .entry narrow(.param .u64 a) { ret; }\n";
  CUmodule module = nullptr;
  CUfunction wide = nullptr, narrow = nullptr;
  CUcontext own = nullptr;
  CUdevice device = 0;
  CHECK_CU(cuCtxGetDevice(&device));
  if (destroy) CHECK_CU(cuCtxCreate(&own, nullptr, 0, device));
  CHECK_CU(cuModuleLoadData(&module, kWide));
  CHECK_CU(cuModuleEnumerateFunctions(&wide, 1, module));
  std::uint64_t a = 1, b = 2, c = 3, d = 4;
  void* four[] = {&a, &b, &c, &d};
  CHECK_CU(cuLaunchKernel(wide, 1, 1, 1, 32, 1, 1, 0, nullptr, four, nullptr));
  CHECK_CU(cuCtxSynchronize());
  if (destroy) {
    CHECK_CU(cuCtxDestroy(own));
    CHECK_CU(cuCtxCreate(&own, nullptr, 0, device));
  } else {
    CHECK_CU(cuModuleUnload(module));
  }
  CHECK_CU(cuModuleLoadData(&module, kNarrow));
  CHECK_CU(cuModuleEnumerateFunctions(&narrow, 1, module));
  std::printf("handle reused %d\n", narrow == wide ? 1 : 0);
  std::uint64_t x = 7;
  void* one[] = {&x};
  CHECK_CU(cuLaunchKernel(narrow, 1, 1, 1, 32, 1, 1, 0, nullptr, one, nullptr));
  CHECK_CU(cuCtxSynchronize());
  CHECK_CU(cuModuleUnload(module));
  std::printf("reload ok\n");
  return 0;
}

// A kernel still running when main returns. The shim's completion tracker stops in its exit
// handler (registered at the first op); one the program registered before that runs after it,
// and copies.
CUdeviceptr g_exit_buffer = 0;

int run_exit_running() {
  std::atexit([] {
    char host[64];
    std::printf("exit copy %d\n", static_cast<int>(cuMemcpyDtoH(host, g_exit_buffer, sizeof host)));
    std::fflush(stdout);
  });
  CHECK_CU(cuMemAlloc(&g_exit_buffer, 64));
  CUstream stream = nullptr;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CHECK_CU(launch_spin(g_spin, 300'000, stream));
  std::printf("returning\n");
  return 0;
}

int run_green() {
  CUdevice device = 0;
  CHECK_CU(cuCtxGetDevice(&device));
  CUdevResource sms{};
  CUdevResourceDesc desc = nullptr;
  CUgreenCtx green = nullptr;
  CUcontext green_context = nullptr;
  CHECK_CU(cuDeviceGetDevResource(device, &sms, CU_DEV_RESOURCE_TYPE_SM));
  CHECK_CU(cuDevResourceGenerateDesc(&desc, &sms, 1));
  CHECK_CU(cuGreenCtxCreate(&green, desc, device, CU_GREEN_CTX_DEFAULT_STREAM));
  CHECK_CU(cuCtxFromGreenCtx(&green_context, green));
  CHECK_CU(cuCtxPushCurrent(green_context));
  CUfunction spin = nullptr;
  CHECK_CU(load_spin(spin));
  CUstream stream = nullptr;
  CHECK_CU(cuGreenCtxStreamCreate(&stream, green, CU_STREAM_NON_BLOCKING, 0));
  // Two ops waited for: the shim's events for them go back to its pool, as events of the green context.
  CHECK_CU(launch_spin(spin, 100, stream));
  CHECK_CU(launch_spin(spin, 100, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  CHECK_CU(launch_spin(spin, 20000, stream));
  CHECK_CU(cuCtxPopCurrent(nullptr));  // the primary context is current again
  CHECK_CU(cuDevicePrimaryCtxRelease(device));  // the green context's reference is now the last
  if (end_primary_while_busy([&] { return cuGreenCtxDestroy(green); }) != 0) return 1;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return 0;
}

int run_destroy(bool legacy) {
  using CtxDestroy = CUresult (*)(CUcontext);
  using PrimaryCtxRelease = CUresult (*)(CUdevice);
  CtxDestroy ctx_destroy = &cuCtxDestroy;
  PrimaryCtxRelease primary_release = &cuDevicePrimaryCtxRelease;
  if (legacy) {
    ctx_destroy = reinterpret_cast<CtxDestroy>(proc_address("cuCtxDestroy", 2000));
    primary_release = reinterpret_cast<PrimaryCtxRelease>(proc_address("cuDevicePrimaryCtxRelease", 7000));
    CHECK(ctx_destroy && primary_release);
    CHECK(reinterpret_cast<void*>(ctx_destroy) != proc_address("cuCtxDestroy", 4000));
  }
  CUcontext second = nullptr;
  CUdevice device = 0;
  CUfunction spin = nullptr;
  CHECK_CU(cuCtxGetDevice(&device));
  CHECK_CU(cuCtxCreate(&second, nullptr, 0, device));  // pushes the primary context
  CHECK_CU(load_spin(spin));
  CUstream stream = nullptr, other = nullptr;  // not a default stream: a high-priority op's event is deferred
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuStreamCreate(&other, CU_STREAM_NON_BLOCKING));
  // One op on each of two streams, waited for: the shim's two events for them go back to its pool.
  CHECK_CU(launch_spin(spin, 100, stream));
  CHECK_CU(launch_spin(spin, 100, other));
  CHECK_CU(cuCtxSynchronize());
  std::this_thread::sleep_for(std::chrono::milliseconds(5));  // the completion thread pools them
  CHECK_CU(launch_spin(spin, 20000, stream));
  std::this_thread::sleep_for(std::chrono::milliseconds(2));  // the completion thread records and polls
  CHECK_CU(ctx_destroy(second));  // pops it: the primary context is current again
  // A context created next often gets the destroyed one's handle back: the shim must not hand its
  // work an event pooled for the dead one.
  CUcontext third = nullptr;
  CHECK_CU(cuCtxCreate(&third, nullptr, 0, device));
  std::printf("reused %d\n", third == second ? 1 : 0);
  CHECK_CU(load_spin(spin));
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CHECK_CU(launch_spin(spin, 1000, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  CHECK_CU(ctx_destroy(third));
  if (release_primary_while_busy(primary_release, device) != 0) return 1;
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  return 0;
}

volatile sig_atomic_t alarms = 0;

// Before the first CUDA call: the shim registers with gpuqosd there.
void start_alarms(long interval_us) {
  struct sigaction action {};
  action.sa_handler = [](int) { alarms = alarms + 1; };
  sigemptyset(&action.sa_mask);
  if (sigaction(SIGALRM, &action, nullptr) != 0) std::abort();
  const itimerval every{{0, interval_us}, {0, interval_us}};
  if (setitimer(ITIMER_REAL, &every, nullptr) != 0) std::abort();
}

int run_signals() {
  const int result = run_ops();
  const itimerval off{};
  CHECK(setitimer(ITIMER_REAL, &off, nullptr) == 0);
  std::printf("signals %d\n", static_cast<int>(alarms));
  return result;
}

// A program whose signal handler calls exit() (not async-signal-safe, and common: a Ctrl-C handler
// that "exits cleanly"): the timer fires after `after_us` while the main thread launches, copies and
// synchronises in a loop, inside the shim's hooks more often than not. Exits 3 from the handler.
int run_exit_in_handler(long after_us) {
  struct sigaction action {};
  action.sa_handler = [](int) { std::exit(3); };
  sigemptyset(&action.sa_mask);
  CHECK(sigaction(SIGALRM, &action, nullptr) == 0);
  constexpr std::size_t kBytes = 4096;
  std::vector<unsigned char> host(kBytes, 3);
  CUdeviceptr device = 0;
  CUstream stream = nullptr;
  CHECK_CU(cuMemAlloc(&device, kBytes));
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  const itimerval once{{0, 0}, {after_us / 1'000'000, after_us % 1'000'000}};
  CHECK(setitimer(ITIMER_REAL, &once, nullptr) == 0);
  for (;;) {
    CHECK_CU(cuMemcpyHtoDAsync(device, host.data(), kBytes, stream));
    CHECK_CU(launch(5, stream));
    CHECK_CU(cuStreamSynchronize(stream));
    CHECK_CU(launch(5, nullptr));
    CHECK_CU(cuCtxSynchronize());
  }
}

int run_cancel(long after_ms) {
  CUcontext context = nullptr;
  CHECK_CU(cuCtxGetCurrent(&context));
  std::vector<pthread_t> threads(2);
  for (auto& thread : threads) {
    auto body = [](void* argument) -> void* {
      CUstream stream = nullptr;
      cuCtxSetCurrent(static_cast<CUcontext>(argument));
      if (cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING) != CUDA_SUCCESS) return nullptr;
      (void)launch(10, stream);  // low priority: waits here for its grant
      for (;;) {
        pthread_testcancel();
        usleep(1000);
      }
    };
    CHECK(pthread_create(&thread, nullptr, body, context) == 0);
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(after_ms));
  for (pthread_t thread : threads) CHECK(pthread_cancel(thread) == 0);
  std::printf("cancel sent %lld\n", now_ns());
  std::fflush(stdout);
  int cancelled = 0;
  for (pthread_t thread : threads) {
    void* result = nullptr;
    CHECK(pthread_join(thread, &result) == 0);
    cancelled += result == PTHREAD_CANCELED;
  }
  std::printf("cancelled %d\n", cancelled);
  return 0;
}

int run_masks() {
  CHECK_CU(launch(10, nullptr));
  CHECK_CU(cuCtxSynchronize());
  DIR* tasks = opendir("/proc/self/task");
  CHECK(tasks != nullptr);
  while (const dirent* task = readdir(tasks)) {
    if (task->d_name[0] == '.') continue;
    const std::string dir = std::string("/proc/self/task/") + task->d_name;
    char name[32] = {};
    if (FILE* comm = std::fopen((dir + "/comm").c_str(), "re")) {
      if (!std::fgets(name, sizeof name, comm)) name[0] = 0;
      std::fclose(comm);
    }
    std::string thread = name;
    if (!thread.empty() && thread.back() == '\n') thread.pop_back();
    // The shim's threads, and simgpu's libcupti's delivery thread (started for the shim's profiler).
    if (thread.rfind("gpuqos-", 0) != 0 && thread != "simgpu-cupti") continue;
    unsigned long long blocked = 0;
    if (FILE* status = std::fopen((dir + "/status").c_str(), "re")) {
      char line[256];
      while (std::fgets(line, sizeof line, status)) {
        if (std::sscanf(line, "SigBlk: %llx", &blocked) == 1) break;
      }
      std::fclose(status);
    }
    int count = 0;
    for (const int signal : {SIGINT, SIGTERM, SIGHUP, SIGUSR1, SIGALRM, SIGCHLD}) count += (blocked >> (signal - 1)) & 1;
    std::printf("thread %s blocks %d\n", thread.c_str(), count);
  }
  closedir(tasks);
  return 0;
}

// Waits up to `polls` x 10 ms for a forked child, then kills it; says how it ended.
void wait_for_child(pid_t child, int polls) {
  int status = 0;
  pid_t done = 0;
  for (int i = 0; i < polls && (done = waitpid(child, &status, WNOHANG)) == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  if (done == 0) {
    kill(child, SIGKILL);
    waitpid(child, &status, 0);
    std::printf("child hung\n");
  } else {
    std::printf("child %d\n", WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status));
  }
}

int run_fork() {
  CHECK_CU(launch(10, nullptr));
  CHECK_CU(cuCtxSynchronize());
  std::fflush(stdout);
  const pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) {  // CUDA may not be used here; the shim's marks and exit handlers still run
    gpuqos_query_arrived();
    gpuqos_query_begin();
    gpuqos_query_end();
    std::exit(0);
  }
  wait_for_child(child, 500);
  CHECK_CU(launch(10, nullptr));
  CHECK_CU(cuCtxSynchronize());
  std::printf("fork ok\n");
  return 0;
}

// A module of `count` kernels with 200-character names, each launched once (its name is posted
// before its first op), then a synchronisation: "names ok".
int run_names(long count) {
  std::string ptx = ".version 7.0\n.target sm_70\n.address_size 64\n";
  std::vector<std::string> names;
  for (long i = 0; i < count; ++i) {
    names.push_back("kernel_" + std::to_string(i) + "_" + std::string(190, 'n'));
    ptx += ".visible .entry " + names.back() + "(.param .u64 d) { ret; }\n";
  }
  CUmodule module = nullptr;
  CHECK_CU(cuModuleLoadData(&module, ptx.c_str()));
  for (const std::string& name : names) {
    CUfunction function = nullptr;
    CHECK_CU(cuModuleGetFunction(&function, module, name.c_str()));
    std::uint64_t unused = 1;
    void* params[] = {&unused};
    CHECK_CU(cuLaunchKernel(function, 1, 1, 1, 32, 1, 1, 0, nullptr, params, nullptr));
  }
  CHECK_CU(cuCtxSynchronize());
  std::printf("names ok\n");
  return 0;
}

// The shim registered (by a kernel, or only an arrival before any CUDA call), then the process forks
// a child that outlives it by 3 s (its output to /dev/null, so the test's pipe closes with the
// parent) and exits.
int run_orphan(bool cuda) {
  if (cuda) {
    CHECK_CU(launch(10, nullptr));
    CHECK_CU(cuCtxSynchronize());
  } else {
    gpuqos_query_arrived();
  }
  std::fflush(stdout);
  const pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) {
    const int null = ::open("/dev/null", O_RDWR);
    if (null >= 0) {
      ::dup2(null, 1);
      ::dup2(null, 2);
    }
    std::this_thread::sleep_for(std::chrono::seconds(3));
    std::_Exit(0);
  }
  std::printf("orphan ok\n");
  return 0;
}

// A server that says a request's arrival (the shim registers), then forks a worker before any CUDA
// call: the worker may use CUDA, and is managed as a process of its own.
int run_fork_first() {
  gpuqos_query_arrived();
  std::fflush(stdout);
  const pid_t child = fork();
  CHECK(child >= 0);
  if (child == 0) {
    if (open_device() != 0) std::_Exit(1);
    if (launch(10, nullptr) != CUDA_SUCCESS || cuCtxSynchronize() != CUDA_SUCCESS) std::_Exit(2);
    std::printf("child launched\n");
    std::fflush(stdout);
    std::exit(0);
  }
  wait_for_child(child, 1000);
  if (open_device() != 0) return 1;
  CHECK_CU(launch(10, nullptr));
  CHECK_CU(cuCtxSynchronize());
  std::printf("fork-first ok\n");
  return 0;
}

}  // namespace

// 2-D copies with one CU_MEMORYTYPE_UNIFIED side and one of a declared type: device -> pageable
// host, pinned host -> device, pinned (unified) -> device, device -> device (unified), pageable
// (unified) -> host (not posted: host to host); then a synchronisation.
int run_unified_2d() {
  constexpr std::size_t kWidth = 64, kHeight = 4, kBytes = kWidth * kHeight;
  std::vector<unsigned char> pageable(kBytes, 5), other(kBytes, 0);
  void* pinned = nullptr;
  CUdeviceptr device = 0, device2 = 0;
  CHECK_CU(cuMemAllocHost(&pinned, kBytes));
  CHECK_CU(cuMemAlloc(&device, kBytes));
  CHECK_CU(cuMemAlloc(&device2, kBytes));
  const auto address = [](const void* p) { return reinterpret_cast<CUdeviceptr>(p); };
  const auto copy_2d = [&](CUmemorytype src_type, CUdeviceptr src, const void* src_host, CUmemorytype dst_type,
                           CUdeviceptr dst, void* dst_host) {
    CUDA_MEMCPY2D copy{};
    copy.srcMemoryType = src_type;
    copy.srcDevice = src;
    copy.srcHost = src_host;
    copy.srcPitch = kWidth;
    copy.dstMemoryType = dst_type;
    copy.dstDevice = dst;
    copy.dstHost = dst_host;
    copy.dstPitch = kWidth;
    copy.WidthInBytes = kWidth;
    copy.Height = kHeight;
    return cuMemcpy2D(&copy);
  };
  CHECK_CU(copy_2d(CU_MEMORYTYPE_UNIFIED, device, nullptr, CU_MEMORYTYPE_HOST, 0, pageable.data()));
  CHECK_CU(copy_2d(CU_MEMORYTYPE_HOST, 0, pinned, CU_MEMORYTYPE_UNIFIED, device, nullptr));
  CHECK_CU(copy_2d(CU_MEMORYTYPE_UNIFIED, address(pinned), nullptr, CU_MEMORYTYPE_DEVICE, device2, nullptr));
  CHECK_CU(copy_2d(CU_MEMORYTYPE_DEVICE, device, nullptr, CU_MEMORYTYPE_UNIFIED, device2, nullptr));
  CHECK_CU(copy_2d(CU_MEMORYTYPE_UNIFIED, address(pageable.data()), nullptr, CU_MEMORYTYPE_HOST, 0, other.data()));
  CHECK_CU(cuCtxSynchronize());
  std::printf("unified 2d ok\n");
  return 0;
}

// Synchronous copies of `bytes`: up, down, down through unified addresses, down in 2-D (one row),
// and within the device. Each download returns done, as a synchronisation does.
int run_sync_download(std::size_t bytes) {
  std::vector<unsigned char> host(bytes, 9);
  CUdeviceptr device = 0, device2 = 0;
  CHECK_CU(cuMemAlloc(&device, bytes));
  CHECK_CU(cuMemAlloc(&device2, bytes));
  CHECK_CU(cuMemcpyHtoD(device, host.data(), bytes));
  CHECK_CU(cuMemcpyDtoH(host.data(), device, bytes));
  CHECK_CU(cuMemcpy(reinterpret_cast<CUdeviceptr>(host.data()), device, bytes));
  CUDA_MEMCPY2D row{};
  row.srcMemoryType = CU_MEMORYTYPE_DEVICE;
  row.srcDevice = device;
  row.srcPitch = bytes;
  row.dstMemoryType = CU_MEMORYTYPE_HOST;
  row.dstHost = host.data();
  row.dstPitch = bytes;
  row.WidthInBytes = bytes;
  row.Height = 1;
  CHECK_CU(cuMemcpy2D(&row));
  CHECK_CU(cuMemcpyDtoD(device2, device, bytes));
  CHECK(host[bytes - 1] == 9);
  std::printf("sync-download ok\n");
  return 0;
}

int run_graphs() {
  CUstream stream = nullptr;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  const auto make = [&](std::uint64_t duration_us, CUgraphExec* exec) {
    CUgraph graph = nullptr;
    CHECK_CU(cuStreamBeginCapture(stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
    CHECK_CU(launch(duration_us, stream));
    CHECK_CU(cuStreamEndCapture(stream, &graph));
    CHECK_CU(cuGraphInstantiate(exec, graph, 0));
    CHECK_CU(cuGraphDestroy(graph));
    return 0;
  };
  CUgraphExec a = nullptr, b = nullptr, c = nullptr;
  if (make(100, &a) != 0 || make(2000, &b) != 0) return 1;
  for (int i = 0; i < 2; ++i) {
    CHECK_CU(cuGraphLaunch(b, stream));
    CHECK_CU(cuGraphLaunch(a, stream));
  }
  CHECK_CU(cuStreamSynchronize(stream));
  CHECK_CU(cuGraphExecDestroy(a));
  if (make(300, &c) != 0) return 1;
  CHECK_CU(cuGraphLaunch(c, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  std::printf("graphs ok\n");
  return 0;
}

int run_copy_beside_capture(std::size_t bytes) {
  void* pinned = nullptr;
  CUdeviceptr device = 0;
  CUstream capturing = nullptr, copying = nullptr;
  CHECK_CU(cuMemAllocHost(&pinned, bytes));
  CHECK_CU(cuMemAlloc(&device, bytes));
  CHECK_CU(cuStreamCreate(&capturing, 0));
  CHECK_CU(cuStreamCreate(&copying, 0));
  CHECK_CU(cuStreamBeginCapture(capturing, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL));
  CHECK_CU(launch(100, capturing));
  CHECK_CU(cuMemcpyHtoDAsync(device, pinned, bytes, copying));  // legal: it waits for the legacy stream only
  CUgraph graph = nullptr;
  const CUresult ended = cuStreamEndCapture(capturing, &graph);
  std::printf("end_capture %d\n", static_cast<int>(ended));
  CHECK_CU(cuStreamSynchronize(copying));
  if (ended == CUDA_SUCCESS) {
    CUgraphExec exec = nullptr;
    CHECK_CU(cuGraphInstantiate(&exec, graph, 0));
    CHECK_CU(cuGraphLaunch(exec, capturing));
    CHECK_CU(cuStreamSynchronize(capturing));
  }
  CHECK_CU(cuMemFreeHost(pinned));
  return 0;
}

int run_sync_copies(int count, std::size_t bytes) {
  void* pinned = nullptr;
  CUdeviceptr device = 0;
  CHECK_CU(cuMemAllocHost(&pinned, bytes));
  CHECK_CU(cuMemAlloc(&device, bytes));
  long long longest = 0;
  for (int i = 0; i < count; ++i) {
    long long began = now_ns();
    CHECK_CU(cuMemcpyHtoD(device, pinned, bytes));
    longest = std::max(longest, now_ns() - began);
    began = now_ns();
    CHECK_CU(cuMemcpyDtoH(pinned, device, bytes));
    longest = std::max(longest, now_ns() - began);
  }
  CHECK_CU(cuMemFreeHost(pinned));
  std::printf("longest_call_ns %lld\n", longest);
  return 0;
}

int run_unified() {
  constexpr std::size_t kBytes = 8192;
  std::vector<unsigned char> pageable(kBytes, 5), other(kBytes, 0);
  void* pinned = nullptr;
  CUdeviceptr device = 0, device2 = 0;
  CUstream stream = nullptr;
  CHECK_CU(cuMemAllocHost(&pinned, kBytes));
  CHECK_CU(cuMemAlloc(&device, kBytes));
  CHECK_CU(cuMemAlloc(&device2, kBytes));
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  const auto address = [](const void* p) { return reinterpret_cast<CUdeviceptr>(p); };
  CHECK_CU(cuMemcpy(device, address(pinned), kBytes));
  CHECK_CU(cuMemcpyAsync(address(pageable.data()), device, kBytes, stream));
  CHECK_CU(cuMemcpyAsync(device2, device, kBytes, stream));
  CHECK_CU(cuMemcpy(address(other.data()), address(pageable.data()), kBytes));
  CHECK_CU(cuStreamSynchronize(stream));
  std::printf("unified ok\n");
  return 0;
}

int run_copies(std::size_t bytes, std::size_t device_bytes) {
  std::vector<unsigned char> in(bytes), out(bytes, 0);
  for (std::size_t i = 0; i < bytes; ++i) in[i] = static_cast<unsigned char>(i * 131 + i / 4093 + 7);
  CUdeviceptr a = 0, b = 0;
  CUstream stream = nullptr;
  CHECK_CU(cuMemAlloc(&a, device_bytes));
  CHECK_CU(cuMemAlloc(&b, device_bytes));
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  const CUresult htod = cuMemcpyHtoD(a, in.data(), bytes);
  std::printf("htod %d\n", static_cast<int>(htod));
  if (htod != CUDA_SUCCESS) return 3;
  CHECK_CU(cuMemcpyDtoDAsync(b, a, bytes, stream));
  // Drained first: an async copy onto a stream with work queued goes whole (intercept.h).
  CHECK_CU(cuStreamSynchronize(stream));
  // Within device memory, synchronous and unified (b to a, then a back to b: the same bytes).
  CHECK_CU(cuMemcpyDtoD(a, b, bytes));
  CHECK_CU(cuMemcpy(b, a, bytes));
  CHECK_CU(cuMemcpyAsync(reinterpret_cast<CUdeviceptr>(out.data()), b, bytes, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  CHECK(in == out);
  std::printf("copies ok\n");
  return 0;
}

// An async copy of `bytes` onto a stream that looks idle but waits, by CUDA's implicit
// synchronisation, for the legacy default stream, whose host function waits for what the program
// does after the call. `how`: "blocking" (a stream created with flags 0), "per-thread" (the
// per-thread default stream) or "legacy" (the legacy stream itself, behind a blocking stream's host
// function). Prints the call's time ("call_ms <ms>"); a copy the shim splits waits for each chunk's
// grant, which waits for the chunk before: behind the host function, gpuqosd's stuck limit (2 s).
int run_copy_behind_legacy(std::size_t bytes, const std::string& how) {
  static std::atomic<int> go{0};
  const auto wait_for_go = [](void*) {
    for (int i = 0; i < 20'000 && go.load() == 0; ++i) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  };
  std::vector<unsigned char> in(bytes), out(bytes, 0);
  for (std::size_t i = 0; i < bytes; ++i) in[i] = static_cast<unsigned char>(i * 131 + i / 4093 + 7);
  CUdeviceptr device = 0;
  CUstream blocking = nullptr;
  CHECK_CU(cuMemAlloc(&device, bytes));
  CHECK_CU(cuStreamCreate(&blocking, 0));
  const bool legacy = how == "legacy";
  CHECK_CU(cuLaunchHostFunc(legacy ? blocking : CU_STREAM_LEGACY, wait_for_go, nullptr));
  const CUstream target = how == "blocking" ? blocking : how == "per-thread" ? CU_STREAM_PER_THREAD : CU_STREAM_LEGACY;
  const long long before = now_ns();
  CHECK_CU(cuMemcpyHtoDAsync(device, in.data(), bytes, target));
  std::printf("call_ms %lld\n", (now_ns() - before) / 1'000'000);
  go.store(1);
  CHECK_CU(cuCtxSynchronize());
  CHECK_CU(cuMemcpyDtoH(out.data(), device, bytes));
  CHECK(in == out);
  std::printf("copy behind legacy ok\n");
  return 0;
}

// A width x height window of a host image (from its byte 8 of row 3) into a pitched allocation (at
// byte 4 of row 2) and back into another image at the same place: cuMemcpy2D in, cuMemcpy2DAsync
// out. `narrow`: the copy in says a pitch one byte short of its width, which the driver refuses
// (printed as "narrow <result>"). `wide`: its host side's pitch is one byte over the largest a GPU
// allows (2^31 - 1), from a reservation of that much that nothing touches ("wide <result>").
int run_copies_2d(std::size_t width, std::size_t height, bool narrow, bool wide) {
  constexpr std::size_t kX = 8, kY = 3;
  const std::size_t image_pitch = width + 2 * kX, image_bytes = image_pitch * (height + 2 * kY);
  std::vector<unsigned char> in(image_bytes), out(image_bytes, 0);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i * 131 + i / 4093 + 7);
  CUdeviceptr device = 0;
  std::size_t pitch = 0;
  CUstream stream = nullptr;
  CHECK_CU(cuMemAllocPitch(&device, &pitch, width + 4, height + 2, 4));
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUDA_MEMCPY2D copy{};
  copy.srcMemoryType = CU_MEMORYTYPE_HOST;
  copy.srcHost = in.data();
  copy.srcPitch = image_pitch;
  copy.srcXInBytes = kX;
  copy.srcY = kY;
  copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.dstDevice = device;
  copy.dstPitch = narrow ? width - 1 : pitch;
  copy.dstXInBytes = 4;
  copy.dstY = 2;
  copy.WidthInBytes = width;
  copy.Height = height;
  if (narrow) {
    std::printf("narrow %d\n", static_cast<int>(cuMemcpy2D(&copy)));
    return 0;
  }
  if (wide) {
    copy.srcPitch = std::size_t{1} << 31;
    copy.srcXInBytes = 0;
    copy.srcY = 0;
    const std::size_t reserved = (height - 1) * copy.srcPitch + width;
    void* far = ::mmap(nullptr, reserved, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    CHECK(far != MAP_FAILED);
    copy.srcHost = far;
    std::printf("wide %d\n", static_cast<int>(cuMemcpy2D(&copy)));
    ::munmap(far, reserved);
    return 0;
  }
  CHECK_CU(cuMemcpy2D(&copy));
  // The whole pitched image onto a twin within device memory, and back from the twin.
  CUdeviceptr twin = 0;
  std::size_t twin_pitch = 0;
  CHECK_CU(cuMemAllocPitch(&twin, &twin_pitch, width + 4, height + 2, 4));
  CUDA_MEMCPY2D within{};
  within.srcMemoryType = within.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  within.srcDevice = device;
  within.srcPitch = pitch;
  within.dstDevice = twin;
  within.dstPitch = twin_pitch;
  within.WidthInBytes = width + 4;
  within.Height = height + 2;
  CHECK_CU(cuMemcpy2D(&within));
  copy.dstPitch = twin_pitch;
  std::swap(copy.srcMemoryType, copy.dstMemoryType);
  std::swap(copy.srcPitch, copy.dstPitch);
  std::swap(copy.srcXInBytes, copy.dstXInBytes);
  std::swap(copy.srcY, copy.dstY);
  copy.srcDevice = twin;
  copy.srcHost = nullptr;
  copy.dstHost = out.data();
  CHECK_CU(cuMemcpy2DAsync(&copy, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  for (std::size_t row = 0; row < height + 2 * kY; ++row) {
    for (std::size_t col = 0; col < image_pitch; ++col) {
      const bool inside = row >= kY && row < kY + height && col >= kX && col < kX + width;
      CHECK(out[row * image_pitch + col] == (inside ? in[row * image_pitch + col] : 0));
    }
  }
  std::printf("copies-2d ok\n");
  return 0;
}

// A width x height x depth box of a host volume (from byte 8 of row 3 of slice 1; rows of width + 16
// bytes, slices of height + 6 rows) into a pitched allocation (at byte 4 of row 2 of slice 2, slices
// of height + 2 rows) and back into another volume at the same place: cuMemcpy3D in,
// cuMemcpy3DAsync out; the program checks every byte it gets back. `short`: the copy in says device
// slices one row short of its rows from its Y, which the driver refuses ("short <result>").
int run_copies_3d(std::size_t width, std::size_t height, std::size_t depth, bool short_slices) {
  constexpr std::size_t kX = 8, kY = 3, kZ = 1;
  const std::size_t pitch_in = width + 2 * kX, rows_in = height + 2 * kY, slices_in = depth + 2 * kZ;
  const std::size_t volume_bytes = pitch_in * rows_in * slices_in, device_rows = height + 2;
  std::vector<unsigned char> in(volume_bytes), out(volume_bytes, 0);
  for (std::size_t i = 0; i < in.size(); ++i) in[i] = static_cast<unsigned char>(i * 131 + i / 4093 + 7);
  CUdeviceptr device = 0;
  std::size_t pitch = 0;
  CUstream stream = nullptr;
  CHECK_CU(cuMemAllocPitch(&device, &pitch, width + 4, device_rows * (depth + 2), 4));
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CUDA_MEMCPY3D copy{};
  copy.srcMemoryType = CU_MEMORYTYPE_HOST;
  copy.srcHost = in.data();
  copy.srcPitch = pitch_in;
  copy.srcHeight = rows_in;
  copy.srcXInBytes = kX;
  copy.srcY = kY;
  copy.srcZ = kZ;
  copy.dstMemoryType = CU_MEMORYTYPE_DEVICE;
  copy.dstDevice = device;
  copy.dstPitch = pitch;
  copy.dstHeight = short_slices ? device_rows - 1 : device_rows;
  copy.dstXInBytes = 4;
  copy.dstY = 2;
  copy.dstZ = 2;
  copy.WidthInBytes = width;
  copy.Height = height;
  copy.Depth = depth;
  if (short_slices) {
    std::printf("short %d\n", static_cast<int>(cuMemcpy3D(&copy)));
    return 0;
  }
  CHECK_CU(cuMemcpy3D(&copy));
  std::swap(copy.srcMemoryType, copy.dstMemoryType);
  std::swap(copy.srcPitch, copy.dstPitch);
  std::swap(copy.srcHeight, copy.dstHeight);
  std::swap(copy.srcXInBytes, copy.dstXInBytes);
  std::swap(copy.srcY, copy.dstY);
  std::swap(copy.srcZ, copy.dstZ);
  copy.srcDevice = device;
  copy.srcHost = nullptr;
  copy.dstHost = out.data();
  CHECK_CU(cuMemcpy3DAsync(&copy, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  for (std::size_t i = 0; i < volume_bytes; ++i) {
    const std::size_t slice = i / (pitch_in * rows_in), row = i / pitch_in % rows_in, col = i % pitch_in;
    const bool inside = slice >= kZ && slice < kZ + depth && row >= kY && row < kY + height && col >= kX && col < kX + width;
    CHECK(out[i] == (inside ? in[i] : 0));
  }
  std::printf("copies-3d ok\n");
  return 0;
}

int run_reuse() {
  const char* daemon = std::getenv("GPUQOS_SOCKET");
  const char* which_env = std::getenv("GATE_REUSE");
  const std::string which = which_env ? which_env : "both";
  std::vector<int> open_fds, closed;
  if (DIR* fds = ::opendir("/proc/self/fd")) {
    while (const dirent* entry = ::readdir(fds)) {
      if (entry->d_name[0] != '.') open_fds.push_back(std::atoi(entry->d_name));
    }
    ::closedir(fds);
  }
  for (const int fd : open_fds) {
    if (fd < 3) continue;
    int type = 0;
    socklen_t length = sizeof type;
    if (::getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &length) != 0) continue;
    sockaddr_un peer{};
    socklen_t peer_length = sizeof peer;
    const bool to_daemon = daemon && ::getpeername(fd, reinterpret_cast<sockaddr*>(&peer), &peer_length) == 0 &&
                           peer.sun_family == AF_UNIX && std::string(peer.sun_path) == daemon;
    if ((to_daemon && which != "doorbell") || (type == SOCK_DGRAM && which != "socket")) closed.push_back(fd);
  }
  // Closed and taken back at once, each number for a socket pair of the program's own.
  std::vector<std::pair<int, int>> pairs;  // {the near end, at a number the shim had; the far end}
  for (const int fd : closed) {
    int ends[2];
    CHECK(::socketpair(AF_UNIX, SOCK_STREAM, 0, ends) == 0);
    CHECK(::dup2(ends[0], fd) == fd);  // closes the shim's descriptor and reuses its number
    ::close(ends[0]);
    pairs.emplace_back(fd, ends[1]);
    CHECK(::write(ends[1], "hello", 5) == 5);
  }
  std::printf("closed %zu\n", closed.size());
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  CHECK_CU(launch(100, nullptr));
  CHECK_CU(cuCtxSynchronize());
  std::size_t intact = 0;
  for (const auto& [near, far] : pairs) {
    char got[64] = {};
    const ssize_t n = ::recv(near, got, sizeof got, MSG_DONTWAIT);
    const bool back = ::write(near, "x", 1) == 1 && ::recv(far, got + 32, 1, MSG_DONTWAIT) == 1;
    intact += n == 5 && std::string(got, 5) == "hello" && back;
  }
  std::printf("intact %zu of %zu\nend %lld\n", intact, pairs.size(), now_ns());
  return 0;
}

int run_marks() {
  CUstream stream = nullptr;
  CUevent event = nullptr;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuEventCreate(&event, CU_EVENT_DEFAULT));
  std::thread([] { gpuqos_query_arrived(); }).join();  // a server's receiving thread: no CUDA context
  gpuqos_query_begin();
  CHECK_CU(launch(100, stream));
  CHECK_CU(cuStreamSynchronize(stream));
  gpuqos_query_end();
  CHECK_CU(cuCtxSynchronize());
  CHECK_CU(cuEventRecord(event, stream));
  CHECK_CU(cuEventSynchronize(event));
  std::printf("marks ok\n");
  return 0;
}

int run_iterations(long count, long duration_us) {
  CUstream stream = nullptr;
  CUdeviceptr buffer = 0;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  CHECK_CU(cuMemAlloc(&buffer, 16));
  for (long i = 0; i < count; ++i) {
    CHECK_CU(cuMemsetD8Async(buffer, 0, 16, stream));
    CHECK_CU(launch(static_cast<std::uint64_t>(duration_us), stream));
    CHECK_CU(cuStreamSynchronize(stream));
  }
  std::printf("iterations ok\n");
  return 0;
}

int run_flood(long marks, long kernels, long duration_us) {
  CUstream stream = nullptr;
  CHECK_CU(cuStreamCreate(&stream, CU_STREAM_NON_BLOCKING));
  for (long i = 0; i < marks; ++i) gpuqos_query_arrived();
  for (long i = 0; i < kernels; ++i) CHECK_CU(launch(static_cast<std::uint64_t>(duration_us), stream));
  CHECK_CU(cuStreamSynchronize(stream));
  std::printf("flood ok\n");
  return 0;
}

int run_dropped() {
  CHECK_CU(launch(0, nullptr));
  CHECK_CU(cuCtxSynchronize());
  gpuqos_query_arrived();  // shed by the server: never begun
  gpuqos_query_arrived();
  gpuqos_query_dropped();
  gpuqos_query_begin();
  gpuqos_query_end();
  gpuqos_query_dropped();  // none waiting: nothing to forget
  gpuqos_query_begin();
  gpuqos_query_end();
  std::printf("dropped ok\n");
  return 0;
}

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const auto arg = [&](int i, long fallback) { return argc > i ? std::atol(argv[i]) : fallback; };
  // Moves before its first CUDA call, as a program may (the shim reads its settings then).
  if (const char* directory = std::getenv("GATE_CLIENT_CHDIR"); directory && ::chdir(directory) != 0) return 1;
  if (mode == "signals") start_alarms(arg(2, 20000));
  if (mode == "fork-first") return run_fork_first();  // CUDA first used after the fork
  if (mode == "orphan-first") return run_orphan(false);
  if (open_device() != 0) return 1;
  if (mode == "ops") return run_ops();
  if (mode == "orphan") return run_orphan(true);
  if (mode == "names") return run_names(arg(2, 2000));
  if (mode == "unified") return run_unified();
  if (mode == "unified-2d") return run_unified_2d();
  if (mode == "marks") return run_marks();
  if (mode == "dropped") return run_dropped();
  if (mode == "flood") return run_flood(arg(2, 2000), arg(3, 200), arg(4, 0));
  if (mode == "iterations") return run_iterations(arg(2, 80), arg(3, 2000));
  if (mode == "timed") return run_timed(arg(2, 1000));
  if (mode == "loop") return run_loop(arg(2, 10), arg(3, 1000));
  if (mode == "threads") return run_threads(arg(2, 4), arg(3, 20));
  if (mode == "bench") return run_bench(arg(2, 1000), argc > 3 && std::string(argv[3]) == "legacy");
  if (mode == "sync-download") return run_sync_download(arg(2, 4096));
  if (mode == "graphs") return run_graphs();
  if (mode == "copy-beside-capture") return run_copy_beside_capture(arg(2, 16 << 20));
  if (mode == "sync-copies") return run_sync_copies(arg(2, 20), arg(3, 8 << 20));
  if (mode == "copies") return run_copies(arg(2, 1 << 20), arg(3, arg(2, 1 << 20)));
  if (mode == "copies-2d") {
    const std::string how = argc > 4 ? argv[4] : "";
    return run_copies_2d(arg(2, 3000), arg(3, 4096), how == "narrow", how == "wide");
  }
  if (mode == "copies-3d") {
    return run_copies_3d(arg(2, 3000), arg(3, 400), arg(4, 12), argc > 5 && std::string(argv[5]) == "short");
  }
  if (mode == "contexts") return run_contexts(arg(2, 200));
  if (mode == "fork") return run_fork();
  if (mode == "reuse") return run_reuse();
  if (mode == "destroy") return run_destroy(argc > 2 && std::string(argv[2]) == "legacy");
  if (mode == "release-beside") return run_release_beside();
  if (mode == "green") return run_green();
  if (mode == "reload") return run_reload(argc > 2 && std::string(argv[2]) == "destroy");
  if (mode == "exit-running") return run_exit_running();
  if (mode == "legacy-two") return run_legacy_two();
  if (mode == "burst") return run_burst(arg(2, 3));
  if (mode == "queue") return run_queue(arg(2, 30), arg(3, 100));
  if (mode == "signals") return run_signals();
  if (mode == "cancel") return run_cancel(arg(2, 300));
  if (mode == "exit-in-handler") return run_exit_in_handler(arg(2, 20000));
  if (mode == "copy-behind-legacy") return run_copy_behind_legacy(arg(2, 32 << 20), argc > 3 ? argv[3] : "blocking");
  if (mode == "masks") return run_masks();
  std::printf("usage: %s ops|signals|cancel|masks|unified|marks|dropped|timed|loop|threads|bench|copies|copies-2d|copies-3d|contexts|fork|reuse|destroy|release-beside|green|reload|exit-running|legacy-two|burst|queue\n",
              argv[0]);
  return 2;
}
