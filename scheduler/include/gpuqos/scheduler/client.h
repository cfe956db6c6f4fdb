// A registered client as the daemon sees it: who it is (from SO_PEERCRED), its socket, its
// segment, who consumes its ops ring, and its accounting for status.
//
// The ops ring's consumer: for a shim of protocol 1.6 or later the loop itself, woken through the
// ring's doorbell (a datagram socket pair, the shim handed one end at registration) that the loop polls; for an
// older shim an OpsWaiter thread sleeping on the ring's futex, which wakes the loop in turn.
//
// Owned and used by the daemon's loop thread only (an OpsWaiter inside has its own thread).
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

#include "gpuqos/ipc/clock.h"
#include "gpuqos/ipc/registration.h"
#include "gpuqos/ipc/segment.h"
#include "gpuqos/scheduler/ops_waiter.h"
#include "gpuqos/scheduler/policy.h"
#include "gpuqos/scheduler/qos_tracker.h"
#include "gpuqos/scheduler/unix_socket.h"

namespace gpuqos::scheduler {

struct ClientIdentity {
  ClientId id = 0;
  ipc::PeerCredentials peer;  // from the kernel, never from the hello
  std::string job;
  ipc::Priority priority = ipc::Priority::low;  // effective: the claim after the access check
  std::uint32_t device = 0;
  ipc::Priority claimed_priority = ipc::Priority::low;  // what its Hello asked for
};

class Client {
 public:
  // `doorbell` valid: the loop consumes the ops ring; otherwise an OpsWaiter that signals wake_fd.
  Client(ClientIdentity identity, FileDescriptor socket, ipc::Segment segment, int wake_fd,
         FileDescriptor doorbell = FileDescriptor());

  const ClientIdentity& identity() const { return identity_; }
  // "job 'NAME' pid PID": starts every log line about this client.
  const std::string& tag() const { return tag_; }
  int socket_fd() const { return socket_.get(); }
  // A pidfd of the client's process (readable once it exits), or -1 where the kernel has none
  // (before Linux 5.3, or the pid is not in our namespace): then the socket hang-up alone tells.
  int pidfd() const { return pidfd_.get(); }
  ipc::Segment& segment() { return segment_; }
  const std::string& segment_name() const { return segment_.name(); }
  // At most `most` of the ops that arrived since the last call, oldest first: popped now (doorbell)
  // and stamped now_ns, or as the OpsWaiter popped and stamped them.
  std::vector<ArrivedOp> take_ops(std::int64_t now_ns, std::size_t most = OpsWaiter::kMaxQueuedOps);
  bool ops_corrupted();
  // Stops the OpsWaiter (if any): from then on the loop is the ops ring's only consumer.
  void stop_ops_thread();
  // The doorbell the loop polls (-1: none, an OpsWaiter wakes the loop).
  int doorbell_fd() const { return doorbell_.get(); }
  // It rang (epoll said so): takes the rings, which epoll would otherwise report for ever.
  void clear_doorbell();
  // Doorbell: the loop is about to sleep (true: ops are there already, do not), or has woken.
  // With `completions`, its completions ring too (the loop holds ops a completion may release),
  // unless the completions put aside (deferred) fill their queue: then the loop would not pop
  // the ring, and a ring that always has items would keep it from sleeping.
  bool arm_doorbell(bool completions) {
    const bool ops = segment_.ops().arm_consumer();
    completions = completions && deferred_completions_.size() < ipc::kCompletionsRingCapacity;
    return (completions && segment_.completions().arm_consumer()) || ops;
  }
  void disarm_doorbell() {
    segment_.ops().disarm_consumer();
    segment_.completions().disarm_consumer();
  }
  bool high_priority() const { return identity_.priority == ipc::Priority::high; }

  // Accounting of one validated op, arrived at now_ns. GPU work (kernels, copies, memsets, graphs)
  // counts as posted / granted / completed ops; synchronisations and query marks as marks.
  void posted(const ipc::OpDescriptor& op, std::int64_t now_ns);
  // Raises the grant to through_seq (never lowers it); true when it moved. The ops it releases
  // count their wait up to now_ns in grant_counters().
  bool grant_through(std::uint64_t through_seq, std::int64_t now_ns = ipc::monotonic_ns());
  // Publishes the daemon's heartbeat in the segment. One more than kHeartbeatLimitNs after the last
  // (the loop stalled) means the shim ran its waiting ops unmanaged once the limit passed: their
  // wait ends there, not at a grant after the loop is back.
  void publish_heartbeat(std::int64_t now_ns);
  // Pushes the current grant into the grants ring unless already there; false if the ring is full.
  bool publish_grant(std::uint32_t flags = ipc::kGrantNone);

