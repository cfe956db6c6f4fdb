// The gate in profiling mode (GPUQOS_PROFILE=FILE): a decorator around the gate client.cpp builds
// (DaemonGate), which it consults first and tells last, so scheduling is exactly as without it.
// Around the real driver call of each kernel launch, copy and memset it describes the op as the
// daemon would see it (describe.h: grid, block, shared memory, up to 8 scalar arguments, kernel
// name) and hands it to the Profiler, which pairs it with CUPTI's device timing of the call.
//
// Not profiled: graph launches (the device times a graph as a whole; CUPTI's per-node records of a
// graph have no descriptor to join), work captured into a graph, host-to-host copies, and calls a
// hook makes while inside another hook on the same thread.
#pragma once

#include <cstdint>
#include <mutex>
#include <utility>
#include <vector>

#include "describe.h"
#include "gpuqos/intercept/gate.h"
#include "gpuqos/intercept/settings.h"
#include "kernel_registry.h"
#include "profiler.h"

namespace gpuqos::intercept {

class ProfilingGate final : public Gate {
 public:
  // `inner` must outlive this gate (both live until the process ends).
  ProfilingGate(Gate& inner, const Settings& settings, Profiler::Log log);

  Ticket before(const Operation& op) noexcept override;
  void after(const Operation& op, Ticket ticket, CUresult result) noexcept override;
  // Writes the profile (if the exit handler has not yet), then shuts the inner gate down.
  void shutdown() noexcept override;
  void mark_query(QueryMark mark) noexcept override { inner_.mark_query(mark); }
  void synchronous_copy_returned(const Operation& op) noexcept override { inner_.synchronous_copy_returned(op); }
  std::uint64_t copy_chunk_bytes() const noexcept override { return inner_.copy_chunk_bytes(); }

  Profiler& profiler() noexcept { return profiler_; }

 private:
  void begin_profiled(const Operation& op) noexcept;

  Gate& inner_;
  KernelRegistry kernels_;  // the profile's own: names and argument layouts, as DaemonGate keeps them
  Profiler profiler_;       // after kernels_, which it reads

  ContextDevices devices_;
};

}  // namespace gpuqos::intercept
