// priority: the naive answer to co-location. High-priority ops are accounted and never held;
// low-priority ops are granted in arrival order, but only while no high-priority work is on their
// device (posted and not yet completed); a client's ops go in its order, so one held holds its later ones. No prediction, no credit: best-effort work already granted
// keeps running when a query arrives, which is the problem the baymax policy solves.
//
// A high-priority op whose completion never arrives (a shim that lost its completion thread) stops
// blocking best-effort work after kStaleHighNs, so a lost report cannot starve everyone else.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <utility>

#include "gpuqos/scheduler/policy.h"

namespace gpuqos::scheduler {

class PriorityPolicy final : public Policy {
 public:
  static constexpr std::int64_t kStaleHighNs = 1'000'000'000;

  std::string_view name() const override { return "priority"; }
  Decisions op_posted(const OpPosted& event) override;
  Decisions op_completed(const OpCompleted& event) override;
  Decisions client_gone(ClientId client, std::int64_t now_ns) override;
  Decisions tick(std::int64_t now_ns) override;
  const EngineBacklog& backlog() const override { return backlog_; }
  // Same name: true (max_outstanding_ops and credit_ops mean nothing to it). False for another name.
  bool reconfigure(const PolicyOptions& options) override { return options.name == name(); }

  std::size_t queued_ops() const { return queue_.size(); }
  std::size_t high_priority_in_flight() const;

 private:
  struct Queued {
    ClientId client;
    ipc::OpDescriptor op;
  };
  Decisions grant_ready(std::int64_t now_ns);

  std::deque<Queued> queue_;  // low-priority ops, arrival order
  // By client, seq -> posted at (daemon clock); no empty inner map. Beyond
  // EngineBacklog::kMaxTrackedOpsPerClient of a client, its oldest is dropped as stale: nothing of it
  // is held, so one that never reports completions would grow the daemon by all it posts in
  // kStaleHighNs, and every tick walked them.
  struct HighOp {
    std::int64_t posted_ns = 0;  // daemon clock
    std::uint32_t device = 0;
  };
  std::map<ClientId, std::map<std::uint64_t, HighOp>> high_in_flight_;
  // The same counted by device: best-effort work waits only for its own device's (it waited for any
  // device's: an inference job on one GPU held back training on every other).
  std::map<std::uint32_t, std::size_t> high_on_device_;
  void forget_high(std::map<std::uint64_t, HighOp>::iterator op, std::map<std::uint64_t, HighOp>& ops);
  EngineBacklog backlog_;
};

}  // namespace gpuqos::scheduler
