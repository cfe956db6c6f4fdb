// OpsWaiter: the per-client thread that sleeps on the ops ring and hands ops to the loop.
#include "gpuqos/scheduler/ops_waiter.h"

#include <unistd.h>

#include <chrono>
#include <cstdint>

#include "gpuqos/ipc/clock.h"

namespace gpuqos::scheduler {

OpsWaiter::OpsWaiter(ipc::OpsRing& ring, int wake_fd) : ring_(ring), wake_fd_(wake_fd) {
  thread_ = std::thread([this] { run(); });
}

std::vector<ArrivedOp> OpsWaiter::take(std::size_t most) {
  std::vector<ArrivedOp> ops;
  bool left = false;
  {
    std::lock_guard lock(mutex_);
    const auto end = queue_.begin() + static_cast<std::ptrdiff_t>(std::min(most, queue_.size()));
    ops.assign(queue_.begin(), end);
    queue_.erase(queue_.begin(), end);
    left = !queue_.empty();
  }
  space_.notify_one();
  if (left) signal_loop();  // the rest go in the loop's next pass, not at its next tick
  return ops;
}

void OpsWaiter::stop() {
  {
    std::lock_guard lock(mutex_);  // so the thread cannot miss the notification between its check and its wait
    stopping_.store(true, std::memory_order_seq_cst);
  }
  space_.notify_one();
  // The loop joins: a join that waited out the thread's sleep held it up to kSleepNs a client, and
  // a review's 200 old-protocol clients, killed together, stalled it 538 ms (every job fell open).
  ring_.wake_consumer();
  if (thread_.joinable()) thread_.join();
}

void OpsWaiter::signal_loop() const {
  const std::uint64_t one = 1;
  [[maybe_unused]] ssize_t written = ::write(wake_fd_, &one, sizeof one);  // EAGAIN: already signalled
}

void OpsWaiter::run() {
  constexpr std::size_t kBatchOps = 256;
  std::vector<ArrivedOp> batch;
  while (!stopping_.load(std::memory_order_acquire)) {
    {
      std::unique_lock lock(mutex_);
      // Leave ops in the ring while the loop is behind (the client then sees backpressure).
      space_.wait_for(lock, std::chrono::nanoseconds(kSleepNs), [this] {
        return queue_.size() < kMaxQueuedOps || stopping_.load(std::memory_order_acquire);
      });
      if (queue_.size() >= kMaxQueuedOps) continue;
    }
    batch.clear();
    ipc::OpDescriptor op;
    while (batch.size() < kBatchOps && ring_.try_pop(op)) batch.push_back(ArrivedOp{op, ipc::monotonic_ns()});
    if (!batch.empty()) {
      {
        std::lock_guard lock(mutex_);
        queue_.insert(queue_.end(), batch.begin(), batch.end());
      }
      signal_loop();
      continue;
    }
    if (ring_.corrupted()) {
      corrupted_.store(true, std::memory_order_release);
      signal_loop();
      return;
    }
    ring_.wait_for_items(kSleepNs, stopping_);
  }
}

}  // namespace gpuqos::scheduler
