// gpuqosd: the path of each client's ops and completions through validation and the policy, the
// grants that come back, reclaiming a client that is gone, and the drain at shutdown.
#include <malloc.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <spdlog/spdlog.h>

#include <algorithm>
#include <map>

#include "gpuqos/ipc/clock.h"
#include "gpuqos/ipc/validate.h"
#include "gpuqos/scheduler/daemon.h"
#include "gpuqos/scheduler/daemon_config.h"

namespace gpuqos::scheduler {

// Ops of all clients go to the policy in the order the waiters popped them, then completions.
void Daemon::drain_all(std::int64_t now_ns) {
  std::vector<std::pair<ClientId, ArrivedOp>> arrivals;
  const std::vector<ClientId> ops_order = clients_in_turn(next_ops_client_);
  for (const ClientId id : ops_order) {
    const std::size_t room = std::min(kOpsPerPass, kOpsPerPassInAll - arrivals.size());
    for (const ArrivedOp& arrived : clients_.at(id)->take_ops(now_ns, room)) arrivals.emplace_back(id, arrived);
    if (arrivals.size() >= kOpsPerPassInAll) {
      next_ops_client_ = id + 1;
      // The clients not visited may hold ops an OpsWaiter popped: the next pass runs at once for
      // them, not at the next tick (a doorbell's ring with ops keeps the loop from sleeping anyway).
      const std::uint64_t one = 1;
      [[maybe_unused]] const ssize_t written = ::write(wake_.get(), &one, sizeof one);
      break;
    }
  }
  std::stable_sort(arrivals.begin(), arrivals.end(),
                   [](const auto& a, const auto& b) { return a.second.arrived_ns < b.second.arrived_ns; });
  std::map<ClientId, std::string> broken;
  for (auto& [id, client] : clients_) {
    if (client->segment().faulted()) broken.emplace(id, "segment truncated under the daemon (SIGBUS caught)");
  }
  for (const auto& [id, arrived] : arrivals) {
    if (broken.contains(id)) continue;
    if (std::string why = accept_op(*clients_.at(id), arrived); !why.empty()) broken.emplace(id, std::move(why));
  }
  // Completions in turns: from where the last pass that ran out of time stopped.
  const std::int64_t started_ns = ipc::monotonic_ns();
  for (const ClientId id : clients_in_turn(next_completions_client_)) {
    if (broken.contains(id)) continue;
    Client& client = *clients_.at(id);
    std::string why = client.ops_corrupted() ? "ops ring corrupted (impossible indices)" : "";
    if (why.empty()) why = drain_completions(client, now_ns);
    if (!why.empty()) broken.emplace(id, std::move(why));
    if (ipc::monotonic_ns() - started_ns > kCompletionPassBudgetNs) {
      next_completions_client_ = id + 1;
      break;
    }
  }
  for (const auto& [id, why] : broken) drop_client(id, why, true);
}

// Every client, from the first numbered `from` or above, then from the first.
std::vector<ClientId> Daemon::clients_in_turn(ClientId from) const {
  const auto first = clients_.lower_bound(from);
  std::vector<ClientId> order;
  order.reserve(clients_.size());
  for (auto it = first; it != clients_.end(); ++it) order.push_back(it->first);
  for (auto it = clients_.begin(); it != first; ++it) order.push_back(it->first);
  return order;
}

// The one place a client's ops are validated before anything looks at them.
std::string Daemon::accept_op(Client& client, const ArrivedOp& arrived) {
  ipc::OpDescriptor op = arrived.op;
  if (ipc::Status valid = ipc::validate_op(op, client.last_seq(), ipc::kMaxDevices); !valid) {
    return "invalid op descriptor after seq " + std::to_string(client.last_seq()) + ": " + valid.error();
  }
  if (std::string why = renumber_device(client, op); !why.empty()) return why;
  if (op.kind == ipc::OpKind::kernel && !client.kernel_names().contains(op.kernel_id)) {
    // Its name was sent before the op, so it is already queued on the socket.
    if (std::string why = read_client_socket(client, op.kernel_id); !why.empty()) return why;
    if (!client.kernel_names().contains(op.kernel_id)) {
      // Said once a while per user: a client posting a new unnamed kernel each time wrote 65,536 lines
      // (6.9 MB) in a second in a review.
      if (may_warn_of_peer(ipc::monotonic_ns(), client.identity().peer.uid)) {
        spdlog::warn("{}: op {} uses kernel {} whose name was never sent", client.tag(), op.seq, op.kernel_id);
      }
      if (std::string why = add_kernel_name(client, op.kernel_id, "kernel-" + std::to_string(op.kernel_id));
          !why.empty()) {
        return why;
      }
    }
  }
  client.posted(op, arrived.arrived_ns);
  if (client.ungranted_work() > kMaxUngrantedOps || client.ungranted_count() > kMaxUngrantedPosts) {
    return "posts without waiting for its grants (over " + std::to_string(kMaxUngrantedOps) + " GPU ops or " +
           std::to_string(kMaxUngrantedPosts) + " ops and marks ungranted)";
  }
  if (client.ungranted_work() >= client.user_ungranted_check_at) {
    client.user_ungranted_check_at = client.ungranted_work() + kUngrantedUserCheckEvery;
    const uid_t uid = client.identity().peer.uid;
    std::size_t users = 0;
    for (const auto& [id, other] : clients_) users += other->identity().peer.uid == uid ? other->ungranted_work() : 0;
    if (users > kMaxUngrantedOpsPerUser) {
      return "its user's clients post without waiting for their grants (over " +
             std::to_string(kMaxUngrantedOpsPerUser) + " GPU ops ungranted in all)";
    }
  }
  qos_posted(client, op, arrived.arrived_ns);
  if (op.kind == ipc::OpKind::kernel && op.sm_count != 0) {
    if (const auto note = learner_->device_sm_count(op.device, op.sm_count)) {
      spdlog::log(note->warning ? spdlog::level::warn : spdlog::level::info, "{} ({})", note->text, client.tag());
    }
  }
  const DurationLearner::Estimate estimate =
      op.kind == ipc::OpKind::kernel
          ? learner_->posted(client.identity().id, op, client.kernel_names().at(op.kernel_id), arrived.arrived_ns)
          : learner_->posted(client.identity().id, op,
                             op.kind == ipc::OpKind::graph ? graph_model_name(client.identity().job, op.kernel_id) : "",
                             arrived.arrived_ns);
  // Every op, mark, grant and completion at trace level, timed by the monotonic clock the shim stamps
  // with: what a policy decided, and when, can be read back against a job's own timings.
  spdlog::trace("{}: posted {} kind {} device {} stamp {} read {} expected {} upper {} direction {}", client.tag(),
                op.seq, static_cast<int>(op.kind), op.device, op.posted_ns, arrived.arrived_ns, estimate.expected_ns,
                estimate.upper_ns, static_cast<int>(op.direction));
  apply(policy_->op_posted(
      OpPosted{client.identity().id, client.identity().priority, op, arrived.arrived_ns, estimate.upper_ns,
               estimate.expected_ns, estimate.guessed}));
  return {};
}

std::string Daemon::renumber_device(const Client& client, ipc::OpDescriptor& op) {
  DeviceTable::Uuid uuid;
  std::copy(std::begin(op.device_uuid), std::end(op.device_uuid), uuid.begin());
  const std::uint32_t ordinal = op.device;
  const bool work = op.kind == ipc::OpKind::kernel || op.kind == ipc::OpKind::copy ||
                    op.kind == ipc::OpKind::memset || op.kind == ipc::OpKind::graph;
  const DeviceTable::Renumbered where =
      devices_.renumber(client.identity().id, ordinal, uuid, work, client.identity().peer.uid);
  if (!where.error.empty()) return "device UUIDs: " + where.error;
  if (!where.note.empty()) spdlog::warn("{} ({})", where.note, client.tag());
  op.device = where.device;
  if (where.added) {
    spdlog::info("device {} is {} ({} calls it device {})", where.device, DeviceTable::uuid_text(uuid), client.tag(),
                 ordinal);
  }
  if (where.settings_moved) settings_checked_.clear();
  if (where.added || where.settings_moved) apply_device_settings();  // a GPU the config may name by UUID
  // Once per (device, ordinal) and config: the settings are looked up, not formatted, per op.
  const std::uint32_t settings_of = devices_.config_ordinal(where.device);
  if (settings_of != ordinal && uuid != DeviceTable::Uuid{} && settings_checked_.emplace(where.device, ordinal).second &&
      device_settings_differ(options_.policy.baymax, uuid, ordinal, settings_of)) {
    spdlog::warn("{} calls {} its device {}; [policy.baymax] gives ordinal {} other per-device settings "
                 "(preemptive_device or timeslice_ms) than ordinal {}, as the job that first used it calls it: gpuqosd "
                 "keeps ordinal {}'s for it (name the GPU by its UUID there to set it whatever its jobs call it)",
                 client.tag(), DeviceTable::uuid_text(uuid), ordinal, ordinal, settings_of, settings_of);
  }
  return {};
}

void Daemon::apply_device_settings() {
  PolicyOptions numbered = by_device_number(options_.policy, devices_);
  if (numbered.baymax.preemptive_devices == numbered_policy_.baymax.preemptive_devices &&
      numbered.baymax.device_timeslice_ns == numbered_policy_.baymax.device_timeslice_ns) {
    return;
  }
  if (policy_->reconfigure(numbered)) numbered_policy_ = std::move(numbered);
}

std::string Daemon::drain_completions(Client& client, std::int64_t now_ns, std::size_t most) {
  auto& deferred = client.deferred_completions();
  ipc::CompletionDescriptor completion;
  for (std::size_t read = 0; read < most && deferred.size() < ipc::kCompletionsRingCapacity &&
                             client.segment().completions().try_pop(completion);
       ++read) {
    deferred.push_back(completion);
  }
  if (client.segment().completions().corrupted()) return "completions ring corrupted (impossible indices)";
  // Read after the pops: every honest completion ended before it was pushed, so before this.
  const std::int64_t read_ns = ipc::monotonic_ns();
  std::size_t done = 0;
  for (; done < deferred.size(); ++done) {
    const ipc::CompletionDescriptor& c = deferred[done];
    // The op may still be with the OpsWaiter (popped, not yet taken): keep the rest for later.
    if (c.seq > client.last_seq()) break;
    if (ipc::Status valid = ipc::validate_completion(c, client.last_seq()); !valid) {
      return "invalid completion descriptor: " + valid.error();
    }
    if (c.end_ns > read_ns) {
      return "completion of seq " + std::to_string(c.seq) + " ends " + std::to_string(c.end_ns - read_ns) +
             " ns in the future";
    }
    client.count_completion();
    spdlog::trace("{}: done {} start {} end {} read {}", client.tag(), c.seq, c.start_ns, c.end_ns, read_ns);
    const std::int64_t own_ns = learner_->completed(client.identity().id, c, numbered_policy_.baymax.preemptive_devices);
    qos_completed(client, c, read_ns);  // its end is at most read_ns (checked above)
    apply(policy_->op_completed(OpCompleted{client.identity().id, c, now_ns, own_ns}));
  }
  deferred.erase(deferred.begin(), deferred.begin() + static_cast<std::ptrdiff_t>(done));
  // The limit runs while the first one waits for its op, not while the list is never empty: a busy
  // client beside others flooding ops can always have some waiting (a review: one posting 15,000
  // ops a second was dropped as a protocol violator).
  if (deferred.empty()) {
    client.deferred_since_ns = 0;
  } else if (client.deferred_since_ns == 0 || done > 0) {
    client.deferred_since_ns = now_ns;
  } else if (now_ns - client.deferred_since_ns > kDeferredCompletionLimitNs) {
    return "completion of seq " + std::to_string(deferred.front().seq) + " but no such op was posted";
  }
  return {};
}

void Daemon::apply(const Decisions& decisions) {
  std::vector<Client*> moved;
  for (const Grant& grant : decisions) {
    auto it = clients_.find(grant.client);
    if (it == clients_.end()) continue;
    if (it->second->grant_through(grant.through_seq)) moved.push_back(it->second.get());
    if (spdlog::should_log(spdlog::level::trace))
      spdlog::trace("{}: granted through {} at {}", it->second->tag(), grant.through_seq, ipc::monotonic_ns());
  }
  for (Client* client : moved) {
    if (!client->publish_grant()) spdlog::debug("{}: grants ring full, retrying on the next tick", client->tag());
  }
}

// A client that left on its own (hang-up, exit) may have pushed its last ops and completions just
// before: account them, so its final numbers are whole. Not for a client dropped for misbehaving.
// At most a pass's worth of each, as for a client that stays: a shim leaves a few; clients leaving
// together with full rings (an audit) made one pass take 285 ms, past the shims' heartbeat limit.
void Daemon::settle_departed(Client& client) {
  client.stop_ops_thread();  // from here the loop is the ops ring's only consumer
  const std::int64_t now = ipc::monotonic_ns();
  std::vector<ArrivedOp> ops = client.take_ops(now, kOpsPerPass);
  ipc::OpDescriptor op;
  while (ops.size() < kOpsPerPass && client.segment().ops().try_pop(op)) ops.push_back(ArrivedOp{op, now});
  for (const ArrivedOp& arrived : ops) {
    if (!accept_op(client, arrived).empty()) return;
  }
  drain_completions(client, now);
}

void Daemon::drop_client(ClientId id, const std::string& reason, bool as_error) {
  status_changed();  // what a status made earlier showed changes
  auto it = clients_.find(id);
  if (it == clients_.end()) return;
  Client& client = *it->second;
  if (!as_error && !client.segment().faulted()) settle_departed(client);
  // Before the disconnection's line: the hold is what the operator was told of last.
  if (const auto told = told_holds_.find(id); told != told_holds_.end() && client.granted_through() < told->second.seq) {
    spdlog::info("{}: left with op {} ({}) held for {:.1f} s, last by {}", client.tag(), told->second.seq, told->second.op,
                 static_cast<double>(ipc::monotonic_ns() - told->second.since_ns) / 1e9, told->second.held_by);
  }
  told_holds_.erase(id);
  const auto level = as_error ? spdlog::level::warn : spdlog::level::info;
  if ((as_error ? peer_warnings_ : client_lines_).take(ipc::monotonic_ns(), client.identity().peer.uid)) {
    spdlog::log(level, "{}: {}: disconnected ({} posted, {} granted, {} completed)", client.tag(), reason,
                client.posted_ops(), client.granted_ops(), client.completed_ops());
  }
  client.segment().remove_name();  // first: nothing new can map it
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, client.socket_fd(), nullptr);
  // The shim holds the doorbell too: closing ours would leave it registered in the epoll set.
  if (client.doorbell_fd() >= 0) ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, client.doorbell_fd(), nullptr);
  if (const auto user = kernel_name_bytes_by_user_.find(client.identity().peer.uid); user != kernel_name_bytes_by_user_.end()) {
    user->second -= std::min(user->second, client.kernel_name_bytes);
    if (user->second == 0) kernel_name_bytes_by_user_.erase(user);
  }
  const bool many_names = client.kernel_name_bytes > (1u << 20);
  std::unique_ptr<Client> gone = std::move(it->second);
  clients_.erase(it);
  apply(policy_->client_gone(id, ipc::monotonic_ns()));
  learner_->client_gone(id);
  devices_.client_gone(id);
  qos_client_gone(*gone);
  gone.reset();  // stops its OpsWaiter, unmaps, closes the socket
  if (many_names) ::malloc_trim(0);  // its names' memory back to the system, not kept by malloc
}

