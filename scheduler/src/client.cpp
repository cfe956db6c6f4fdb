// A registered client's accounting and its grants ring.
#include "gpuqos/scheduler/client.h"

#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>

namespace gpuqos::scheduler {
namespace {

bool is_gpu_work(ipc::OpKind kind) {
  return kind == ipc::OpKind::kernel || kind == ipc::OpKind::copy || kind == ipc::OpKind::memset ||
         kind == ipc::OpKind::graph;
}

FileDescriptor open_pidfd(pid_t pid) {
#ifdef SYS_pidfd_open
  if (pid > 0) return FileDescriptor(static_cast<int>(::syscall(SYS_pidfd_open, pid, 0)));
#endif
  return FileDescriptor();
}

}  // namespace

Client::Client(ClientIdentity identity, FileDescriptor socket, ipc::Segment segment, int wake_fd,
               FileDescriptor doorbell)
    : identity_(std::move(identity)),
      tag_("job '" + identity_.job + "' pid " + std::to_string(identity_.peer.pid)),
      socket_(std::move(socket)),
      pidfd_(open_pidfd(identity_.peer.pid)),
      segment_(std::move(segment)),
      doorbell_(std::move(doorbell)),
      waiter_(doorbell_.valid() ? nullptr : std::make_unique<OpsWaiter>(segment_.ops(), wake_fd)) {}

std::vector<ArrivedOp> Client::take_ops(std::int64_t now_ns, std::size_t most) {
  if (waiter_) return waiter_->take(most);
  std::vector<ArrivedOp> ops;
  ipc::OpDescriptor op;
  // At most what a waiter would queue: a client that posts faster than the loop takes finds its
  // ring full, as with a waiter.
  most = std::min(most, OpsWaiter::kMaxQueuedOps);
  while (ops.size() < most && segment_.ops().try_pop(op)) ops.push_back(ArrivedOp{op, now_ns});
  return ops;
}

bool Client::ops_corrupted() {
  return waiter_ ? waiter_->corrupted() : segment_.ops().corrupted();
}

void Client::clear_doorbell() {
  // Never blocks (MSG_DONTWAIT, whatever the socket's flags); a bounded number per wake-up, so a
  // client that rings without end costs the loop a wake-up each time, never its turn.
  char rings[64];
  for (int n = 0; n < 64 && ::recv(doorbell_.get(), rings, sizeof rings, MSG_DONTWAIT) >= 0; ++n) {
  }
}

void Client::stop_ops_thread() {
  if (waiter_) waiter_->stop();
}

void Client::posted(const ipc::OpDescriptor& op, std::int64_t now_ns) {
  last_seq_ = op.seq;
  const bool work = is_gpu_work(op.kind);
  if (work) {
    ++posted_ops_;
    if (op.device < 64) devices_posted_ |= std::uint64_t{1} << op.device;
  } else {
    ++marks_[static_cast<std::size_t>(op.kind) - static_cast<std::size_t>(ipc::OpKind::sync)];
  }
  if (high_priority() || op.seq <= granted_through_) {
    granted_ops_ += work;  // never held, or issued on credit
  } else if (!work && !ungranted_.empty() && !ungranted_.back().work) {
    ungranted_.back().seq = op.seq;  // marks in a row: one entry, released with the latest (policy.h)
  } else {
    ungranted_.push_back(Ungranted{op.seq, now_ns, work});
    ungranted_work_ += work;
    grant_counters_.ops_held += work;
  }
}

bool Client::grant_through(std::uint64_t through_seq, std::int64_t now_ns) {
  if (through_seq <= granted_through_) return false;
  granted_through_ = through_seq;
  while (!ungranted_.empty() && ungranted_.front().seq <= through_seq) {
    const Ungranted& op = ungranted_.front();
    if (op.work) {
      ++granted_ops_;
      --ungranted_work_;
      const std::int64_t until = op.arrived_ns < fell_open_at_ns_ ? std::min(now_ns, fell_open_at_ns_) : now_ns;
      const std::int64_t waited_ns = std::max<std::int64_t>(0, until - op.arrived_ns);
      grant_counters_.held_wait_ns_total += waited_ns;
      grant_counters_.held_wait_ns_max = std::max(grant_counters_.held_wait_ns_max, waited_ns);
    }
    ungranted_.pop_front();
  }
  return true;
}

bool Client::publish_grant(std::uint32_t flags) {
  if (!grant_pending() && flags == ipc::kGrantNone) return true;
  const ipc::GrantDescriptor grant{granted_through_, 0, flags, 0, 0};
  if (!segment_.grants().try_push(grant)) return false;
  published_through_ = granted_through_;
  ++grant_counters_.grants;
  return true;
}

void Client::publish_heartbeat(std::int64_t now_ns) {
  if (heartbeat_ns_ > 0 && now_ns - heartbeat_ns_ > ipc::kHeartbeatLimitNs) {
    fell_open_at_ns_ = heartbeat_ns_ + ipc::kHeartbeatLimitNs;
  }
  heartbeat_ns_ = now_ns;
  segment_.publish_heartbeat(static_cast<std::uint64_t>(now_ns));
}

std::int64_t Client::current_wait_ns(std::int64_t now_ns) const {
  if (ungranted_.empty()) return 0;
  const std::int64_t arrived = ungranted_.front().arrived_ns;
  return (arrived < fell_open_at_ns_ ? std::min(now_ns, fell_open_at_ns_) : now_ns) - arrived;
}

}  // namespace gpuqos::scheduler
