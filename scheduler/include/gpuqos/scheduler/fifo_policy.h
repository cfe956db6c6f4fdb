// fifo: grants low-priority ops in arrival order across clients, optionally keeping at most
// max_outstanding_ops of them granted and not yet completed. High-priority ops are accounted in
// the backlog and never held. No priorities beyond that: the comparison baseline.
#pragma once

#include <cstdint>
#include <deque>
#include <set>
#include <utility>

#include "gpuqos/scheduler/policy.h"

namespace gpuqos::scheduler {

class FifoPolicy final : public Policy {
 public:
  explicit FifoPolicy(std::uint32_t max_outstanding_ops = 0) : max_outstanding_ops_(max_outstanding_ops) {}

  std::string_view name() const override { return "fifo"; }
  Decisions op_posted(const OpPosted& event) override;
  Decisions op_completed(const OpCompleted& event) override;
  Decisions client_gone(ClientId client, std::int64_t now_ns) override;
  Decisions tick(std::int64_t now_ns) override;
  const EngineBacklog& backlog() const override { return backlog_; }

  std::size_t queued_ops() const { return queue_.size(); }
  std::size_t outstanding_ops() const { return in_flight_.size(); }

 private:
  struct Queued {
    ClientId client;
    ipc::OpDescriptor op;
  };
  // Grants from the head of the queue while the outstanding limit allows, one decision per op.
  Decisions grant_ready();

  std::uint32_t max_outstanding_ops_;
  std::deque<Queued> queue_;                             // posted low-priority ops, arrival order
  std::set<std::pair<ClientId, std::uint64_t>> in_flight_;  // granted low ops on an engine
  EngineBacklog backlog_;
};

}  // namespace gpuqos::scheduler
