// The parts of libgpuqos.so, as the hooks see them. Internal to the shim.
#pragma once

#include <cuda.h>
#include <cudaTypedefs.h>
#include <pthread.h>
#include <signal.h>

#include <string_view>
#include <utility>

#include "gpuqos/intercept/gate.h"
#include "gpuqos/intercept/hooks.h"
#include "gpuqos/intercept/settings.h"

namespace gpuqos::intercept {

// Holds off pthread_cancel for a whole hook. The shim's waits (the Hello, a grant, a full ring) and
// writes are cancellation points inside noexcept code, where a cancellation's forced unwind calls
// std::terminate: a cancelled thread waiting for its grant aborted the whole job. A cancel held
// off during the wait would then act in the driver's own call, where simgpu's driver aborted the
// same way, so the driver's call is covered too: a thread blocked in a synchronisation is
// cancelled once it returns. A deferred cancel (the default type) then acts at the program's next
// cancellation point, as if it had come just after the call; an asynchronous one acts as the state
// is restored, and terminates as it did before. Two pthread_setcancelstate calls, about 11 ns.
class NoCancel {
 public:
  NoCancel() noexcept { ::pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &previous_); }
  ~NoCancel() { ::pthread_setcancelstate(previous_, nullptr); }
  NoCancel(const NoCancel&) = delete;
  NoCancel& operator=(const NoCancel&) = delete;

 private:
  int previous_ = PTHREAD_CANCEL_ENABLE;
};

// Blocks every asynchronous signal in the calling thread while it lives, so that threads started
// meanwhile inherit that mask, and restores the thread's mask however the scope ends. A program that
// blocks SIGTERM in its threads and takes it with sigwait in one (a graceful shutdown) must get it
// there; delivered to a thread of ours, or one CUPTI starts for us, that left it unblocked, its
// default action killed the job. The faults a thread raises itself (SIGSEGV, SIGBUS, SIGFPE, SIGILL,
// SIGTRAP, and SIGSYS from a seccomp filter) stay unblocked: blocked, the kernel would kill the
// process at one.
class AsyncSignalsBlocked {
 public:
  AsyncSignalsBlocked() noexcept {
    sigset_t quiet;
    ::sigfillset(&quiet);
    for (const int fault : {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGSYS}) ::sigdelset(&quiet, fault);
    ::pthread_sigmask(SIG_BLOCK, &quiet, &previous_);
  }
  ~AsyncSignalsBlocked() { ::pthread_sigmask(SIG_SETMASK, &previous_, nullptr); }
  AsyncSignalsBlocked(const AsyncSignalsBlocked&) = delete;
  AsyncSignalsBlocked& operator=(const AsyncSignalsBlocked&) = delete;

 private:
  sigset_t previous_;
};

// Starts a thread of the shim's (std::thread or std::jthread), named `name` (at most 15 characters,
// for top -H and gdb) before this returns, and with every asynchronous signal blocked
// (AsyncSignalsBlocked). The calling thread's mask is restored, also when the thread cannot start
// (std::system_error).
template <class Thread, class Body>
Thread start_thread(const char* name, Body&& body) {
  const AsyncSignalsBlocked blocked;  // inherited by the new thread
  Thread thread(std::forward<Body>(body));
  ::pthread_setname_np(thread.native_handle(), name);
  return thread;
}

// The driver's soname: what the shim loads, and what a program's dlopen of the driver names.
inline constexpr const char* kDriverSoname = "libcuda.so.1";

// real_functions.cpp: the driver's definition of a hooked symbol, looked up on first use; nullptr
// when there is none (then the hook returns missing_real_function(id), never calls it).
void* real_function_address(HookId id) noexcept;
// The same if it was looked up already, else nullptr (looks nothing up, loads nothing).
void* resolved_real_function_address(HookId id) noexcept;
CUresult missing_real_function(HookId id) noexcept;

