// One registration with gpuqosd: the socket, the mapped segment, the seq counter and the grant
// state shared by every thread of the program. Dead for good once lost (the gate makes a new one).
//
// Threads: any user thread posts and waits; the gate's monitor thread watches the socket and the
// heartbeat; the completion thread is the only producer of the completions ring. Only one thread
// at a time pops the grants ring (pop_mutex_) and publishes what it read through granted_.
#pragma once

#include <sys/types.h>

#include <array>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "gpuqos/intercept/settings.h"
#include "gpuqos/ipc/registration.h"
#include "gpuqos/ipc/segment.h"
#include "kernel_registry.h"

namespace gpuqos::intercept {

using ipc::kHeartbeatLimitNs;
inline constexpr const char* kFutureHeartbeat =
    "gpuqosd's heartbeat is from the future (garbage in its segment, its clock jumped, or it is older than protocol "
    "1.4 and in another time namespace)";
inline constexpr const char* kStaleHeartbeat = "gpuqosd stopped answering (no heartbeat for over 100 ms)";
inline constexpr std::int64_t kWaitSliceNs = 5'000'000;         // a waiter re-checks liveness this often

class Session {
 public:
  // Which file a descriptor is (fstat's device and inode; 0, 0: none).
  struct FileId {
    dev_t device = 0;
    ino_t inode = 0;
    bool operator==(const FileId&) const = default;
  };
  // What the daemon's HelloReply decided for this registration.
  struct Terms {
    bool low_priority = true;          // the effective class: the claim, or low if the daemon lowered it
    std::uint64_t copy_chunk_bytes = 0;  // low priority: 1-D copies larger than this go in chunks; 0: never
    bool takes_arrivals = false;         // the daemon speaks 1.2: it takes query_arrived marks
    bool takes_unscheduled = false;      // the daemon speaks 1.9: it takes UnscheduledDevice records
    std::uint64_t managed_devices = ipc::kAllDevices;  // bit d: the daemon schedules device d's work
    std::vector<std::string> managed_uuids;  // ... and the devices whose UUID text starts with one (1.8)
    // How far the daemon's CLOCK_MONOTONIC is ahead of this process's (another time namespace; 0:
    // the same clock), and how far off that estimate may be (0 for the same clock). Every time
    // posted is converted to the daemon's clock, and its heartbeat read on it, give or take that.
    std::int64_t clock_offset_ns = 0;
    std::int64_t clock_uncertainty_ns = 0;
  };
  struct Opened {
    std::shared_ptr<Session> session;  // null: not registered
    std::string why;                   // why not
    bool refused = false;              // the daemon answered no (version mismatch or refusal), or is not trusted
    bool lowered = false;              // registered, but the daemon lowered a high-priority claim
  };
  // Connects to the daemon's socket, says Hello and maps the segment it names. Short timeouts:
  // returns within ~1.5 s even when the daemon accepts and never answers.
  static Opened open(const Settings& settings, std::uint32_t id);

  // In a child just forked (an atfork handler: only async-signal-safe calls), closes the sockets of
  // the parent's sessions it inherited, those still the files they were: a child that outlived its
  // parent kept the parent's registration open, and where gpuqosd cannot see the parent's pid (its
  // own pid namespace) the hang-up is all it has to know the parent is gone (a review: the parent
  // stayed listed, its query open, until the child exited 20 s later). The parent's are its own.
  static void close_inherited() noexcept;
  // Lists (and unlists) a descriptor of a registration for close_inherited: a Session lists its
  // own; session_open lists the socket from its making, for the Hello exchange before the Session.
  static void list_inherited(int fd, FileId id) noexcept;
  static void unlist_inherited(int fd, FileId id) noexcept;
  static FileId file_of(int fd) noexcept;  // fstat's device and inode (0, 0: none)

  // Owns fd and doorbell (-1: none, the daemon's thread waits on the ops ring's futex instead).
  Session(std::uint32_t id, int fd, std::uint32_t client_number, ipc::Segment segment, Terms terms,
          int doorbell = -1);
  ~Session();
  Session(const Session&) = delete;
  Session& operator=(const Session&) = delete;

