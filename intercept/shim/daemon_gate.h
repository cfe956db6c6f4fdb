// The gate when gpuqosd manages the program: posts every launch, copy, memset and graph launch to
// the daemon, holds low-priority work until it is granted, reports completions, and fails open.
//
// Fail-open: with no registration (no daemon at start, or lost) every call passes straight through
// (PassThroughGate, which also keeps the GPUQOS_DEBUG_COUNTS counts). A monitor thread watches the
// registration (socket hang-up, heartbeat older than 100 ms, kGrantDetach), releases waiters at
// once when it is lost, and tries to register again every second; a new registration gets a new
// segment, seq restarts at 1 and kernel names are sent again before their first use.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <string>
#include <mutex>
#include <utility>
#include <vector>

#include "completion_tracker.h"
#include "describe.h"
#include "gpuqos/intercept/gate.h"
#include "gpuqos/intercept/settings.h"
#include "kernel_registry.h"
#include "pass_through_gate.h"
#include "session.h"

namespace gpuqos::intercept {

class DaemonGate final : public Gate {
 public:
  // Where the gate's messages go (the Client's log: the gate is built inside the accessor's
  // call_once, so it must not call log_message itself).
  using Log = std::function<void(LogLevel, const std::string&)>;

  // Registers (at most ~1.5 s when a daemon accepts and never answers; at once when none listens)
  // and starts the monitor thread. Lives until the process ends: the thread uses it.
  DaemonGate(Settings settings, Log log);

  Ticket before(const Operation& op) noexcept override;
  void after(const Operation& op, Ticket ticket, CUresult result) noexcept override;
  void shutdown() noexcept override;
  void mark_query(QueryMark mark) noexcept override;
  // A synchronous copy into host memory: a sync mark, as a synchronisation's (a review: a job that
  // ended each request with cuMemcpyDtoH, the runtime's plain cudaMemcpy, never closed a query).
  void synchronous_copy_returned(const Operation& op) noexcept override;
  // The registration's chunk size at low priority; 0 at high priority, while unmanaged and on a
  // device the daemon does not manage (its copies go whole, straight to the driver).
  std::uint64_t copy_chunk_bytes() const noexcept override;

  // At exit, before the driver is torn down: no more event polling.
  void stop_completion_tracking() noexcept { completions_.stop(); }

 private:
  Ticket post(const Operation& op, const std::shared_ptr<Session>& session) noexcept;
  // A synchronisation or query mark: posted, never held, never tracked for completion.
  void post_mark(ipc::OpDescriptor descriptor) noexcept;
  // A sync mark: the program waits (or waited) for its work here, where an inferred query closes.
  void post_sync_mark(std::uint64_t stream) noexcept;
  bool try_register(bool at_start) noexcept;
  void monitor() noexcept;
  // Once per process, at the first op on a device the daemon does not manage: which it does, and
  // (a warning) when that is none of this process's devices, or the job is high priority.
  void tell_unmanaged(std::uint32_t device, const Session& session) noexcept;
  // Does the session's daemon schedule work on `device` (by ordinal or UUID)?
  bool manages(const Session& session, std::uint32_t device) const noexcept;
  // Fills the descriptor's device_uuid from its device ordinal (protocol 1.7).
  void said_uuid(ipc::OpDescriptor& descriptor) const noexcept;

  const Settings settings_;
  const Log log_;
  PassThroughGate pass_through_;
  KernelRegistry kernels_;
  CompletionTracker completions_;
  std::atomic<std::shared_ptr<Session>> session_;
  std::uint32_t next_session_id_ = 1;  // monitor thread (and the constructor)
  bool gave_up_ = false;               // do not ask again (a heartbeat on no clock of ours)
  // After a refusal (or a daemon not trusted), the wait before asking again: 1 s, doubling up to
  // kMaxRefusedRetry; zero when the last answer was no refusal. A refusal may pass (a full /dev/shm,
  // the daemon replaced by a working one), so the job asks again, less and less often.
  std::chrono::milliseconds refused_retry_{0};
  bool told_lowered_ = false;          // the one warning that the daemon lowered our claim was shown
  bool told_clock_ = false;            // the one word that the daemon is on another clock was said
  bool said_running_unmanaged_ = false;  // monitor thread: a warning said so, and no registration since
  std::atomic<bool> told_unmanaged_{false};  // the one word that work went to a device not managed
  std::atomic<bool> told_full_ring_{false};  // the one word that a full ops ring sent work unposted
  std::atomic<bool> told_marks_dropped_{false};  // ... and that query marks were dropped
  // When each kernel (by id, the first 4,096) was last timed on the device at a launch (either priority).
  std::array<std::atomic<std::int64_t>, 4096> kernel_timed_ns_{};
  // Each device's primary context as the program's own retain returned it (the context hook), so
  // that a release or reset names the context it may end without a retain of ours. A release or
  // reset that may have ended it forgets it, and a retain that began before such a call ended
  // (another thread's) is not remembered: a handle known here is never a dead one's.
  class PrimaryContexts {
   public:
    static constexpr std::size_t kDevices = 64;
    std::uint64_t generation(CUdevice device) noexcept;  // before a retain
    void retained(CUdevice device, std::uint64_t generation, CUcontext context) noexcept;  // after it
    CUcontext known(CUdevice device) noexcept;  // null: not known
    // After a release or reset that succeeded; `still_active`: the context outlived it.
    void ended(CUdevice device, bool still_active) noexcept;
    // After a release of the primary context of a device not named (a green context's
    // destruction): each known handle whose context did not outlive it is forgotten.
    void released_on_some_device() noexcept;

   private:
    static bool valid(CUdevice device) noexcept { return device >= 0 && static_cast<std::size_t>(device) < kDevices; }
    std::mutex mutex_;
    std::array<CUcontext, kDevices> context_{};
    std::array<std::uint64_t, kDevices> generation_{};  // releases and resets that succeeded
  };
  PrimaryContexts primaries_;
  // The current registration's Session::copy_chunk_bytes(), 0 without one: read by every 1-D copy,
  // so kept apart from session_ (whose load costs more than a relaxed read).
  std::atomic<std::uint64_t> copy_chunk_bytes_{0};
  // The current registration's managed devices (ipc::kAllDevices without one), for the same reason,
  // and whether it names some by UUID too (then a copy asks the session).
  std::atomic<std::uint64_t> managed_devices_{ipc::kAllDevices};
  std::atomic<bool> managed_by_uuid_{false};

  mutable ContextDevices devices_;  // a cache: filled by const lookups too

  // The arrival times of requests said to have arrived (gpuqos_query_arrived) and not yet begun,
  // oldest first: each begin takes the oldest and names it to the daemon. Kept whether or not a
  // daemon is there, so the pairing holds across a reconnect. At most kMaxArrivals (beyond: the
  // oldest goes, the likeliest to be a request the program dropped).
  static constexpr std::size_t kMaxArrivals = 256;
  std::mutex arrivals_mutex_;
  std::deque<std::int64_t> arrivals_;

  std::mutex stop_mutex_;
  std::condition_variable stop_cv_;
  bool stopping_ = false;

  // session_ again, for shutdown() alone: an atomic shared_ptr's load spins on a lock of its own,
  // which a thread interrupted inside a load holds for good when its signal handler calls exit()
  // (the exit then spun forever in shutdown(), 1 run in 400). Set with session_, read by try_lock.
  std::mutex exit_view_mutex_;
  std::shared_ptr<Session> exit_view_;
  void set_session(std::shared_ptr<Session> session) noexcept;
};

}  // namespace gpuqos::intercept
