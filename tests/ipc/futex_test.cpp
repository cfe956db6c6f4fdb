// Tests of futex_wait / futex_wake on a word in ordinary memory (the shared ops work there too).
#include "gpuqos/ipc/futex.h"

#include <gtest/gtest.h>

#include <atomic>
#include <thread>

namespace gpuqos::ipc {
namespace {

TEST(Futex, WaitReturnsAtOnceWhenTheValueDiffers) {
  std::atomic<std::uint32_t> word{5};
  EXPECT_EQ(futex_wait(&word, 4, 10'000'000'000), FutexWaitResult::value_changed);
}

TEST(Futex, WaitTimesOut) {
  std::atomic<std::uint32_t> word{0};
  EXPECT_EQ(futex_wait(&word, 0, 1'000'000), FutexWaitResult::timed_out);
  EXPECT_EQ(futex_wait(&word, 0, 0), FutexWaitResult::timed_out);
}

TEST(Futex, WakeWithoutSleepersWakesNobody) {
  std::atomic<std::uint32_t> word{0};
  EXPECT_EQ(futex_wake(&word, 1), 0);
}

TEST(Futex, WakeReleasesASleeper) {
  std::atomic<std::uint32_t> word{0};
  std::atomic<FutexWaitResult> result{FutexWaitResult::failed};
  std::atomic<bool> done{false};
  std::thread sleeper([&] {
    while (word.load() == 0) result = futex_wait(&word, 0, 20'000'000'000);
    done = true;
  });
  int woken = 0;
  while (woken == 0 && !done) {  // retry until the sleeper is in the kernel
    std::this_thread::yield();
    if (futex_wake(&word, 1) == 1) woken = 1;
  }
  word = 1;
  futex_wake(&word, 1);
  sleeper.join();
  EXPECT_EQ(woken, 1);
  EXPECT_NE(result.load(), FutexWaitResult::timed_out);
}

}  // namespace
}  // namespace gpuqos::ipc
