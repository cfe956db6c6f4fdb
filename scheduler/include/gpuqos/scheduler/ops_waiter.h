// OpsWaiter: one thread per client that is the ops ring's consumer. It sleeps in
// wait_for_items (a futex, no polling), pops what arrived into a mutex-protected queue and wakes
// the daemon's loop through an eventfd.
//
// Why this thread pops instead of only waiting: SpscRing allows exactly one consumer thread
// (try_pop and wait_for_items) at a time, so a thread that waits while the loop pops would break
// its contract. The loop takes the popped ops with take() and validates them there; nothing here
// looks inside a descriptor.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "gpuqos/ipc/segment.h"

namespace gpuqos::scheduler {

// An op as the waiter popped it, stamped with the daemon's clock: the loop merges the ops of
// all clients by this stamp, so arrival order across clients does not depend on which client's
// queue the loop happens to look at first.
struct ArrivedOp {
  ipc::OpDescriptor op;
  std::int64_t arrived_ns;
};

class OpsWaiter {
 public:
  // The queue holds at most this many ops; beyond it the thread stops popping, so a client that
  // posts faster than the daemon takes finds its ring full, as it would without the thread.
  static constexpr std::size_t kMaxQueuedOps = ipc::kOpsRingCapacity;
  // How long one sleep lasts (stop() wakes it).
  static constexpr std::int64_t kSleepNs = 10'000'000;

  // ring must outlive this object; wake_fd is an eventfd the loop polls.
  OpsWaiter(ipc::OpsRing& ring, int wake_fd);
  ~OpsWaiter() { stop(); }
  OpsWaiter(const OpsWaiter&) = delete;
  OpsWaiter& operator=(const OpsWaiter&) = delete;

  // Loop thread: the oldest `most` popped so far, oldest first. Ops left over stay for the next
  // call, and the loop is woken again for them (else they would wait for its next tick).
  std::vector<ArrivedOp> take(std::size_t most = kMaxQueuedOps);
  // True once the ring's indices were found impossible; the thread has then stopped.
  bool corrupted() const noexcept { return corrupted_.load(std::memory_order_acquire); }
  // Ends the thread at once (its sleep is woken). Afterwards the caller may pop the ring itself.
  void stop();

 private:
  void run();
  void signal_loop() const;

  ipc::OpsRing& ring_;
  int wake_fd_;
  std::mutex mutex_;
  std::condition_variable space_;  // the loop took ops
  std::deque<ArrivedOp> queue_;
  std::atomic<bool> stopping_{false};
  std::atomic<bool> corrupted_{false};
  std::thread thread_;
};

}  // namespace gpuqos::scheduler
