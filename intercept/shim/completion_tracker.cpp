// CompletionTracker: pooled events, the polling thread, CompletionDescriptors.
#include "completion_tracker.h"

#include <linux/futex.h>
#include <pthread.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <new>

#include "describe.h"
#include "gpuqos/ipc/clock.h"
#include "shim.h"

namespace gpuqos::intercept {
namespace {

using EventCreate = CUresult (*)(CUevent*, unsigned int);
using EventDestroy = CUresult (*)(CUevent);
using EventRecord = CUresult (*)(CUevent, CUstream);
using EventQuery = CUresult (*)(CUevent);
using EventElapsedTime = CUresult (*)(float*, CUevent, CUevent);
using CtxSetCurrent = CUresult (*)(CUcontext);
using CtxGetCurrent = CUresult (*)(CUcontext*);
using ExchangeCaptureMode = CUresult (*)(CUstreamCaptureMode*);
using StreamIsCapturing = CUresult (*)(CUstream, CUstreamCaptureStatus*);

constexpr auto kFirstPollSleep = std::chrono::microseconds(20);
// An idle thread (nothing tracked) waits for track() to wake it, and looks again this often anyway.
constexpr auto kIdleWait = std::chrono::milliseconds(100);
// stop(): how long a thread past run() has at least to end (it frees its malloc cache).
constexpr auto kEndingWait = std::chrono::milliseconds(20);
constexpr auto kLongestPollSleep = std::chrono::microseconds(1000);

}  // namespace

CUevent CompletionTracker::acquire_event(CUcontext context) noexcept {
  {
    std::lock_guard lock(mutex_);
    auto pool = free_events_.find(context);
    if (pool != free_events_.end() && !pool->second.empty()) {
      CUevent event = pool->second.back();
      pool->second.pop_back();
      return event;
    }
  }
  CUevent event = nullptr;
  const auto create = driver<EventCreate>(DriverHelper::event_create);
  // With timing: two events of a stream give the device time of the op between them.
  return create && create(&event, CU_EVENT_DEFAULT) == CUDA_SUCCESS ? event : nullptr;
}

void CompletionTracker::record(Pending& pending, CUstream stream) noexcept {
  pending.event = acquire_event(pending.context);
  const auto record = driver<EventRecord>(pending.per_thread ? DriverHelper::event_record_ptsz : DriverHelper::event_record);
  if (pending.event && (!record || record(pending.event, stream) != CUDA_SUCCESS)) {
    if (const auto destroy = driver<EventDestroy>(DriverHelper::event_destroy)) destroy(pending.event);
    pending.event = nullptr;  // reported at once: better early than never
  }
}

void CompletionTracker::track(std::shared_ptr<Session> session, const Ticket& ticket, const Operation& op,
                              CUresult result, bool record_inline) noexcept {
  try {
    Pending pending{std::move(session), ticket.seq, stream_key(op), ticket.context, nullptr, ticket.posted_ns,
                    static_cast<std::int32_t>(result), op.per_thread};
    pending.start_event = ticket.start_event;
    const std::int64_t returned_ns = ticket.start_event ? ipc::monotonic_ns() : 0;
    // cuLaunchCooperativeKernelMultiDevice names its streams in its parameter list, not to us: no
    // event (one on the default stream would be work the program never asked for); reported now.
    if (result == CUDA_SUCCESS && op.hook != HookId::hook_cuLaunchCooperativeKernelMultiDevice) {
      // Recorded by this thread, right after the call:
      // - the per-thread default stream (named or implied): only this thread can name it;
      // - the legacy default stream: it synchronises with every blocking stream, so an event
      //   recorded there later, by another thread, would order the program's later work behind work
      //   it never waited for (a deadlock if that work waits on the host; an invalidated capture).
      // (So only a named stream's op is deferred: record_deferred() takes its key for the handle,
      // which a per-thread default stream's key is not.)
      const bool default_stream = op.stream == nullptr || op.stream == CU_STREAM_LEGACY || op.stream == CU_STREAM_PER_THREAD;
      if (record_inline || default_stream) {
        record(pending, op.stream);
      } else {
        pending.needs_record = pending.deferred = true;
      }
    }
    if (pending.start_event) {
      // The host time the device time may hold besides the op's, had the stream nothing queued (the
      // start event then ran at once): from the start event's record to the op's reaching the device
      // (the record, then the call's way to the device); and from the op's end to the end event's
      // record, which for an op that can end during the call is the rest of the call and the record.
      // A synchronous copy across the host link lasts as long as its call, so for it only the parts
      // before and after the call count: bounded by the whole call, such a copy was never timed (its
      // device time is its call's and more), and gpuqosd never learned one online.
      const std::int64_t recorded_ns = pending.event ? ipc::monotonic_ns() : returned_ns;
      const bool lasts_its_call = op.synchronous && crosses_host_link(op);
      pending.host_ns = (lasts_its_call ? ticket.call_began_ns - ticket.start_ns : returned_ns - ticket.start_ns) +
                        (recorded_ns - returned_ns);
    }
    enqueue(std::move(pending));
  } catch (...) {  // out of memory: the daemon misses one completion, the program goes on
  }
}

void CompletionTracker::record_deferred(std::vector<Pending>& batch) noexcept {
  const auto set_current = driver<CtxSetCurrent>(DriverHelper::ctx_set_current);
  const auto get_current = driver<CtxGetCurrent>(DriverHelper::ctx_get_current);
  const auto is_capturing = driver<StreamIsCapturing>(DriverHelper::stream_is_capturing);
  // This may be the program's thread (a synchronisation, a destroy): its context is put back after.
  CUcontext original = nullptr;
  if (!get_current || get_current(&original) != CUDA_SUCCESS) original = nullptr;
  CUcontext current = original;
  std::vector<std::pair<CUcontext, std::uint64_t>> recorded;  // streams whose latest op has its event
  const std::vector<Ending> ending = ending_contexts();
  for (auto pending = batch.rbegin(); pending != batch.rend(); ++pending) {
    if (!pending->needs_record) continue;
    pending->needs_record = false;
    // Its context may be being destroyed: no event there (the op is reported now, coarse).
    if (is_ending(ending, *pending)) continue;
    const std::pair<CUcontext, std::uint64_t> key{pending->context, pending->stream};
    if (std::find(recorded.begin(), recorded.end(), key) != recorded.end()) {
      pending->covered = true;  // the later op's event on the same stream decides
      continue;
    }
    try {
      recorded.push_back(key);
    } catch (...) {  // out of memory: record each op, which is only slower
    }
    if (pending->context != current && set_current && set_current(pending->context) == CUDA_SUCCESS) {
      current = pending->context;
    }
    // The program may have begun capturing the stream since the call: an event recorded now would
    // become a node of its graph. Report such an op now instead (coarse, and early).
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    if (is_capturing && (is_capturing(reinterpret_cast<CUstream>(pending->stream), &capture) != CUDA_SUCCESS ||
                         capture != CU_STREAM_CAPTURE_STATUS_NONE)) {
      continue;
    }
    record(*pending, reinterpret_cast<CUstream>(pending->stream));
  }
  if (current != original && set_current) set_current(original);
}

void CompletionTracker::record_deferred_now() noexcept {
  std::vector<Pending> batch;
  try {
    std::lock_guard turn(record_mutex_);  // waits for the thread's own turn to finish recording
    {
      std::lock_guard lock(mutex_);
      if (!started_ || incoming_.empty()) return;
      batch.swap(incoming_);
    }
    {
      // On a program's thread, which may be capturing a graph or beside one that is: its event
      // records (on the legacy stream too) must not invalidate the capture, as the completion
      // thread's do not.
      const RelaxedCaptureMode relaxed;
      record_deferred(batch);
    }
    std::lock_guard lock(mutex_);
    incoming_.insert(incoming_.begin(), std::make_move_iterator(batch.begin()), std::make_move_iterator(batch.end()));
  } catch (...) {  // out of memory: those completions are lost
  }
}

void CompletionTracker::enqueue(Pending pending) noexcept {
  std::unique_lock lock(mutex_);
  if (stopping_) {
    lock.unlock();
    report(pending, ipc::monotonic_ns(), /*coarse=*/true);
    return;
  }
  if (!started_) {
    started_ = true;
    try {
      thread_ = start_thread<std::thread>("gpuqos-complete", [this] { run(); });
      // Stop polling before the driver's own exit handlers (registered earlier) tear it down.
      std::atexit([] { stop_completion_tracking(); });
    } catch (...) {
      stopping_ = true;
    }
  }
  incoming_.push_back(std::move(pending));
  const bool wake = idle_;
  lock.unlock();
  if (wake) waker_.wake();
}

void CompletionTracker::drop_event_pool(bool destroy_events) noexcept {
  std::unordered_map<CUcontext, std::vector<CUevent>> pool;
  {
    std::lock_guard lock(mutex_);
    pool.swap(free_events_);
  }
  const auto destroy = driver<EventDestroy>(DriverHelper::event_destroy);
  for (const auto& [context, events] : pool) {
    for (CUevent event : events) {
      if (destroy_events && destroy) destroy(event);
    }
  }
}

bool CompletionTracker::Ending::covers(const Pending& pending) const noexcept {
  // An op posted after the call began belongs to a new context the driver gave the same handle.
  return (any || context == pending.context) && pending.posted_ns < since_ns;
}

bool CompletionTracker::is_ending(const std::vector<Ending>& ending, const Pending& pending) noexcept {
  return std::any_of(ending.begin(), ending.end(), [&](const Ending& e) { return e.covers(pending); });
}

std::vector<CompletionTracker::Ending> CompletionTracker::ending_contexts() noexcept {
  try {
    std::lock_guard lock(mutex_);
    return ending_;
  } catch (...) {  // out of memory
    return {};
  }
}

void CompletionTracker::context_ending(CUcontext context, std::int64_t since_ns, bool any) noexcept {
  if (!context && !any) return;
  try {
    std::lock_guard turn(poll_mutex_);     // a turn under way finishes first: it may be polling there
    std::lock_guard record(record_mutex_);  // and a synchroniser's recording
    std::lock_guard lock(mutex_);
    ending_.push_back(Ending{context, since_ns, any});
  } catch (...) {  // out of memory: unprotected, as before this existed
  }
}

void CompletionTracker::context_ended(CUcontext context, std::int64_t since_ns, bool gone, bool any) noexcept {
  if (!context && !any) return;
  {
    // Every op of the context is then in incoming_ (a synchroniser's batch is back: record_mutex_)
    // or by_stream_ (no turn under way: poll_mutex_). Its events are forgotten in place: such an op
    // is reported at the thread's next turn, with no driver call, and nothing is allocated here.
    std::lock_guard turn(poll_mutex_);
    std::lock_guard record(record_mutex_);
    std::lock_guard lock(mutex_);
    const auto it = std::find_if(ending_.begin(), ending_.end(), [&](const Ending& e) {
      return e.context == context && e.since_ns == since_ns && e.any == any;
    });
    if (it != ending_.end()) ending_.erase(it);
    if (gone) {
      const Ending ended{context, since_ns, any};
      const auto forget = [&ended](Pending& pending) {
        if (!ended.covers(pending)) return;
        pending.event = pending.start_event = nullptr;
        pending.needs_record = pending.covered = false;
      };
      std::for_each(incoming_.begin(), incoming_.end(), forget);
      for (auto& [stream, queue] : by_stream_) std::for_each(queue.begin(), queue.end(), forget);
      if (any) {
        free_events_.clear();
      } else {
        free_events_.erase(context);
      }
    }
  }
  if (gone) {  // its streams' last ends: a later context given its handle starts afresh
    std::lock_guard report(report_mutex_);
    std::erase_if(last_end_ns_, [&](const auto& entry) { return any || entry.first.first == context; });
  }
  nudge();
}

void CompletionTracker::nudge() noexcept {
  {
    std::lock_guard lock(mutex_);
    if (!started_ || stopping_) return;
    nudged_ = true;
  }
  waker_.wake();
}

void Waker::wake() noexcept {
  word_.fetch_add(1, std::memory_order_release);
  (void)::syscall(SYS_futex, &word_, FUTEX_WAKE_PRIVATE, 1, nullptr, nullptr, 0);
}

void Waker::wait(std::uint32_t ticket, std::chrono::nanoseconds timeout) noexcept {
  const auto ns = std::max<std::int64_t>(0, timeout.count());
  const timespec limit{static_cast<time_t>(ns / 1'000'000'000), static_cast<long>(ns % 1'000'000'000)};
  // Returns at once if a wake came since `ticket`; EINTR and spurious returns end the wait early.
  (void)::syscall(SYS_futex, &word_, FUTEX_WAIT_PRIVATE, ticket, &limit, nullptr, 0);
}

namespace {

// Takes `lock` by `deadline`, or says it could not (it may be this thread's own, interrupted).
template <class Lock>
bool lock_by(Lock& lock, std::chrono::steady_clock::time_point deadline) noexcept {
  while (!lock.try_lock()) {
    if (std::chrono::steady_clock::now() >= deadline) return false;
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return true;
}

}  // namespace

void CompletionTracker::stop() noexcept {
  if (exiting_.exchange(true)) return;
  const auto deadline = std::chrono::steady_clock::now() + kExitWait;
  {
    std::unique_lock lock(mutex_, std::defer_lock);
    if (!lock_by(lock, deadline)) return;  // the thread waits behind it too, touching nothing
    stopping_ = true;
  }
  waker_.wake();
  if (!thread_.joinable() || thread_.get_id() == std::this_thread::get_id()) return;
  while (!ended_.load() && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  if (!ended_.load()) {  // in the driver, behind a lock an interrupted call of the program holds
    abandoned_.store(true);  // or slow: it makes no driver call it has not begun
    thread_.detach();
    return;
  }
  // Past run(), the thread still frees its malloc cache as it ends, which waits for the arena's lock
  // when exit() interrupted the program inside malloc: joined without a limit, the exit waited for
  // good (a stress run under load, 1 of about 1,200). A few ms more, then it is left to the exit.
  timespec until{};
  (void)::clock_gettime(CLOCK_MONOTONIC, &until);
  const auto left = std::max<std::chrono::nanoseconds>(deadline - std::chrono::steady_clock::now(), kEndingWait);
  until.tv_sec += static_cast<time_t>(left.count() / 1'000'000'000);
  until.tv_nsec += static_cast<long>(left.count() % 1'000'000'000);
  if (until.tv_nsec >= 1'000'000'000) ++until.tv_sec, until.tv_nsec -= 1'000'000'000;
  if (::pthread_clockjoin_np(thread_.native_handle(), nullptr, CLOCK_MONOTONIC, &until) != 0) {
    thread_.detach();
    return;
  }
  // Joined: the std::thread must not be joined or detached again, nor destroyed while it says it is
  // joinable. Moved where it is never destroyed (no allocation: malloc's lock may be taken).
  alignas(std::thread) static unsigned char joined[sizeof(std::thread)];
  new (joined) std::thread(std::move(thread_));
}

// The thread's last turn, at stop(): the program is exiting, usually right after a synchronisation,
// so what has finished is reported as such. On this thread, not stop()'s: these are driver calls,
// which block for good when the program's call that exit() interrupted holds the driver's lock.
void CompletionTracker::final_reports() noexcept {
  std::vector<Pending> batch;
  try {
    std::lock_guard poll_turn(poll_mutex_);  // a context may be ending
    std::lock_guard turn(record_mutex_);     // a destroyer or synchroniser may still be recording
    {
      std::lock_guard lock(mutex_);
      batch.swap(incoming_);
    }
    record_deferred(batch);
    for (Pending& pending : batch) by_stream_[{pending.context, pending.stream}].push_back(std::move(pending));
    poll_streams();
    if (abandoned_.load()) return;  // the process goes on exiting without this thread
    // What still runs is said done now (coarse: nothing learns its time). Never said, gpuqosd
    // counted it in flight until its stuck limit, and a best-effort copy an exit handler made
    // after this waited 2 s for its grant (a review's repro).
    const std::int64_t now = ipc::monotonic_ns();
    for (auto& [stream, queue] : by_stream_) {
      // Not waited on: thousands in flight beside a gpuqosd that reads slowly would hold the exit
      // 10 ms each for room in the ring. One dropped is taken as stale by gpuqosd, as before.
      for (Pending& pending : queue) report(pending, now, /*coarse=*/true, 0, /*may_wait=*/false);
    }
    by_stream_.clear();
  } catch (...) {
  }
}

void CompletionTracker::report(Pending& pending, std::int64_t end_ns, bool coarse, std::int64_t device_ns,
                               bool may_wait) noexcept {
  if (!pending.session || !pending.session->alive()) return;
  // The thread's, but after stop() any thread's (and stop()'s own): the ring has one producer.
  std::lock_guard lock(report_mutex_);
  std::int64_t last_end_value = 0;  // out of memory: this stream's starts are only coarser
  std::int64_t* found = &last_end_value;
  try {
    found = &last_end_ns_[{pending.context, pending.stream}];
  } catch (...) {
  }
  std::int64_t& last_end = *found;
  const bool ran = pending.status == 0;
  ipc::CompletionDescriptor completion{};
  completion.seq = pending.seq;
  completion.end_ns = end_ns;
  completion.start_ns = std::min(end_ns, ran ? std::max(pending.posted_ns, last_end) : end_ns);
  completion.status = pending.status;
  // Timed only on the device. The host cannot time an op: it began some launch latency after its
  // call (or, queued, somewhere before its predecessor was seen done; in one turn, its span would be
  // the few hundred ns between two clock reads), and ended some poll lateness before it was seen
  // done. Those taught the predictor 1000-fold too short durations, 4-us memsets at 1 ms, and 100-us
  // kernels at 1.3 ms on a loaded machine.
  if (ran && !coarse && device_ns > 0) {
    completion.start_ns = end_ns - device_ns;
  } else if (ran) {
    coarse = true;
  }
  completion.flags = coarse ? ipc::kCompletionCoarse : ipc::kCompletionExact;
  if (ran) last_end = end_ns;
  for (int attempt = 0; attempt < 100 && !pending.session->push_completion(completion); ++attempt) {
    if (!may_wait || !pending.session->alive()) return;
    std::this_thread::sleep_for(std::chrono::microseconds(100));  // the daemon drains the ring
  }
}

std::int64_t CompletionTracker::time_on_device(Pending& done) noexcept {
  if (!done.start_event) return 0;
  const auto v2 = driver<EventElapsedTime>(DriverHelper::event_elapsed_time_v2);
  const auto elapsed = v2 ? v2 : driver<EventElapsedTime>(DriverHelper::event_elapsed_time);
  float ms = 0;
  const bool timed = done.event && elapsed && elapsed(&ms, done.start_event, done.event) == CUDA_SUCCESS && ms > 0;
  give_back(done.context, done.start_event);
  done.start_event = nullptr;
  const auto device_ns = timed ? static_cast<std::int64_t>(static_cast<double>(ms) * 1e6) : 0;
  return device_ns > 4 * done.host_ns ? device_ns : 0;
}

void CompletionTracker::give_back(CUcontext context, CUevent event) noexcept {
  if (!event) return;
  std::lock_guard lock(mutex_);
  try {
    free_events_[context].push_back(event);
  } catch (...) {  // out of memory: the event is dropped, not pooled
  }
}

CUevent CompletionTracker::record_start(CUcontext context, const Operation& op) noexcept {
  Pending probe;
  probe.context = context;
  probe.per_thread = op.per_thread;
  record(probe, op.stream);
  return probe.event;
}

bool CompletionTracker::poll_streams() noexcept {
  const auto query = driver<EventQuery>(DriverHelper::event_query);
  const std::vector<Ending> ending = ending_contexts();
  bool any = false;
  for (auto it = by_stream_.begin(); it != by_stream_.end() && !abandoned_.load(std::memory_order_relaxed);) {
    auto& queue = it->second;
    while (!queue.empty()) {
      // A covered op is done when the first event after it on its stream is.
      const auto decider = std::find_if(queue.begin(), queue.end(), [](const Pending& p) { return !p.covered; });
      if (decider == queue.end()) break;  // its event is still to be recorded
      // Not while its context is being destroyed: after, it is done (context_ended) or still there.
      if (decider->event && is_ending(ending, *decider)) break;
      const CUresult state = decider->event && query ? query(decider->event) : CUDA_SUCCESS;
      if (state == CUDA_ERROR_NOT_READY) break;
      const std::int64_t now = ipc::monotonic_ns();
      // One event decided several ops, it was recorded late, or there was none to wait for: the
      // times do not time this op alone. A decider with a start event of its own is still timed
      // alone: the ops before it that it decides were called before that event was recorded, when
      // one thread issues the stream's work (another thread's op called between the two records
      // would be counted in, as it would be for any timed call). (The ops spent on credit before a
      // timed one share its event when they are recorded in the same turn, and left it coarse.)
      const bool coarse = (decider != queue.begin() && !decider->start_event) || !decider->event || decider->deferred;
      const std::int64_t device_ns = !coarse && state == CUDA_SUCCESS ? time_on_device(*decider) : 0;
      for (auto done = queue.begin(); done != std::next(decider); ++done) {
        const bool alone = !coarse && done == decider;
        report(*done, now, !alone, alone ? device_ns : 0);
        if (done->start_event && state == CUDA_SUCCESS) give_back(done->context, done->start_event);
      }
      if (decider->event && state == CUDA_SUCCESS) {
        std::lock_guard lock(mutex_);
        try {
          free_events_[decider->context].push_back(decider->event);
        } catch (...) {  // out of memory: the event is dropped, not pooled
        }
      }  // an event the driver no longer knows (its context destroyed) is dropped
      queue.erase(queue.begin(), std::next(decider));
      any = true;
    }
    if (!queue.empty()) {
      ++it;
      continue;
    }
    // A thread's per-thread default stream has a key of its own, never given again: its end time is
    // dropped with its last op, or a server starting a thread per request grew by one entry each
    // (a review: 60 MB per million threads). A later op on it starts from its post time.
    if (it->first.second & kPerThreadStreamKeyBit) {
      std::lock_guard lock(report_mutex_);
      last_end_ns_.erase(it->first);
    }
    it = by_stream_.erase(it);
  }
  return any;
}

void CompletionTracker::run() noexcept {
  struct Ended {
    std::atomic<bool>& flag;
    ~Ended() { flag.store(true); }
  } ended{ended_};
  // Our event calls must not invalidate a graph capture the program runs on another thread in the
  // default (global) mode: this thread makes potentially unsafe calls only in relaxed mode.
  if (const auto exchange = driver<ExchangeCaptureMode>(DriverHelper::thread_exchange_stream_capture_mode)) {
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_RELAXED;
    exchange(&mode);
  }
  auto sleep = kFirstPollSleep;
  std::vector<Pending> batch;
  for (;;) {
    bool stopped = false;
    {
      std::unique_lock lock(mutex_);
      for (;;) {
        // Only the idle wait is woken by track(); a timed one ends by itself (or at a nudge).
        const bool idle = by_stream_.empty();
        if (stopping_ || (idle ? !incoming_.empty() : nudged_)) break;
        idle_ = idle;
        const std::uint32_t ticket = waker_.ticket();
        lock.unlock();
        waker_.wait(ticket, idle ? std::chrono::nanoseconds(kIdleWait) : std::chrono::nanoseconds(sleep));
        lock.lock();
        idle_ = false;
        if (!idle) break;
      }
      if (nudged_) sleep = kFirstPollSleep;
      nudged_ = false;
      stopped = stopping_;
      if (!incoming_.empty()) sleep = kFirstPollSleep;
    }
    if (stopped) {
      final_reports();
      return;
    }
    try {
      // The whole turn: a context ender then finds every op of its context in incoming_ or by_stream_,
      // and none is recorded or queried while it ends.
      std::lock_guard poll_turn(poll_mutex_);
      {
        // Taken before the batch: a destroyer waiting on it then finds nothing of ours unrecorded.
        std::lock_guard turn(record_mutex_);
        {
          std::lock_guard lock(mutex_);
          batch.swap(incoming_);
        }
        record_deferred(batch);
      }
      for (Pending& pending : batch) by_stream_[{pending.context, pending.stream}].push_back(std::move(pending));
      batch.clear();
      sleep = poll_streams() ? kFirstPollSleep : std::min(sleep * 2, kLongestPollSleep);
    } catch (...) {  // out of memory: those completions are lost
      batch.clear();
    }
  }
}

}  // namespace gpuqos::intercept
