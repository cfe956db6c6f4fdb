// Completion tracking: tells the daemon when posted work has run on the device.
//
// After the real call, the calling thread records a pooled event (CU_EVENT_DISABLE_TIMING) on the
// op's stream and hands (session, seq, event) to one background thread: a lock, a driver call and
// a lock, nothing that waits for the device or orders streams. The thread polls the oldest event
// of each stream (a stream's events finish in order) and pushes a CompletionDescriptor with
// host-observed times: end = when the poll saw the event done (the poll sleeps 20 us after a
// completion, doubling up to 1 ms while nothing completes, so end is late by at most that; only an
// idle thread is woken by a new op, so a busy program pays no wake-up per launch); start =
// the later of the call and the previous end on the same stream. A call the driver refused is
// reported at once with its error code.
#pragma once

#include <cuda.h>

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "gpuqos/intercept/gate.h"
#include "session.h"

namespace gpuqos::intercept {

class CompletionTracker {
 public:
  CompletionTracker() = default;
  ~CompletionTracker() { stop(); }
  CompletionTracker(const CompletionTracker&) = delete;
  CompletionTracker& operator=(const CompletionTracker&) = delete;

  // after() of a posted op, on the calling thread. Starts the thread on first use.
  void track(std::shared_ptr<Session> session, const Ticket& ticket, const Operation& op, CUresult result) noexcept;

  // A synchronisation returned: what it waited for is done, poll now rather than at the next tick.
  void nudge() noexcept;

  // Stops the thread (at exit, before the driver tears down); later ops are reported at once.
  void stop() noexcept;

 private:
  struct Pending {
    std::shared_ptr<Session> session;
    std::uint64_t seq = 0;
    std::uint64_t stream = 0;
    CUcontext context = nullptr;
    CUevent event = nullptr;  // null: report now
    std::int64_t posted_ns = 0;
    std::int32_t status = 0;
  };

  CUevent acquire_event(CUcontext context) noexcept;
  void enqueue(Pending pending) noexcept;
  void run() noexcept;
  bool poll_streams() noexcept;  // reports what finished; true if anything did
  void report(Pending& pending, std::int64_t end_ns) noexcept;

  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<Pending> incoming_;
  std::unordered_map<CUcontext, std::vector<CUevent>> free_events_;
  bool started_ = false, stopping_ = false, idle_ = false, nudged_ = false;
  std::thread thread_;

  // The thread's own.
  std::map<std::uint64_t, std::deque<Pending>> by_stream_;
  std::unordered_map<std::uint64_t, std::int64_t> last_end_ns_;
};

}  // namespace gpuqos::intercept
