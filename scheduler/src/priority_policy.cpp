// priority: low-priority work only while no high-priority work is on the device.
#include "gpuqos/scheduler/priority_policy.h"

#include <algorithm>

namespace gpuqos::scheduler {

Decisions PriorityPolicy::op_posted(const OpPosted& event) {
  if (event.priority == ipc::Priority::high) {
    backlog_.account(event.client, event.op, placeholder_duration_ns(event.op));
    if (!engine_of(event.op)) return {};
    auto& ops = high_in_flight_[event.client];
    ops.emplace(event.op.seq, event.now_ns);
    if (ops.size() > EngineBacklog::kMaxTrackedOpsPerClient) ops.erase(ops.begin());
    return {};
  }
  push_coalescing_marks(queue_, Queued{event.client, event.op});
  return grant_ready();
}

Decisions PriorityPolicy::op_completed(const OpCompleted& event) {
  backlog_.complete(event.client, event.completion);
  if (auto ops = high_in_flight_.find(event.client); ops != high_in_flight_.end()) {
    ops->second.erase(event.completion.seq);
    if (ops->second.empty()) high_in_flight_.erase(ops);
  }
  return grant_ready();
}

Decisions PriorityPolicy::client_gone(ClientId client, std::int64_t /*now_ns*/) {
  std::erase_if(queue_, [client](const Queued& queued) { return queued.client == client; });
  high_in_flight_.erase(client);
  backlog_.drop_client(client);
  return grant_ready();
}

Decisions PriorityPolicy::tick(std::int64_t now_ns) {
  for (auto client = high_in_flight_.begin(); client != high_in_flight_.end();) {
    auto& ops = client->second;  // in seq order, and so in the order posted: only the stale are walked
    while (!ops.empty() && now_ns - ops.begin()->second > kStaleHighNs) ops.erase(ops.begin());
    client = ops.empty() ? high_in_flight_.erase(client) : std::next(client);
  }
  return grant_ready();
}

std::size_t PriorityPolicy::high_priority_in_flight() const {
  std::size_t count = 0;
  for (const auto& [client, ops] : high_in_flight_) count += ops.size();
  return count;
}

Decisions PriorityPolicy::grant_ready() {
  Decisions decisions;
  while (!queue_.empty() && high_in_flight_.empty()) {
    const Queued next = queue_.front();
    queue_.pop_front();
    backlog_.account(next.client, next.op, placeholder_duration_ns(next.op));
    decisions.push_back(Grant{next.client, next.op.seq});
  }
  return decisions;
}

}  // namespace gpuqos::scheduler
