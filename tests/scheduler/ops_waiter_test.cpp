// OpsWaiter: the ops ring's consumer thread for shims before protocol 1.6.
#include "gpuqos/scheduler/ops_waiter.h"

#include <gtest/gtest.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <chrono>
#include <memory>
#include <string>
#include <thread>
#include <vector>

namespace gpuqos::scheduler {
namespace {

// Whether the loop's eventfd was signalled within `wait_ms`; reading it clears it.
bool signalled(int fd, int wait_ms) {
  pollfd ready{fd, POLLIN, 0};
  if (::poll(&ready, 1, wait_ms) != 1) return false;
  std::uint64_t count = 0;
  return ::read(fd, &count, sizeof count) == sizeof count && count > 0;
}

// The loop takes at most so many ops a pass; those left over wake it again at once, rather than
// waiting for its next tick (10 ms) with nothing new to wake it.
TEST(OpsWaiter, OpsLeftOverByALimitedTakeWakeTheLoopAgain) {
  auto segment = ipc::Segment::create_sealed("/gpuqos-test-waiter", ::getuid());
  ASSERT_TRUE(segment) << segment.error();
  ::close(segment->take_descriptor());
  const int wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_GE(wake, 0);
  {
    OpsWaiter waiter(segment->ops(), wake);
    for (std::uint64_t seq = 1; seq <= 300; ++seq) {
      ipc::OpDescriptor op{};
      op.seq = seq;
      op.kind = ipc::OpKind::sync;
      ASSERT_TRUE(segment->ops().try_push(op));
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!segment->ops().empty() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    ASSERT_TRUE(segment->ops().empty()) << "the waiter popped them";
    waiter.stop();  // its thread joined: every op it popped is in its queue, every signal made
    ASSERT_TRUE(signalled(wake, 0)) << "it woke the loop for them";
    const std::vector<ArrivedOp> first = waiter.take(256);
    ASSERT_EQ(first.size(), 256u);
    EXPECT_EQ(first.front().op.seq, 1u);
    EXPECT_TRUE(signalled(wake, 0)) << "44 left: the loop is woken for them";
    const std::vector<ArrivedOp> rest = waiter.take(256);
    ASSERT_EQ(rest.size(), 44u);
    EXPECT_EQ(rest.front().op.seq, 257u);
    EXPECT_FALSE(signalled(wake, 0)) << "none left: no wake";
  }
  ::close(wake);
}

// gpuqosd's loop stops a departed client's waiter (joins its thread). Waiting out its 10-ms sleep
// there, 200 clients gone together held the loop 538 ms in a review, and every job fell open.
// The sleep is woken: stopping 50 sleeping waiters takes far less than their sleeps (500 ms).
TEST(OpsWaiter, StoppingASleepingWaiterDoesNotWaitOutItsSleep) {
  constexpr int kWaiters = 50;
  std::vector<ipc::Segment> segments;
  for (int i = 0; i < kWaiters; ++i) {
    auto segment = ipc::Segment::create_sealed("/gpuqos-test-waiter-" + std::to_string(i), ::getuid());
    ASSERT_TRUE(segment) << segment.error();
    ::close(segment->take_descriptor());
    segments.push_back(std::move(segment).value());
  }
  const int wake = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  ASSERT_GE(wake, 0);
  std::vector<std::unique_ptr<OpsWaiter>> waiters;
  for (ipc::Segment& segment : segments) waiters.push_back(std::make_unique<OpsWaiter>(segment.ops(), wake));
  for (ipc::Segment& segment : segments) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
    while (!segment.ops().consumer_sleeping() && std::chrono::steady_clock::now() < deadline) std::this_thread::yield();
    ASSERT_TRUE(segment.ops().consumer_sleeping());
  }
  const auto start = std::chrono::steady_clock::now();
  for (auto& waiter : waiters) waiter->stop();
  const auto took = std::chrono::steady_clock::now() - start;
  EXPECT_LT(took, std::chrono::milliseconds(150)) << "each stop waited for its thread's sleep to end";
  waiters.clear();
  ::close(wake);
}

}  // namespace
}  // namespace gpuqos::scheduler
