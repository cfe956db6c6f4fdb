// priority: low-priority work only while no high-priority work is on the device.
#include "gpuqos/scheduler/priority_policy.h"

#include <algorithm>

namespace gpuqos::scheduler {

Decisions PriorityPolicy::op_posted(const OpPosted& event) {
  if (event.priority == ipc::Priority::high) {
    backlog_.account(event.client, event.op, placeholder_duration_ns(event.op));
    if (engine_of(event.op)) high_in_flight_.emplace(std::pair{event.client, event.op.seq}, event.now_ns);
    return {};
  }
  push_coalescing_marks(queue_, Queued{event.client, event.op});
  return grant_ready();
}

Decisions PriorityPolicy::op_completed(const OpCompleted& event) {
  backlog_.complete(event.client, event.completion);
  high_in_flight_.erase({event.client, event.completion.seq});
  return grant_ready();
}

Decisions PriorityPolicy::client_gone(ClientId client, std::int64_t /*now_ns*/) {
  std::erase_if(queue_, [client](const Queued& queued) { return queued.client == client; });
  std::erase_if(high_in_flight_, [client](const auto& entry) { return entry.first.first == client; });
  backlog_.drop_client(client);
  return grant_ready();
}

Decisions PriorityPolicy::tick(std::int64_t now_ns) {
  std::erase_if(high_in_flight_, [now_ns](const auto& entry) { return now_ns - entry.second > kStaleHighNs; });
  return grant_ready();
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
