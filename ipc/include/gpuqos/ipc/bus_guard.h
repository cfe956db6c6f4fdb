// SIGBUS protection for shared memory another process can truncate.
//
// A client owns its segment's file (it must be able to map it), so it can ftruncate it; the
// daemon's next access to the vanished pages would then raise SIGBUS and kill the daemon and every
// other client's scheduling with it. The guard does what Wayland compositors do for client shm
// buffers (libwayland-server's wl_shm SIGBUS handler): when a fault hits a guarded range, the
// handler maps anonymous zero pages over the whole range, marks it faulted and returns, so the
// faulting instruction re-runs on zeros. The owner checks faulted() and drops the client.
//
// install_bus_guard() is for the daemon's main(): a library must not take a process's SIGBUS.
// Faults outside every guarded range get the previous disposition (by default: the process dies
// with SIGBUS, as it would have without the guard).
#pragma once

#include <cstddef>
#include <string>

#include "gpuqos/ipc/result.h"

namespace gpuqos::ipc {

// Installs the process-wide SIGBUS handler (idempotent).
Status install_bus_guard();

// A guarded range for as long as the object lives. Movable; at most kMaxGuardedRanges at once
// (beyond that a range is simply unguarded: guarded() is false).
class BusGuard {
 public:
  static constexpr std::size_t kMaxGuardedRanges = 4096;

  BusGuard() = default;
  BusGuard(void* base, std::size_t bytes) noexcept;
  ~BusGuard();
  BusGuard(BusGuard&& other) noexcept : slot_(other.slot_) { other.slot_ = -1; }
  BusGuard& operator=(BusGuard&& other) noexcept;
  BusGuard(const BusGuard&) = delete;
  BusGuard& operator=(const BusGuard&) = delete;

  bool guarded() const noexcept { return slot_ >= 0; }
  // A fault hit the range: it now holds zeros, no longer the shared memory.
  bool faulted() const noexcept;

 private:
  int slot_ = -1;
};

}  // namespace gpuqos::ipc
