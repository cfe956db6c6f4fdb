// Engine backlog bookkeeping and the placeholder duration prediction.
#include "gpuqos/scheduler/engine_backlog.h"

#include <algorithm>
#include <limits>

namespace gpuqos::scheduler {

const char* engine_name(Engine engine) {
  switch (engine) {
    case Engine::compute: return "compute";
    case Engine::h2d: return "h2d";
    case Engine::d2h: return "d2h";
    case Engine::local: return "local";
  }
  return "?";
}

std::optional<Engine> engine_of(const ipc::OpDescriptor& op) {
  switch (op.kind) {
    case ipc::OpKind::kernel:
    case ipc::OpKind::graph: return Engine::compute;
    case ipc::OpKind::memset: return Engine::local;
    case ipc::OpKind::copy:
      if (op.direction == ipc::CopyDirection::h2d) return Engine::h2d;
      if (op.direction == ipc::CopyDirection::d2h) return Engine::d2h;
      return Engine::local;  // d2d
    default: return std::nullopt;
  }
}

std::int64_t placeholder_duration_ns(const ipc::OpDescriptor& op) {
  constexpr std::int64_t kBytesPerUs = 10'000;  // 10 GB/s
  switch (op.kind) {
    case ipc::OpKind::kernel: return 100'000;
    case ipc::OpKind::graph: return 1'000'000;
    case ipc::OpKind::copy:
    case ipc::OpKind::memset:  // at most the horizon of an op in flight: the backlog sums these
      return std::min<std::int64_t>(5'000 + static_cast<std::int64_t>(op.bytes / kBytesPerUs) * 1'000,
                                    EngineBacklog::kLostAfterNs);
    default: return 0;
  }
}

EngineLoad& EngineBacklog::slot(std::uint32_t device, Engine engine) {
  auto [it, added] = devices_.try_emplace(device);
  if (added) {
    for (std::size_t e = 0; e < kEngineCount; ++e) it->second[e] = EngineLoad{device, static_cast<Engine>(e)};
  }
  return it->second[static_cast<std::size_t>(engine)];
}

void EngineBacklog::account(std::uint32_t client, const ipc::OpDescriptor& op, std::int64_t predicted_ns,
                            std::int64_t now_ns) {
  const auto engine = engine_of(op);
  if (!engine) return;
  auto& entries = outstanding_[client];
  if (!entries.try_emplace(op.seq, Entry{op.device, *engine, predicted_ns, now_ns}).second) return;
  EngineLoad& load = slot(op.device, *engine);
  ++load.outstanding_ops;
  load.backlog_ns += predicted_ns;
  if (entries.size() > kMaxTrackedOpsPerClient) {
    retire(entries.begin()->second);
    entries.erase(entries.begin());
  }
}

void EngineBacklog::retire(const Entry& entry) {
  EngineLoad& load = slot(entry.device, entry.engine);
  --load.outstanding_ops;
  load.backlog_ns -= entry.predicted_ns;
}

bool EngineBacklog::complete(std::uint32_t client, const ipc::CompletionDescriptor& completion) {
  auto entries = outstanding_.find(client);
  if (entries == outstanding_.end()) return false;
  auto entry = entries->second.find(completion.seq);
  if (entry == entries->second.end()) return false;
  retire(entry->second);
  EngineLoad& load = slot(entry->second.device, entry->second.engine);
  ++load.completed_ops;
  // A client's word: a span of days from a start of 0 passes validation, and thousands of them
  // overflowed the sum (undefined, then negative in the status).
  const std::int64_t span = std::max<std::int64_t>(0, completion.end_ns - completion.start_ns);
  load.completed_device_ns = span > std::numeric_limits<std::int64_t>::max() - load.completed_device_ns
                                 ? std::numeric_limits<std::int64_t>::max()
                                 : load.completed_device_ns + span;
  entries->second.erase(entry);
  if (entries->second.empty()) outstanding_.erase(entries);
  return true;
}

void EngineBacklog::expire(std::int64_t now_ns) {
  for (auto client = outstanding_.begin(); client != outstanding_.end();) {
    auto& entries = client->second;  // in seq order, and so in the order accounted
    while (!entries.empty() && now_ns - entries.begin()->second.accounted_ns >= kLostAfterNs) {
      retire(entries.begin()->second);
      ++slot(entries.begin()->second.device, entries.begin()->second.engine).lost_ops;
      entries.erase(entries.begin());
    }
    client = entries.empty() ? outstanding_.erase(client) : std::next(client);
  }
}

void EngineBacklog::drop_client(std::uint32_t client) {
  auto entries = outstanding_.find(client);
  if (entries == outstanding_.end()) return;
  for (const auto& [seq, entry] : entries->second) retire(entry);
  outstanding_.erase(entries);
}

std::vector<EngineLoad> EngineBacklog::loads() const {
  std::vector<EngineLoad> all;
  for (const auto& [device, engines] : devices_) all.insert(all.end(), engines.begin(), engines.end());
  return all;
}

EngineLoad EngineBacklog::load(std::uint32_t device, Engine engine) const {
  auto it = devices_.find(device);
  if (it == devices_.end()) return EngineLoad{device, engine};
  return it->second[static_cast<std::size_t>(engine)];
}

}  // namespace gpuqos::scheduler