// Driver functions the shim calls itself (never through our hooks), resolved the same way; nullptr
// when the driver lacks one (optional ones, such as cuMemHostGetFlags on simgpu, are not logged).
enum class DriverHelper {
  stream_is_capturing, stream_is_capturing_ptsz, ctx_get_current, ctx_get_device, func_get_param_info,
  func_get_name, mem_host_get_flags, pointer_get_attribute, event_create, event_destroy, event_record,
  event_record_ptsz, event_query, ctx_set_current, thread_exchange_stream_capture_mode,
  primary_ctx_get_state, primary_ctx_retain, primary_ctx_release, device_get_attribute,
  event_elapsed_time_v2, event_elapsed_time, device_get_count, device_get_uuid_v2, device_get_uuid, stream_query,
  ctx_get_id, stream_get_flags,
};
inline constexpr std::size_t kDriverHelperCount = 27;
void* driver_helper(DriverHelper helper) noexcept;

// The helper as its driver function type: driver<PFN_cuEventRecord>(DriverHelper::event_record).
template <class Function>
Function driver(DriverHelper helper) noexcept {
  return reinterpret_cast<Function>(driver_helper(helper));
}

// This thread in relaxed stream-capture mode while the object lives (`active`: it is; false when the
// driver cannot say). In the default (global) mode, the shim's own event and query calls made on a
// program's thread are "potentially unsafe" while this thread or another captures a graph, and
// would invalidate the capture.
class RelaxedCaptureMode {
 public:
  RelaxedCaptureMode() noexcept
      : exchange_(driver<PFN_cuThreadExchangeStreamCaptureMode_v10010>(DriverHelper::thread_exchange_stream_capture_mode)) {
    active_ = exchange_ != nullptr && exchange_(&mode_) == CUDA_SUCCESS;
  }
  ~RelaxedCaptureMode() {
    if (active_) exchange_(&mode_);  // the thread's own mode back
  }
  RelaxedCaptureMode(const RelaxedCaptureMode&) = delete;
  RelaxedCaptureMode& operator=(const RelaxedCaptureMode&) = delete;
  bool active() const noexcept { return active_; }

 private:
  PFN_cuThreadExchangeStreamCaptureMode_v10010 exchange_;
  CUstreamCaptureMode mode_ = CU_STREAM_CAPTURE_MODE_RELAXED;
  bool active_ = false;
};

// dlsym.cpp: glibc's dlsym (ours answers hooks, so the shim must never call plain dlsym).
using DlsymFunction = void* (*)(void*, const char*);
DlsymFunction real_dlsym() noexcept;

// hooks.cpp (generated): our exported definition of a hook.
void* hook_address(HookId id) noexcept;

// capture.cpp: whether GPU work goes into a capturing stream (it then passes straight through).
bool issued_into_capture(const Operation& op) noexcept;

// proc_address.cpp: cuGetProcAddress and cuGetProcAddress_v2. The driver's answer, with our hook in
// place of the real function when the answered symbol is hooked.
CUresult answer_proc_address(PFN_cuGetProcAddress_v11030 real, const char* symbol, void** pfn, int version,
                             cuuint64_t flags) noexcept;
CUresult answer_proc_address(PFN_cuGetProcAddress_v12000 real, const char* symbol, void** pfn, int version,
                             cuuint64_t flags, CUdriverProcAddressQueryResult* found) noexcept;

// client.cpp: stops the completion thread (an atexit handler: before the driver's exit handlers).
void stop_completion_tracking() noexcept;

// client.cpp: a line on stderr, "gpuqos[<pid>] <job>: <text>", if `level` is enabled.
void log_message(LogLevel level, std::string_view text) noexcept;

// client.cpp: this process has used CUDA (the driver named a current context). A child forked after
// that cannot use CUDA and runs unmanaged; one forked before starts a registration of its own.
void note_cuda_used() noexcept;

}  // namespace gpuqos::intercept
