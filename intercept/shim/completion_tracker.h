// Completion tracking: tells the daemon when posted work has run on the device.
//
// Each tracked op gets a pooled event (with timing) recorded on its stream after the real call; one
// background thread polls the oldest event of each stream (a stream's events finish in order) and
// pushes a CompletionDescriptor. Its end is when the poll saw the event done (the poll sleeps 20 us
// after a completion, doubling up to 1 ms while nothing completes, so end is late by at most that;
// only an idle thread is woken by a new op, so a busy program pays no wake-up per launch). Only the
// device times an op: a low-priority call (at most one a millisecond per thread, whether it waited
// for its grant or spent credit, and a kernel not timed for 100 ms) and a high-priority kernel not
// timed for a second (at most one launch per thread per 10 ms) also get an event recorded right
// before it
// on its stream, and is reported exact with start = end minus the device time between the two: the
// op's own time, plus, when the stream was idle, up to the host's time from that record to the end
// event's (so it is exact only when that host time is under a quarter of it: a thread descheduled
// between the two calls would otherwise add its wait; for a synchronous copy across the host link,
// which lasts as long as its call, only the host's time before and after the call counts). Every
// other op is coarse, with start = the later of its call and the previous end on the stream: the
// host's view adds launch latency before an op and poll lateness after it (4-us memsets were learned
// at 1 ms, 100-us kernels at up to 1.3 ms on a loaded machine, and a poll turn finding several ops
// done gave spans of the few hundred ns between two clock reads). Timing the event after the
// previous op instead is not sound: work the shim does not see (another thread's, a stream wait, a
// host function, the legacy stream's implicit synchronisation) may run between the two. A call the
// driver refused is reported at once with its error code.
//
// Who records the event:
// - inline (a low-priority call that waited for its grant, or any call timed): the program's thread,
//   right after the call. Exact per op; the cost (one driver call) hides behind the wait, or is
//   paid once a millisecond.
// - deferred (high priority, whose launch path should carry as little as possible, and low priority
//   spending credit between its timed calls, where there is no wait to hide it): the program's
//   thread only queues the op;
//   the background thread records one event per stream for everything queued since its last turn,
//   and each op on that stream completes with it. Such an event is recorded after the call, maybe
//   after later ops of the stream, so these completions are always reported coarse. Ops on a
//   default stream are recorded inline whatever their priority: another thread cannot name a
//   per-thread one, and an event recorded later on the legacy one (which synchronises with every
//   blocking stream) would order the program's later work behind work it never waited for. That
//   costs a high-priority launch there one pooled event and one cuEventRecord (about 1.4 us at p50
//   on simgpu). A deferred op whose stream the program has begun to capture is reported at once
//   instead (an event would become a node of its graph). Before a stream or context is destroyed
//   (the lifetime hooks), the destroying thread records what is still queued, so no event is ever
//   recorded on a dead handle; a synchronising thread does the same, so the work it waits for is
//   known done when it returns.
#pragma once

#include <cuda.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "gpuqos/intercept/gate.h"
#include "session.h"

namespace gpuqos::intercept {

// Wakes the completion thread without a lock: a futex word it waits on. A condition variable's
// notify takes a lock inside glibc, and exit() from a signal handler that interrupted one left it
// held: the exit's stop() then waited for it for good (1 hang in about 1,200 runs of a program that
// exits from its SIGALRM handler, under load). A futex wake holds nothing in user space, and needs
// no descriptor (one the program may close, and give to a file of its own).
class Waker {
 public:
  // Taken before the waiter lets go of what it checked (its mutex): a wake after it ends the wait.
  std::uint32_t ticket() const noexcept { return word_.load(std::memory_order_acquire); }
  // Never blocks, takes no lock (async-signal-safe).
  void wake() noexcept;
  // Until a wake after `ticket` was taken, or `timeout`.
  void wait(std::uint32_t ticket, std::chrono::nanoseconds timeout) noexcept;

 private:
  std::atomic<std::uint32_t> word_{0};
};

class CompletionTracker {
 public:
  CompletionTracker() = default;
  ~CompletionTracker() { stop(); }
  CompletionTracker(const CompletionTracker&) = delete;
  CompletionTracker& operator=(const CompletionTracker&) = delete;

  // Right before a timed call (on the calling thread): an event recorded on the op's stream, which
  // its completion is timed from on the device; nullptr if none could be. Give it to track().
  CUevent record_start(CUcontext context, const Operation& op) noexcept;
  // A start event no op will be tracked with goes back to the pool.
  void give_back(CUcontext context, CUevent event) noexcept;

  // after() of a posted op, on the calling thread. Starts the thread on first use.
  void track(std::shared_ptr<Session> session, const Ticket& ticket, const Operation& op, CUresult result,
             bool record_inline) noexcept;

  // Records every deferred event now, on this thread: before a stream or context is destroyed (no
  // event on a dead handle), and before a synchronisation (its events then finish with it).
  void record_deferred_now() noexcept;

  // Around a context's destruction or reset: forgets the pooled (finished) events, which would die
  // with it and be handed out again if the driver reused its handle. Before the call they are
  // destroyed; after it (events the thread pooled meanwhile) only forgotten: they may be dead.
  void drop_event_pool(bool destroy_events) noexcept;