  std::uint32_t id() const noexcept { return id_; }
  std::uint32_t client_number() const noexcept { return client_number_; }
  bool alive() const noexcept { return alive_.load(std::memory_order_acquire); }
  // True once, for whoever first says that this registration was lost (the monitor, or the exit).
  bool take_loss_to_tell() noexcept { return !loss_told_.exchange(true, std::memory_order_acq_rel); }
  // Low priority waits for grants (and splits large copies); high priority never waits.
  bool low_priority() const noexcept { return terms_.low_priority; }
  // The chunk size of this process's 1-D copies: 0 (never split) at high priority.
  std::uint64_t copy_chunk_bytes() const noexcept { return terms_.low_priority ? terms_.copy_chunk_bytes : 0; }
  bool takes_arrivals() const noexcept { return terms_.takes_arrivals; }
  // Does the daemon schedule work on `device`? By ordinal, or by UUID ([devices] uuids): uuid_of()
  // gives the device's (ContextDevices::uuid; all zero: not known), asked only when the ordinal
  // does not say. Ops on other devices go straight to the driver.
  template <class UuidOf>
  bool manages(std::uint32_t device, UuidOf&& uuid_of) const noexcept {
    if (ipc::device_in(terms_.managed_devices, device)) return true;
    return !terms_.managed_uuids.empty() && managed_by_uuid(device, uuid_of());
  }
  std::uint64_t managed_devices() const noexcept { return terms_.managed_devices; }
  const std::vector<std::string>& managed_uuids() const noexcept { return terms_.managed_uuids; }
  std::int64_t clock_offset_ns() const noexcept { return terms_.clock_offset_ns; }
  // Should gpuqosd still be told that `device` runs unscheduled (1.9, once per ordinal)?
  bool unscheduled_to_tell(std::uint32_t device) const noexcept {
    return terms_.takes_unscheduled && device < 64 &&
           (told_unscheduled_.load(std::memory_order_relaxed) & (std::uint64_t{1} << device)) == 0;
  }
  // Tells it (ipc::UnscheduledDevice; uuid all zero: the driver cannot say). Informational: a
  // socket that takes nothing loses the session, as a kernel name's would.
  void tell_unscheduled(std::uint32_t device, const std::array<std::uint8_t, 16>& uuid) noexcept;

  // Sends the name of op.kernel_id if this registration has not had it, gives op the next seq and
  // pushes it. A full ops ring: `may_wait` waits for space (low priority), else not posted. An op
  // ipc::validate_op would refuse is not posted either (the driver will refuse the call anyway).
  // `keep_free`: not posted either while the ring has that many free slots or fewer (query marks
  // and synchronisations keep room for the GPU work behind them: a user test's flood of marks
  // filled the ring, and a high-priority job's kernels, which never wait, went unposted).
  bool post(ipc::OpDescriptor& op, const KernelRegistry& kernels, bool may_wait, std::uint32_t keep_free = 0) noexcept;
  // Ops that found the ring (or, high priority, the socket for their kernel's name) full and were not
  // posted (they ran unscheduled; marks held back by `keep_free` are not counted here).
  std::uint64_t ops_lost_to_full_ring() const noexcept { return full_ring_ops_.load(std::memory_order_relaxed); }

  // Blocks until the daemon granted seq: true; false when the session was lost meanwhile.
  bool wait_for_grant(std::uint64_t seq) noexcept;
  // Already granted (credit), as far as this process has read the grants: no wait needed.
  bool granted(std::uint64_t seq) const noexcept { return granted_.load(std::memory_order_acquire) >= seq; }

  // Completion thread only (the single producer of the completions ring).
  bool push_completion(const ipc::CompletionDescriptor& completion) noexcept;

  // Monitor thread: waits up to timeout_ms for the socket, checks the heartbeat and drains grants;
  // false once the session is lost.
  bool watch(int timeout_ms) noexcept;

  // Marks the session lost (first reason wins), releases every waiter, hangs up.
  void lose(std::string_view why) noexcept;
  std::string lost_reason() const;
  // The same unless its lock is taken (at exit, by a call exit() interrupted): nullopt.
  std::optional<std::string> lost_reason_if_free() const noexcept;