void Daemon::drain_and_release() {
  // The figures scrapes in progress get while the endpoint stops (below): rendered now, with every
  // client still counted (after, their grant counters would be gone: a counter reset to Prometheus).
  publish_last_metrics();
  ::epoll_ctl(epoll_.get(), EPOLL_CTL_DEL, listener_.get(), nullptr);
  if (listener_.valid()) unlink_own_socket();
  listener_.reset();
  pending_.clear();
  const std::int64_t now = ipc::monotonic_ns();
  drain_all(now);
  for (auto& [id, client] : clients_) {
    client->stop_ops_thread();  // from here the loop is the ops ring's only consumer
    ipc::OpDescriptor op;
    std::uint64_t last_seq = client->last_seq();
    for (std::uint32_t n = 0; n < ipc::kOpsRingCapacity && client->segment().ops().try_pop(op); ++n) {
      if (ipc::validate_op(op, last_seq, ipc::kMaxDevices)) last_seq = op.seq;
    }
    const std::uint64_t before = client->granted_through();
    if (const auto told = told_holds_.find(id); told != told_holds_.end() && before < told->second.seq) {
      spdlog::info("{}: op {} ({}) let go at shutdown after {:.1f} s held, last by {}", client->tag(), told->second.seq,
                   told->second.op, static_cast<double>(now - told->second.since_ns) / 1e9, told->second.held_by);
    }
    client->grant_through(last_seq);
    if (!client->publish_grant(ipc::kGrantDetach)) {
      spdlog::warn("{}: grants ring full, cannot send the final grant", client->tag());
    } else {
      if (client->high_priority()) {
        spdlog::info("{}: detached (high priority: nothing of it was held)", client->tag());
      } else {
        spdlog::info("{}: released through seq {} (was {}), detached", client->tag(), last_seq, before);
      }
    }
    client->segment().remove_name();
  }
  clients_.clear();
  told_holds_.clear();
  // Only once every client is detached: the scrapes in progress get up to kStopWaitNs to finish, and
  // a client that stopped waiting for the loop meanwhile (heartbeat) would take gpuqosd for stalled
  // (a user test: one peer that sent half a request made every job say "lost gpuqosd (no heartbeat)"
  // at a clean stop, and run unmanaged for 1.8 s).
  stop_metrics(MetricsServer::kStopWaitNs);
  const bool unsaved = learner_->unsaved();
  const std::uint64_t saves = learner_->counts().saves;
  if (auto said = learner_->save(); said && learner_->counts().saves > saves) {
    spdlog::warn("predictor: {}", *said);  // saved, beside the store, and why
  } else if (said) {
    spdlog::error("predictor: {}", *said);
  } else if (!learner_->store_path().empty() && unsaved && learner_->counts().saves > saves) {
    spdlog::info("predictor: saved {} kernels to {}", learner_->predictor().kernel_count(), learner_->save_path());
  } else if (!learner_->store_path().empty() && unsaved) {
    spdlog::info("predictor: what was learned is not saved: {} is not a regular file", learner_->store_path());
  } else if (!learner_->store_path().empty()) {
    spdlog::info("predictor: nothing learned since the last save: {} left as it is", learner_->save_path());
  }
  tell_unsaid_peer_warnings(ipc::monotonic_ns(), true);  // the last window's counts, not lost with it
  spdlog::info("gpuqosd pid {} stopped", ::getpid());
}

}  // namespace gpuqos::scheduler
