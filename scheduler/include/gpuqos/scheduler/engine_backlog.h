// Engine backlog bookkeeping: per device and engine, the work accounted (granted, or posted by a
// high-priority client) and not yet completed, with its predicted duration.
//
// Pure bookkeeping, no clock of its own. The predicted durations are a placeholder
// (placeholder_duration_ns) until the predictor replaces them.
#pragma once

#include <array>
#include <cstdint>
#include <map>
#include <optional>
#include <unordered_map>
#include <vector>

#include "gpuqos/ipc/descriptor.h"

namespace gpuqos::scheduler {

// compute: kernels and graphs; h2d and d2h: copies between host and device; local: memsets and
// copies within device memory, which a GPU's copy engines (and simgpu) run beside the kernels.
enum class Engine : std::uint8_t { compute = 0, h2d, d2h, local };
inline constexpr std::size_t kEngineCount = 4;
const char* engine_name(Engine engine);

// The engine an op occupies; none for sync and query marks (they occupy nothing).
std::optional<Engine> engine_of(const ipc::OpDescriptor& op);

// Placeholder prediction: kernels 100 us, graphs 1 ms, copies and memsets at 10 GB/s + 5 us.
std::int64_t placeholder_duration_ns(const ipc::OpDescriptor& op);

struct EngineLoad {
  std::uint32_t device = 0;
  Engine engine = Engine::compute;
  std::uint64_t outstanding_ops = 0;
  std::int64_t backlog_ns = 0;            // predicted time of the outstanding ops
  std::uint64_t completed_ops = 0;
  std::int64_t completed_device_ns = 0;   // measured (end - start) of the completed ops (saturates)
  std::uint64_t lost_ops = 0;             // retired unmeasured by expire()
};

class EngineBacklog {
 public:
  // A client's entries beyond this are retired oldest first (a shim that never reports
  // completions must not grow the daemon without bound).
  static constexpr std::size_t kMaxTrackedOpsPerClient = 1 << 16;

  // Accounts op (seq of client) on its engine at now_ns; ops without an engine are ignored.
  void account(std::uint32_t client, const ipc::OpDescriptor& op, std::int64_t predicted_ns, std::int64_t now_ns);

  // Retires a completed op. False when it was not accounted (never, already, or without engine).
  bool complete(std::uint32_t client, const ipc::CompletionDescriptor& completion);

  // Retires everything of the client without measuring it.
  void drop_client(std::uint32_t client);

  // An op accounted kLostAfterNs ago or more whose completion never came (the shim drops one it has
  // no ring space for) is retired unmeasured, counted lost, by the policies' ticks: the status and
  // the metrics went on showing it outstanding, and its predicted time as backlog, until its client
  // left (the policies themselves had long let it go). BaymaxPolicy::kStaleOpNs.
  static constexpr std::int64_t kLostAfterNs = 10'000'000'000;
  void expire(std::int64_t now_ns);

  // Every (device, engine) that has seen work, ordered by device then engine.
  std::vector<EngineLoad> loads() const;
  EngineLoad load(std::uint32_t device, Engine engine) const;

 private:
  struct Entry {
    std::uint32_t device;
    Engine engine;
    std::int64_t predicted_ns;
    std::int64_t accounted_ns;
  };
  void retire(const Entry& entry);
  EngineLoad& slot(std::uint32_t device, Engine engine);

  std::map<std::uint32_t, std::array<EngineLoad, kEngineCount>> devices_;
  std::unordered_map<std::uint32_t, std::map<std::uint64_t, Entry>> outstanding_;  // client -> seq -> entry
};

}  // namespace gpuqos::scheduler
