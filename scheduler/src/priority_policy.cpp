// priority: low-priority work only while no high-priority work is on its device.
#include "gpuqos/scheduler/priority_policy.h"

#include <algorithm>
#include <set>

namespace gpuqos::scheduler {

Decisions PriorityPolicy::op_posted(const OpPosted& event) {
  if (event.priority == ipc::Priority::high) {
    backlog_.account(event.client, event.op, placeholder_duration_ns(event.op), event.now_ns);
    if (!engine_of(event.op)) return {};
    auto& ops = high_in_flight_[event.client];
    if (ops.emplace(event.op.seq, HighOp{event.now_ns, event.op.device}).second) ++high_on_device_[event.op.device];
    if (ops.size() > EngineBacklog::kMaxTrackedOpsPerClient) forget_high(ops.begin(), ops);
    return {};
  }
  push_coalescing_marks(queue_, Queued{event.client, event.op});
  return grant_ready(event.now_ns);
}

Decisions PriorityPolicy::op_completed(const OpCompleted& event) {
  backlog_.complete(event.client, event.completion);
  if (auto ops = high_in_flight_.find(event.client); ops != high_in_flight_.end()) {
    if (const auto op = ops->second.find(event.completion.seq); op != ops->second.end()) forget_high(op, ops->second);
    if (ops->second.empty()) high_in_flight_.erase(ops);
  }
  return grant_ready(event.now_ns);
}

void PriorityPolicy::forget_high(std::map<std::uint64_t, HighOp>::iterator op, std::map<std::uint64_t, HighOp>& ops) {
  if (const auto count = high_on_device_.find(op->second.device); count != high_on_device_.end() && --count->second == 0) {
    high_on_device_.erase(count);
  }
  ops.erase(op);
}

Decisions PriorityPolicy::client_gone(ClientId client, std::int64_t now_ns) {
  std::erase_if(queue_, [client](const Queued& queued) { return queued.client == client; });
  if (auto ops = high_in_flight_.find(client); ops != high_in_flight_.end()) {
    while (!ops->second.empty()) forget_high(ops->second.begin(), ops->second);
    high_in_flight_.erase(ops);
  }
  backlog_.drop_client(client);
  return grant_ready(now_ns);
}

Decisions PriorityPolicy::tick(std::int64_t now_ns) {
  for (auto client = high_in_flight_.begin(); client != high_in_flight_.end();) {
    auto& ops = client->second;  // in seq order, and so in the order posted: only the stale are walked
    while (!ops.empty() && now_ns - ops.begin()->second.posted_ns > kStaleHighNs) forget_high(ops.begin(), ops);
    client = ops.empty() ? high_in_flight_.erase(client) : std::next(client);
  }
  backlog_.expire(now_ns);
  return grant_ready(now_ns);
}

std::size_t PriorityPolicy::high_priority_in_flight() const {
  std::size_t count = 0;
  for (const auto& [client, ops] : high_in_flight_) count += ops.size();
  return count;
}

Decisions PriorityPolicy::grant_ready(std::int64_t now_ns) {
  Decisions decisions;
  if (high_on_device_.empty()) {  // the common case, without a walk
    for (const Queued& next : queue_) {
      backlog_.account(next.client, next.op, placeholder_duration_ns(next.op), now_ns);
      decisions.push_back(Grant{next.client, next.op.seq});
    }
    queue_.clear();
    return decisions;
  }
  std::set<ClientId> held;  // a client's ops are granted in its order
  std::deque<Queued> kept;
  for (Queued& next : queue_) {
    // Marks occupy no device (a mark from a thread without a context says device 0): only a
    // client's own held op before them holds them.
    if (held.contains(next.client) || (engine_of(next.op) && high_on_device_.contains(next.op.device))) {
      held.insert(next.client);
      kept.push_back(std::move(next));
      continue;
    }
    backlog_.account(next.client, next.op, placeholder_duration_ns(next.op), now_ns);
    decisions.push_back(Grant{next.client, next.op.seq});
  }
  queue_ = std::move(kept);
  return decisions;
}

}  // namespace gpuqos::scheduler
