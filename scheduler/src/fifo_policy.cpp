// fifo: arrival order across clients, an optional cap on outstanding low-priority ops.
#include "gpuqos/scheduler/fifo_policy.h"
#include "gpuqos/scheduler/baymax_policy.h"
#include "gpuqos/scheduler/priority_policy.h"

#include <algorithm>

namespace gpuqos::scheduler {

Decisions FifoPolicy::op_posted(const OpPosted& event) {
  if (event.priority == ipc::Priority::high) {
    backlog_.account(event.client, event.op, placeholder_duration_ns(event.op), event.now_ns);
    return {};
  }
  ClientSeqs& seqs = seqs_[event.client];
  seqs.posted = event.op.seq;
  if (event.op.seq <= seqs.granted) {  // spent credit: it is already on its way to the device
    admit(event.client, event.op, event.now_ns);
    Decisions decisions;
    if (queue_.empty()) extend_credit(event.client, decisions);
    return decisions;
  }
  push_coalescing_marks(queue_, Queued{event.client, event.op});
  Decisions decisions = grant_ready(event.now_ns);
  if (queue_.empty()) extend_credit(event.client, decisions);
  return decisions;
}

Decisions FifoPolicy::op_completed(const OpCompleted& event) {
  backlog_.complete(event.client, event.completion);
  in_flight_.erase({event.client, event.completion.seq});
  Decisions decisions = grant_ready(event.now_ns);
  if (queue_.empty() && seqs_.contains(event.client)) extend_credit(event.client, decisions);
  return decisions;
}

Decisions FifoPolicy::client_gone(ClientId client, std::int64_t now_ns) {
  std::erase_if(queue_, [client](const Queued& queued) { return queued.client == client; });
  std::erase_if(in_flight_, [client](const auto& op) { return op.first.first == client; });
  seqs_.erase(client);
  backlog_.drop_client(client);
  return grant_ready(now_ns);
}

Decisions FifoPolicy::tick(std::int64_t now_ns) {
  std::erase_if(in_flight_, [now_ns](const auto& op) { return now_ns - op.second > kStuckOpNs; });
  backlog_.expire(now_ns);
  return grant_ready(now_ns);
}

bool FifoPolicy::reconfigure(const PolicyOptions& options) {
  if (options.name != name()) return false;
  max_outstanding_ops_ = options.max_outstanding_ops;
  credit_ops_ = options.credit_ops;
  return true;
}

void FifoPolicy::admit(ClientId client, const ipc::OpDescriptor& op, std::int64_t now_ns) {
  backlog_.account(client, op, placeholder_duration_ns(op), now_ns);
  // Only work that occupies an engine holds a slot: sync and query marks have no completion.
  if (max_outstanding_ops_ != 0 && engine_of(op)) in_flight_.emplace(std::pair{client, op.seq}, now_ns);
}

void FifoPolicy::extend_credit(ClientId client, Decisions& decisions) {
  if (credit_ops_ == 0) return;
  ClientSeqs& seqs = seqs_[client];
  if (seqs.granted < seqs.posted) return;  // something of it still waits
  std::uint64_t credit = credit_ops_;
  if (max_outstanding_ops_ != 0) {  // what the limit leaves beside running ops and others' credit
    std::uint64_t taken = in_flight_.size();
    for (const auto& [other, s] : seqs_) taken += other != client && s.granted > s.posted ? s.granted - s.posted : 0;
    credit = taken >= max_outstanding_ops_ ? 0 : std::min<std::uint64_t>(credit, max_outstanding_ops_ - taken);
  }
  const std::uint64_t left = seqs.granted - seqs.posted;
  if (credit <= left || left * 2 >= credit) return;  // no more room, or more than half still left
  seqs.granted = seqs.posted + credit;
  decisions.push_back(Grant{client, seqs.granted});
}

Decisions FifoPolicy::grant_ready(std::int64_t now_ns) {
  Decisions decisions;
  while (!queue_.empty()) {
    const Queued next = queue_.front();
    // Only work that occupies an engine needs (and holds) a slot: sync and query marks have no
    // completion, so they pass as soon as everything before them did.
    const bool takes_slot = engine_of(next.op).has_value();
    if (takes_slot && max_outstanding_ops_ != 0 && in_flight_.size() >= max_outstanding_ops_) break;
    queue_.pop_front();
    admit(next.client, next.op, now_ns);
    ClientSeqs& seqs = seqs_[next.client];
    seqs.granted = std::max(seqs.granted, next.op.seq);
    decisions.push_back(Grant{next.client, next.op.seq});
  }
  return decisions;
}

std::unique_ptr<Policy> make_policy(const PolicyOptions& options) {
  if (options.name == "fifo") return std::make_unique<FifoPolicy>(options.max_outstanding_ops, options.credit_ops);
  if (options.name == "priority") return std::make_unique<PriorityPolicy>();
  if (options.name == "baymax") return std::make_unique<BaymaxPolicy>(options);
  return nullptr;
}

}  // namespace gpuqos::scheduler
