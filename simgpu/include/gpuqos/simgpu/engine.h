// The simulated GPU's engine model: contexts, streams, compute and copy engines, in a caller-driven clock.
//
// The model has no clock or thread of its own: the caller moves time forward with advance_to()
// and submits work "now". simgpud drives it with the wall clock; unit tests drive it with a
// virtual clock and check completion times to the nanosecond.
//
// Contract: all ids (contexts, streams, ops) are chosen by the caller and must be unique among
// live objects; the engine checks and rejects duplicates and unknown ids with a status, never
// by crashing. Single-threaded: the caller serialises every call.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "gpuqos/simgpu/profile.h"

namespace gpuqos::simgpu {

using Nanos = std::int64_t;
using OpId = std::uint64_t;
using StreamId = std::uint64_t;
using ContextId = std::uint64_t;

enum class StreamKind : std::uint8_t {
  legacy_default,  // the context's NULL stream: waits for, and is waited on by, every blocking stream
  blocking,        // an ordinary stream (and the per-thread default stream)
  non_blocking,    // CU_STREAM_NON_BLOCKING: no implicit ordering with the legacy stream
};

// Which engine a transfer runs on; local = device-to-device copies and memsets.
enum class CopyEngine : std::uint8_t { h2d, d2h, local };

enum class OpKind : std::uint8_t { kernel, copy, memset, event_record, wait, host_func, graph };

struct OpSpec {
  OpKind kind = OpKind::kernel;
  Nanos kernel_ns = 0;           // kernel: time alone on an idle device, before time_scale
  std::uint64_t blocks = 1;      // kernel: total thread blocks; it occupies min(blocks, sms) SMs
  CopyEngine engine = CopyEngine::h2d;  // copy, memset
  std::uint64_t bytes = 0;       // copy, memset
  bool pageable = false;         // copy: host side is pageable memory
  std::vector<OpId> wait_for;    // wait: ops that must complete first; unknown ids count as done
  std::vector<OpSpec> graph_nodes;  // graph: kernels, copies and memsets run in order as one unit
};

struct Completion {
  OpId op = 0;
  Nanos start_ns = 0;  // when it first ran
  Nanos end_ns = 0;
};

// Output of advance_to() and of calls that may finish work at once.
struct EngineEvents {
  std::vector<Completion> completions;
  std::vector<OpId> host_funcs_ready;  // host functions whose turn has come; answer host_func_done()
  void clear() {
    completions.clear();
    host_funcs_ready.clear();
  }
};

struct DeviceStats {
  Nanos compute_busy_ns = 0;  // time with at least one kernel running
  Nanos h2d_busy_ns = 0;
  Nanos d2h_busy_ns = 0;
  Nanos local_busy_ns = 0;
  std::uint64_t kernels_completed = 0;
  std::uint64_t copies_completed = 0;  // copies and memsets
  std::uint64_t context_switches = 0;  // timeslice mode
};

enum class EngineStatus : std::uint8_t {
  ok,
  bad_device,
  unknown_context,
  unknown_stream,
  unknown_op,
  duplicate_id,
  bad_op,  // a spec that cannot run (e.g. a graph node that is not a kernel, copy or memset)
};
const char* to_string(EngineStatus status);

class Engine {
 public:
  explicit Engine(std::vector<DeviceProfile> devices);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  Nanos now() const { return now_; }
  int device_count() const;
  const DeviceProfile& profile(int device) const;

  // Runs everything due up to and including `t` (>= now()) and leaves the clock at `t`.
  void advance_to(Nanos t, EngineEvents& out);
  // When the next completion or quantum expiry happens without new input; nullopt if idle.
  std::optional<Nanos> next_event_ns() const;

  EngineStatus create_context(ContextId ctx, int device);
  // Drops the context's streams and all their pending or running work at now().
  EngineStatus destroy_context(ContextId ctx, EngineEvents& out);
  EngineStatus create_stream(StreamId stream, ContextId ctx, StreamKind kind);
  // Work already submitted still runs; the id is released once the stream drains.
  EngineStatus destroy_stream(StreamId stream, EngineEvents& out);
  // Appends work to a stream at now(); it may start (or, if it takes no time, finish) at once.
  EngineStatus submit(StreamId stream, OpId op, OpSpec spec, EngineEvents& out);
  // The host function `op` has returned: its stream moves on at now().
  EngineStatus host_func_done(OpId op, EngineEvents& out);

  bool is_complete(OpId op) const;
  DeviceStats stats(int device) const;

 private:
  struct Node;
  struct Stream;
  struct Context;
  struct Work;
  struct Device;

  void run_until(Nanos t, EngineEvents& out);
  void progress(Nanos t);
  void dispatch(EngineEvents& out);
  bool start_head(Stream& stream, EngineEvents& out);
  void schedule(Device& device);
  void schedule_compute(Device& device);
  void finish_work(Device& device, std::vector<Work>& works, bool is_kernel, EngineEvents& out);
  void complete_head(Stream& stream, Nanos start_ns, EngineEvents& out);
  void drop_stream_work(Stream& stream);
  Nanos kernel_work_ns(const Device& device, const OpSpec& spec) const;
  double copy_work_ns(const Device& device, const OpSpec& spec) const;

  Nanos now_ = 0;
  OpId next_internal_id_ = 0;
  std::vector<std::unique_ptr<Device>> devices_;
  // Ordered maps: streams are visited in id order, so simultaneous events resolve deterministically.
  std::map<ContextId, std::unique_ptr<Context>> contexts_;
  std::map<StreamId, std::unique_ptr<Stream>> streams_;
  std::unordered_set<OpId> incomplete_;  // submitted, not yet complete (what waits look up)
  std::unordered_map<OpId, StreamId> host_funcs_running_;
};

}  // namespace gpuqos::simgpu