  std::uint64_t last_seq() const { return last_seq_; }
  // Bit d: its posted GPU work named device d (ipc::device_in).
  std::uint64_t devices_posted() const { return devices_posted_; }
  std::uint64_t granted_through() const { return granted_through_; }
  std::uint64_t posted_ops() const { return posted_ops_; }
  std::uint64_t granted_ops() const { return granted_ops_; }
  std::uint64_t completed_ops() const { return completed_ops_; }
  void count_completion() { ++completed_ops_; }
  // Marks posted: [0] synchronisations, [1] query begins, [2] query ends, [3] query arrivals.
  const std::array<std::uint64_t, 4>& marks() const { return marks_; }
  bool grant_pending() const { return published_through_ != granted_through_; }
  // ns the oldest ungranted op has waited (0: none waits).
  std::int64_t current_wait_ns(std::int64_t now_ns) const;
  const char* state() const { return ungranted_.empty() ? "running" : "waiting"; }
  // GPU ops posted and not yet granted. A shim waits for each one's grant, so this stays near its
  // thread count; far more is a client that posts without waiting (Daemon::kMaxUngrantedOps). Marks
  // (synchronisations, query marks) are posted without waiting: they count only in the second.
  std::size_t ungranted_work() const { return ungranted_work_; }
  // Daemon::accept_op's: its user's total is next checked when ungranted_work() reaches this.
  std::size_t user_ungranted_check_at = 0;
  std::size_t ungranted_count() const { return ungranted_.size(); }
  // Grants pushed, GPU ops held for a grant and how long they waited (for the metrics).
  const GrantCounters& grant_counters() const { return grant_counters_; }

  // The devices it runs unscheduled (ipc::UnscheduledDevice), by its ordinal: their UUIDs (at most
  // DeviceTable::kMaxGpusPerClient; unscheduled_capped once more were said).
  std::map<std::uint32_t, std::array<std::uint8_t, 16>>& unscheduled_devices() { return unscheduled_devices_; }
  const std::map<std::uint32_t, std::array<std::uint8_t, 16>>& unscheduled_devices() const { return unscheduled_devices_; }

  // Kernel names registered over the socket.
  // Shared with the ops DurationLearner remembers.
  using KernelNames = std::unordered_map<std::uint32_t, std::shared_ptr<const std::string>>;
  KernelNames& kernel_names() { return kernel_names_; }
  std::size_t kernel_name_count() const { return kernel_names_.size(); }
  std::size_t kernel_name_bytes = 0;  // the names' costs summed (Daemon::add_kernel_name keeps it)
  // Records read from its socket in the daemon's loop pass `records_pass` (Daemon::read_client_socket).
  std::uint64_t records_pass = 0;
  int records_read = 0;
  // Completions popped before the op they name reached the loop (the waiter still held it).
  std::vector<ipc::CompletionDescriptor>& deferred_completions() { return deferred_completions_; }
  std::int64_t deferred_since_ns = 0;
  bool unscheduled_capped = false;

 private:
  struct Ungranted {
    std::uint64_t seq;
    std::int64_t arrived_ns;
    bool work;  // GPU work, not a mark
  };

  ClientIdentity identity_;
  std::string tag_;
  FileDescriptor socket_;
  FileDescriptor pidfd_;
  ipc::Segment segment_;
  FileDescriptor doorbell_;
  std::unique_ptr<OpsWaiter> waiter_;  // null with a doorbell; last: stops before the segment is unmapped
  std::uint64_t last_seq_ = 0;
  std::uint64_t granted_through_ = 0;
  std::uint64_t published_through_ = 0;
  std::uint64_t posted_ops_ = 0;
  std::uint64_t devices_posted_ = 0;
  std::map<std::uint32_t, std::array<std::uint8_t, 16>> unscheduled_devices_;
  std::uint64_t granted_ops_ = 0;
  std::uint64_t completed_ops_ = 0;
  std::array<std::uint64_t, 4> marks_{};
  GrantCounters grant_counters_;
  std::deque<Ungranted> ungranted_;
  std::size_t ungranted_work_ = 0;
  std::int64_t heartbeat_ns_ = 0;     // the last published
  std::int64_t fell_open_at_ns_ = 0;  // when the shim last stopped waiting for a stalled loop (0: never)
  KernelNames kernel_names_;
  std::vector<ipc::CompletionDescriptor> deferred_completions_;
};

}  // namespace gpuqos::scheduler
