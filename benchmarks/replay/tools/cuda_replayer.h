// Replays a Workload on the current CUDA device through the driver API: one stream per trace
// stream, the generated PTX module for kernels, real buffers for copies and memsets.
#pragma once

#include <cuda.h>

#include <chrono>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "gpuqos/replay/workload.h"

namespace gpuqos::replay {

class CudaReplayer {
 public:
  using Clock = std::chrono::steady_clock;

  // Initialises the driver, makes device `device`'s primary context current, loads `ptx`,
  // creates streams and events and allocates the largest buffer each kind of copy needs.
  // lead: with keep_gaps, how much earlier than its recorded start each op is submitted, to
  // cover the time work takes to reach the device (zero: never before the recorded start).
  // pace_scale: recorded offsets are stretched by it; set it to the device's time_scale when the
  // device (simgpu) runs in slow motion, so host and device keep the recorded proportions.
  // thread_per_stream: submit each trace stream's ops from a thread of its own (see submit()).
  CudaReplayer(const Workload& workload, const std::string& ptx, int device, bool keep_gaps,
               std::chrono::nanoseconds lead = std::chrono::nanoseconds(0), double pace_scale = 1.0,
               bool thread_per_stream = false);
  ~CudaReplayer();
  CudaReplayer(const CudaReplayer&) = delete;
  CudaReplayer& operator=(const CudaReplayer&) = delete;

  // Records the event that marks the start of one replay. With wait_for_device it also waits
  // until the device has passed it, so that device time and the host's pacing clock start
  // together even when the device is slow to see new work. Returns the host time to pace from.
  Clock::time_point start(bool wait_for_device);
  // Submits every op once. With keep_gaps, op i is submitted no earlier than
  // origin + submit_offset_ns(i) (its recorded launch, else its start), so the recorded idle
  // gaps are reproduced; without, back to back.
  // With thread_per_stream, each stream's ops go from a thread of their own, paced the same way:
  // a call that blocks (a launch held by gpuqosd) then stops only its own stream's thread, as if
  // the program's launches returned at once and waited per stream on the host (Baymax's
  // deferral). Whatever waits on the other side of that call (gpuqosd grants a client's ops in
  // order) still does.
  // Ends by recording an end event on every stream.
  void submit(Clock::time_point origin);
  // Waits until everything submitted has finished; returns the device time in ms from the
  // event recorded before the first op to the latest one recorded after the last.
  double wait();

  std::string device_name() const;
  std::uint64_t skipped_ops() const { return skipped_ops_; }

 private:
  void allocate_buffers();
  // Submits `ops` (indices into the workload, in order) as submit() does.
  void submit_ops(Clock::time_point origin, const std::vector<std::size_t>& ops);
  void submit_op(const Operation& op);
  void submit_copy(const Operation& op, CUstream stream);

  const Workload& workload_;
  bool keep_gaps_;
  std::chrono::nanoseconds lead_;
  double pace_scale_;
  // Op indices in order, by the thread that submits them: one group of all (or, with
  // thread_per_stream, one per trace stream).
  std::vector<std::vector<std::size_t>> op_groups_;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUmodule module_ = nullptr;
  std::vector<CUfunction> functions_;  // by kernel index
  std::map<std::int64_t, CUstream> streams_;  // by trace stream id
  CUevent start_event_ = nullptr;
  std::map<std::int64_t, CUevent> end_events_;
  CUdeviceptr device_a_ = 0;  // destination of everything
  CUdeviceptr device_b_ = 0;  // source of device-to-device copies
  void* pinned_host_ = nullptr;
  std::vector<unsigned char> pageable_host_;
  std::uint64_t skipped_ops_ = 0;  // zero-byte copies and memsets
};

}  // namespace gpuqos::replay
