// The gate: the one place a hooked call meets the scheduler. The hooks describe each call as an
// Operation and ask the gate before and tell it after calling the real driver function.
#pragma once

#include <cuda.h>

#include <cstdint>

#include "gpuqos/intercept/hooks.h"

namespace gpuqos::intercept {

enum class CopyDirection : std::uint8_t { unknown, host_to_device, device_to_host, device_to_device, host_to_host, peer };

struct Dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// One hooked call, described from its arguments (gen_hooks.py writes the description of each hook).
// Pointers are the caller's: valid during before() and after() only.
struct Operation {
  CUstream stream = nullptr;  // the stream named in the call; nullptr: the default stream
  bool per_thread = false;    // a _ptsz/_ptds form: a null stream is the per-thread default stream
  CUfunction function = nullptr;  // launch
  CUkernel kernel = nullptr;      // naming: cuKernelGetFunction's kernel
  Dim3 grid{};                    // launch (cuLaunchCooperativeKernelMultiDevice: unknown, 1x1x1)
  Dim3 block{};
  unsigned shared_mem_bytes = 0;
  void** kernel_params = nullptr;
  CUgraphExec graph_exec = nullptr;  // graph_launch
  std::uint64_t bytes = 0;           // copy, memset, alloc: bytes moved, set or allocated (0: unknown)
  CopyDirection direction = CopyDirection::unknown;  // copy; unknown for unified-address copies
  CUevent event = nullptr;           // sync on an event
  CUcontext context = nullptr;       // cuCtxSynchronize_v2, cuCtxDestroy_v2
  CUdevice device = -1;              // cuDevicePrimaryCtxRelease_v2, cuDevicePrimaryCtxReset_v2
  CUdeviceptr device_ptr = 0;        // memset destination, freed pointer
  CUdeviceptr src_ptr = 0;           // copy with unified addresses (direction unknown): the pointers
  CUdeviceptr dst_ptr = 0;           //   that tell it (a batch: its first pair)
  const void* host_ptr = nullptr;    // copy: the host side of a host<->device copy (pinned or not?)
  void* out_handle = nullptr;        // naming, alloc, context: where the driver writes the result (read in after())
  const char* name = nullptr;        // naming: the kernel's name
  const void* module = nullptr;      // naming: the CUmodule or CUlibrary got from, or unloaded
  HookId hook{};                     // set by the hook
  Category category{};
  // Issued into a capturing stream: it only records a graph node and runs when the graph is
  // launched, so it passes straight through; the gate must neither post nor hold it.
  bool captured = false;
  // copy: a synchronous form (no stream argument). One between host and device memory returns only
  // once it is done (or, from pageable memory, once staged), so its call lasts as long as it does.
  bool synchronous = false;
};

// What before() gave an operation, handed back to after(). seq 0: not posted.
struct Ticket {
  std::uint64_t seq = 0;
  std::uint32_t session = 0;    // which registration with the daemon posted it
  CUcontext context = nullptr;  // current when it was posted: completion events are made there
  // A lifetime call: the context it may end (context above) could not be named, so it may be any.
  bool any_context = false;
  // A primary context's release: cuCtxGetId of the context it may end, before it (0: unknown). The
  // release ended it unless the device's primary context is still this one after it.
  std::uint64_t context_id = 0;
  // A primary context's retain (the context hook): how many releases and resets had succeeded on
  // its device when it began (a handle it returns after another one did is not remembered).
  std::uint64_t primary_generation = 0;
  std::int64_t posted_ns = 0;   // when the real call was issued (after any wait for the grant)
  bool waited = false;          // held for the daemon's grant (not issued on credit)
  CUevent start_event = nullptr;  // timed: recorded on its stream right before the call (completion_tracker.h)
  std::int64_t start_ns = 0;      // just before start_event was recorded
  std::int64_t call_began_ns = 0;  // just after start_event was recorded: the real call comes next
};

// Contract for every implementation: called concurrently from any thread of the program, possibly
// while it exits; never throws, exits or aborts; on any failure of its own it lets the operation
// go (fail open), and it never makes a caller wait for more than ~100 ms after the daemon stopped
// answering.
class Gate {
 public:
  virtual ~Gate() = default;

  // Before the real driver function, on the calling thread. For GPU work: high priority posts the
  // descriptor and returns at once; low priority posts it and blocks until the daemon grants it.
  // Order within a stream is preserved because the caller's thread waits here.
  virtual Ticket before(const Operation& op) noexcept = 0;

  // After the real function returned `result` (also on failure: the daemon must not wait for work
  // the driver refused). Starts completion tracking of granted work; the completion itself is
  // reported later, when the device has run it. Also where naming and alloc read out_handle.
  virtual void after(const Operation& op, Ticket ticket, CUresult result) noexcept = 0;

  // The library is being unloaded or the process exits: flush and release what is held.
  virtual void shutdown() noexcept = 0;

  // An explicit query mark from gpuqos/query.h (gpuqosQueryArrived / gpuqosQueryBegin /
  // gpuqosQueryEnd / gpuqosQueryDropped). Never waits; any thread. The default ignores it (nothing to tell when there is
  // no daemon).
  enum class QueryMark { arrived, begin, end, dropped };
  virtual void mark_query(QueryMark /*mark*/) noexcept {}

  // A synchronous copy (all of it, chunks and all) returned CUDA_SUCCESS: the program waited for it
  // as at a synchronisation when it copied into host memory (the driver returns only once such a
  // copy is done). Called by the copy hooks only. The default does nothing.
  virtual void synchronous_copy_returned(const Operation& /*op*/) noexcept {}

  // Asked by the 1-D copy hooks (and only by them) before a copy: a copy larger than this is issued
  // as chunks of at most this many bytes, each one operation of its own through before() and
  // after(), so the daemon can let other work in between. 0: never split (the default; what a
  // high-priority or unmanaged process gets). Must be cheap: no locks, no syscalls.
  virtual std::uint64_t copy_chunk_bytes() const noexcept { return 0; }
};

// The process's gate (the one connection object of the shim).
Gate& gate() noexcept;

}  // namespace gpuqos::intercept
