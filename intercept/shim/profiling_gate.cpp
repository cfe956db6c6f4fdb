// ProfilingGate: the inner gate's decisions, plus an external correlation id around each profiled call.
#include "profiling_gate.h"

#include "describe.h"
#include "gpuqos/ipc/clock.h"
#include "shim.h"

namespace gpuqos::intercept {
namespace {

using CtxGetCurrent = CUresult (*)(CUcontext*);

// This thread's hook nesting and the external id pushed at its outermost profiled call. A hook's
// real function may call another hooked symbol (simgpu's cuMemAllocHost calls cuMemHostAlloc): only
// the outermost call is profiled, so pushes and pops pair up.
struct ThreadCall {
  int depth = 0;
  std::uint64_t external_id = 0;
};
thread_local ThreadCall this_thread_call;

}  // namespace

bool Profiler::in_hooked_call() noexcept { return this_thread_call.depth > 0; }

namespace {

bool profiled_category(const Operation& op) {
  return !op.captured &&
         (op.category == Category::launch || op.category == Category::copy || op.category == Category::memset);
}

}  // namespace

ProfilingGate::ProfilingGate(Gate& inner, const Settings& settings, Profiler::Log log)
    : inner_(inner), profiler_(settings, kernels_, std::move(log)) {}

// The depth counts the inner gate's parts of the call too: exit() from a signal handler that
// interrupted any of it must find the thread inside a call (Profiler::finish).
Ticket ProfilingGate::before(const Operation& op) noexcept {
  ThreadCall& call = this_thread_call;
  const bool outermost = call.depth++ == 0;
  const Ticket ticket = inner_.before(op);  // a low-priority op may wait here for its grant
  if (outermost && profiled_category(op) && profiler_.ready()) begin_profiled(op);
  return ticket;
}

void ProfilingGate::after(const Operation& op, Ticket ticket, CUresult result) noexcept {
  ThreadCall& call = this_thread_call;
  struct Leave {
    ThreadCall& call;
    ~Leave() { --call.depth; }
  } const leave{call};
  if (call.depth == 1 && call.external_id != 0) {
    profiler_.end(std::exchange(call.external_id, 0), result == CUDA_SUCCESS);
  }
  if (op.category == Category::naming && result == CUDA_SUCCESS) learn_kernel_name(op, kernels_);
  // A context that ended took its modules' functions with it: their handles may be given again to
  // other kernels, and its handle to a context of another device (as DaemonGate forgets them; a
  // review: after a cuCtxDestroy the profile named a kernel by the one its handle had been, and read
  // that one's argument layout past the new kernel's parameters). A primary context's release ends
  // it only when it leaves it inactive.
  if (op.category == Category::lifetime && result == CUDA_SUCCESS && !destroys_stream(op.hook) &&
      (!releases_primary(op.hook) || !primary_active(op.device))) {
    try {
      kernels_.forget_context_bound();
    } catch (...) {  // out of memory: as KernelRegistry's other updates
    }
    devices_.forget_all();
  }
  inner_.after(op, ticket, result);
}

void ProfilingGate::shutdown() noexcept {
  profiler_.finish();
  inner_.shutdown();
}

void ProfilingGate::begin_profiled(const Operation& op) noexcept {
  try {
    CUcontext context = nullptr;
    const auto get_current = driver<CtxGetCurrent>(DriverHelper::ctx_get_current);
    if (!get_current || get_current(&context) != CUDA_SUCCESS || !context) return;  // the call fails
    ipc::OpDescriptor descriptor;
    if (!describe(op, devices_.of(context), ipc::monotonic_ns(), kernels_, descriptor)) return;
    this_thread_call.external_id = profiler_.begin(descriptor);
  } catch (...) {  // out of memory: this op is not profiled
  }
}



}  // namespace gpuqos::intercept