  // Around a call that may end a context (cuCtxDestroy, a primary context's reset or release), on
  // the calling thread: from context_ending() until context_ended() no event of that context is
  // recorded or queried, since the driver forbids using a context's resources while it is
  // destroyed. If the context is gone (`gone`), what was pending there is reported done at the
  // thread's next turn, and its events are never touched again: they died with it (a use would be
  // undefined behaviour, on a real driver perhaps a crash of the program). Nothing is held across
  // the call itself. A null context: none ends, nothing done; unless `any` (the call may end a
  // context the shim could not name): then every context's ops posted before the call are treated
  // so, and every pooled event forgotten (reported early and leaked, which is safe; a use is not).
  // `since_ns`: when the call began; an op posted later is of a new context with the same handle.
  void context_ending(CUcontext context, std::int64_t since_ns, bool any = false) noexcept;
  void context_ended(CUcontext context, std::int64_t since_ns, bool gone, bool any = false) noexcept;

  // A synchronisation returned: what it waited for is done, poll now rather than at the next tick.
  void nudge() noexcept;

  // Stops the thread (at exit, before the driver tears down); later ops are reported at once.
  // It runs from an atexit handler, which exit() in a signal handler runs while this very thread
  // may be inside a hook (holding a lock of ours) or inside the driver (holding one of the
  // driver's, which the completion thread then waits for): it waits kExitWait at most, in all,
  // and what it could not have by then is left (unreported: gpuqosd takes those ops as stale), the
  // thread to end with the process. It joined that thread without a limit: a program that exits
  // from its Ctrl-C handler hung at exit in 8 runs of 150.
  static constexpr std::chrono::milliseconds kExitWait{250};
  void stop() noexcept;

 private:
  struct Pending {
    std::shared_ptr<Session> session;
    std::uint64_t seq = 0;
    std::uint64_t stream = 0;
    CUcontext context = nullptr;
    CUevent event = nullptr;  // null: report now, unless covered
    std::int64_t posted_ns = 0;
    std::int32_t status = 0;
    bool per_thread = false;    // issued on a _ptsz/_ptds form
    bool needs_record = false;  // deferred: the background thread records its event
    bool covered = false;       // done when the next event on its stream is
    bool deferred = false;      // its event (if any) was recorded by the background thread
    CUevent start_event = nullptr;  // recorded right before the call (a timed call): times it on the device
    std::int64_t host_ns = 0;  // host time the device time may hold besides the op's own (track())
  };
  // Ops by stream, in order; keyed by context too, as every context's default streams have one
  // handle (a decider must be of the same stream as the ops it decides).
  using StreamKey = std::pair<CUcontext, std::uint64_t>;

  CUevent acquire_event(CUcontext context) noexcept;
  // Records the event of `pending` on its stream; on failure the pending is reported at once.
  void record(Pending& pending, CUstream stream) noexcept;
  // Records one event per (context, stream) for the deferred ops of `batch` (record_mutex_ held).
  void record_deferred(std::vector<Pending>& batch) noexcept;
  struct Ending {
    CUcontext context = nullptr;
    std::int64_t since_ns = 0;  // when the call that may end it began
    bool any = false;           // it may end a context not named: it covers every context
    bool covers(const Pending& pending) const noexcept;
  };
  std::vector<Ending> ending_contexts() noexcept;  // a copy of ending_
  static bool is_ending(const std::vector<Ending>& ending, const Pending& pending) noexcept;
  void enqueue(Pending pending) noexcept;
  void run() noexcept;
  void final_reports() noexcept;
  bool poll_streams() noexcept;  // reports what finished; true if anything did
  // `device_ns`: its time on the device (> 0), from the events around it; 0: none known.
  // `may_wait`: a full completions ring is waited on for up to 10 ms (else the report is dropped).
  void report(Pending& pending, std::int64_t end_ns, bool coarse = false, std::int64_t device_ns = 0,
              bool may_wait = true) noexcept;
  // The device time between `done`'s start event and its event, both finished (0: none); pools the
  // start event.
  std::int64_t time_on_device(Pending& done) noexcept;

  std::mutex record_mutex_;  // deferred recording: the thread's turn, or a destroyer's
  std::mutex mutex_;
  std::mutex report_mutex_;  // report(): last_end_ns_ and the completions ring's one producer
  std::mutex poll_mutex_;    // the thread's turn (record, move, poll); a context ender waits for it
  Waker waker_;
  std::vector<Pending> incoming_;
  std::unordered_map<CUcontext, std::vector<CUevent>> free_events_;
  std::vector<Ending> ending_;  // contexts a call may be ending now (one entry per call)
  bool started_ = false, stopping_ = false, idle_ = false, nudged_ = false;
  std::atomic<bool> exiting_{false};  // stop() began (read without mutex_, which it may not get)
  std::atomic<bool> ended_{false};    // run() returned
  std::atomic<bool> abandoned_{false};  // stop() gave up waiting for it: no more driver calls
  std::thread thread_;

  // The thread's own (a context ender, under poll_mutex_, only forgets the events in it).
  std::map<StreamKey, std::deque<Pending>> by_stream_;
  std::map<StreamKey, std::int64_t> last_end_ns_;  // report()'s, under report_mutex_
};

}  // namespace gpuqos::intercept
