// fifo: arrival order across clients, an optional cap on outstanding low-priority ops.
#include "gpuqos/scheduler/fifo_policy.h"

#include <algorithm>

namespace gpuqos::scheduler {

Decisions FifoPolicy::op_posted(const OpPosted& event) {
  if (event.priority == ipc::Priority::high) {
    backlog_.account(event.client, event.op, placeholder_duration_ns(event.op));
    return {};
  }
  queue_.push_back(Queued{event.client, event.op});
  return grant_ready();
}

Decisions FifoPolicy::op_completed(const OpCompleted& event) {
  backlog_.complete(event.client, event.completion);
  in_flight_.erase({event.client, event.completion.seq});
  return grant_ready();
}

Decisions FifoPolicy::client_gone(ClientId client, std::int64_t /*now_ns*/) {
  std::erase_if(queue_, [client](const Queued& queued) { return queued.client == client; });
  std::erase_if(in_flight_, [client](const auto& op) { return op.first == client; });
  backlog_.drop_client(client);
  return grant_ready();
}

Decisions FifoPolicy::tick(std::int64_t /*now_ns*/) { return grant_ready(); }

Decisions FifoPolicy::grant_ready() {
  Decisions decisions;
  while (!queue_.empty()) {
    const Queued next = queue_.front();
    // Only work that occupies an engine needs (and holds) a slot: sync and query marks have no
    // completion, so they pass as soon as everything before them did.
    const bool takes_slot = engine_of(next.op).has_value();
    if (takes_slot && max_outstanding_ops_ != 0 && in_flight_.size() >= max_outstanding_ops_) break;
    queue_.pop_front();
    backlog_.account(next.client, next.op, placeholder_duration_ns(next.op));
    if (takes_slot && max_outstanding_ops_ != 0) in_flight_.insert({next.client, next.op.seq});
    decisions.push_back(Grant{next.client, next.op.seq});
  }
  return decisions;
}

std::unique_ptr<Policy> make_policy(const PolicyOptions& options) {
  if (options.name == "fifo") return std::make_unique<FifoPolicy>(options.max_outstanding_ops);
  return nullptr;
}

}  // namespace gpuqos::scheduler