 private:
  // Whether the daemon's heartbeat is fresh; if not (stale, or from the future: garbage, a clock
  // that jumped, or a daemon older than 1.4 in another time namespace), loses the session saying
  // which. Either way by more than the clock offset's error (now is read up to twice the
  // uncertainty early: on_daemon_clock).
  bool check_heartbeat() noexcept;
  // A time of this process's clock on the daemon's (<= 0, "none", stays as it is), by the least
  // offset the Hello's round trip allows: never later than the daemon's clock at that moment, which
  // gpuqosd checks (a completion that ends after it was read is garbage). At most twice the
  // uncertainty early; durations are unchanged.
  std::int64_t on_daemon_clock(std::int64_t ns) const noexcept {
    return ns > 0 ? ns + terms_.clock_offset_ns - terms_.clock_uncertainty_ns : ns;
  }
  // `may_wait` false (high priority): one try, and a full socket is no loss (the op goes unposted).
  bool send_kernel_name(std::uint32_t id, const KernelRegistry& kernels, bool may_wait) noexcept;
  // Sends a record on the socket, with post_mutex_ held (records do not interleave); a socket that
  // stays full for ~100 ms, or fails, loses the session saying `what` could not be sent.
  bool send_or_lose(std::span<const std::byte> record, const char* what) noexcept;
  bool push_op(const ipc::OpDescriptor& op, bool may_wait) noexcept;
  void ring_doorbell() noexcept;  // tells gpuqosd's loop that a ring it armed has an item
  // Pushes into one of the segment's rings, waking its consumer the way it sleeps: the doorbell for
  // gpuqosd's loop (1.6), else the ring's futex.
  template <class Ring, class Item>
  bool push(Ring& ring, const Item& item) noexcept {
    return doorbell_ >= 0 ? ring.try_push(item, [this] { ring_doorbell(); }) : ring.try_push(item);
  }
  void drain_grants() noexcept;  // with pop_mutex_ held
  void publish() noexcept;       // wakes the waiters on state_cv_

  // Is fd still the file it was at registration (id), and not disowned? A program may close a
  // descriptor of ours and reuse the number for a file of its own.
  bool ours(int fd, FileId id, const std::atomic<bool>& disowned) const noexcept;
  // Both descriptors still ours? If not, the one that is not is disowned (never used or closed
  // again) and the session is lost.
  bool still_ours() noexcept;

  const std::uint32_t id_;
  const int fd_;
  const int doorbell_;  // a datagram socket gpuqosd's loop polls (1.6), or -1
  const FileId fd_id_, doorbell_id_;
  std::atomic<bool> fd_disowned_{false}, doorbell_disowned_{false}, told_disowned_{false};
  // When still_ours() last found both ours (the monitor looks every 10 ms): a doorbell datagram
  // checks again first only if that was more than kDescriptorCheckNs ago.
  static constexpr std::int64_t kDescriptorCheckNs = 1'000'000;
  std::atomic<std::int64_t> checked_ns_{0};
  const std::uint32_t client_number_;
  const Terms terms_;
  bool managed_by_uuid(std::uint32_t device, const std::array<std::uint8_t, 16>& uuid) const noexcept;
  // manages() by UUID, per ordinal: 0 not known yet, 1 yes, 2 no (kept once the UUID is known).
  mutable std::array<std::atomic<std::uint8_t>, ipc::kMaxDevices> by_uuid_{};
  ipc::Segment segment_;
  std::atomic<bool> alive_{true};
  std::atomic<bool> loss_told_{false};

  std::mutex post_mutex_;  // the ops ring's producer side, the seq counter, the names sent
  std::uint64_t next_seq_ = 1;
  std::vector<bool> named_;  // named_[kernel id]: sent on this registration
  std::atomic<std::uint64_t> told_unscheduled_{0};  // bit d: device d told of as unscheduled

  std::mutex pop_mutex_;  // the grants ring's consumer side
  // The monitor thread waits for pop_mutex_ (a hang-up seen): a waiter leaves it to it rather than
  // take it again at once (std::mutex is not fair: under CPU pressure the monitor waited until the
  // waiter gave up at the heartbeat limit, 100 ms, where a gpuqosd crash should release it at once).
  std::atomic<bool> monitor_wants_pop_{false};
  std::atomic<std::uint64_t> granted_{0};
  std::atomic<std::uint64_t> full_ring_ops_{0};
  mutable std::mutex state_mutex_;
  std::condition_variable state_cv_;
  std::string lost_reason_;  // under state_mutex_
};

}  // namespace gpuqos::intercept
