// fifo: grants low-priority ops in arrival order across clients, optionally keeping at most
// max_outstanding_ops of them granted and not yet completed. High-priority ops are accounted in
// the backlog and never held. No priorities beyond that: the comparison baseline.
//
// Credits: when nothing is queued, a client whose ops were all granted is granted `credit_ops`
// seqs beyond its last posted op (fewer if the outstanding limit leaves less room), so the shim
// issues that many more without a round trip; the grant is renewed when half is spent. Credited
// ops count as outstanding the moment they are posted, so the limit still holds for everything the
// daemon let go; it is exceeded only by credit handed out before other clients queued work.
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <set>
#include <utility>

#include "gpuqos/scheduler/policy.h"

namespace gpuqos::scheduler {

class FifoPolicy final : public Policy {
 public:
  explicit FifoPolicy(std::uint32_t max_outstanding_ops = 0, std::uint32_t credit_ops = 0)
      : max_outstanding_ops_(max_outstanding_ops), credit_ops_(credit_ops) {}

  // A granted op in flight this long gives its slot back (kStuckOpNs, baymax's least stuck age).
  static constexpr std::int64_t kStuckOpNs = 2'000'000'000;

  std::string_view name() const override { return "fifo"; }
  Decisions op_posted(const OpPosted& event) override;
  Decisions op_completed(const OpCompleted& event) override;
  Decisions client_gone(ClientId client, std::int64_t now_ns) override;
  Decisions tick(std::int64_t now_ns) override;
  const EngineBacklog& backlog() const override { return backlog_; }
  // Takes max_outstanding_ops and credit_ops (the next tick grants what a higher limit allows).
  // Ops granted while there was no limit hold no slot under a new one. False for another name.
  bool reconfigure(const PolicyOptions& options) override;

  std::size_t queued_ops() const { return queue_.size(); }
  std::size_t outstanding_ops() const { return in_flight_.size(); }
  std::uint32_t max_outstanding_ops() const { return max_outstanding_ops_; }
  std::uint32_t credit_ops() const { return credit_ops_; }

 private:
  struct Queued {
    ClientId client;
    ipc::OpDescriptor op;
  };
  struct ClientSeqs {
    std::uint64_t posted = 0;   // last seq posted
    std::uint64_t granted = 0;  // last seq granted (beyond posted: credit)
  };
  // Grants from the head of the queue while the outstanding limit allows, one decision per op.
  Decisions grant_ready(std::int64_t now_ns);
  // Accounts a granted op: backlog, and an outstanding slot if it runs on an engine.
  void admit(ClientId client, const ipc::OpDescriptor& op, std::int64_t now_ns);
  // With nothing queued: renews `client`'s credit when less than half is left.
  void extend_credit(ClientId client, Decisions& decisions);

  std::uint32_t max_outstanding_ops_;
  std::uint32_t credit_ops_;
  std::map<ClientId, ClientSeqs> seqs_;
  std::deque<Queued> queue_;                             // posted low-priority ops, arrival order
  // Granted low ops on an engine, with when they were granted. One whose completion never comes
  // (a lost report, a client that sends none) would hold its slot, and every other client, for ever;
  // one waiting on the device for its own host (a stream wait on a flag, a host function) that an
  // op of its program held behind the limit would set, until it is retired. Retired after
  // kStuckOpNs: the program stalls 2 s (it was 10, baymax's stale age, until a review). A long
  // op still running then lets one more op go beside it: the limit is a throttle.
  std::map<std::pair<ClientId, std::uint64_t>, std::int64_t> in_flight_;
  EngineBacklog backlog_;
};

}  // namespace gpuqos::scheduler
