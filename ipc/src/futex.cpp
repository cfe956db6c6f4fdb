// futex_wait/futex_wake with the shared futex operations, EINTR and EAGAIN handled.
#include "gpuqos/ipc/futex.h"

#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <ctime>

#include "gpuqos/ipc/clock.h"

namespace gpuqos::ipc {
namespace {

constexpr std::int64_t kNsPerSecond = 1'000'000'000;

timespec to_timespec(std::int64_t ns) noexcept {
  return timespec{static_cast<time_t>(ns / kNsPerSecond), static_cast<long>(ns % kNsPerSecond)};
}

std::uint32_t* raw_word(std::atomic<std::uint32_t>* word) noexcept {
  return reinterpret_cast<std::uint32_t*>(word);
}

}  // namespace

FutexWaitResult futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                           std::int64_t timeout_ns) noexcept {
  const bool bounded = timeout_ns >= 0;
  const std::int64_t deadline_ns = bounded ? monotonic_ns() + timeout_ns : 0;
  for (;;) {
    timespec relative{};
    if (bounded) {
      std::int64_t left_ns = deadline_ns - monotonic_ns();
      if (left_ns <= 0) return FutexWaitResult::timed_out;
      relative = to_timespec(left_ns);
    }
    // FUTEX_WAIT (not FUTEX_WAIT_PRIVATE): the word is shared with another process.
    long rc = syscall(SYS_futex, raw_word(word), FUTEX_WAIT, expected, bounded ? &relative : nullptr,
                      nullptr, 0);
    if (rc == 0) return FutexWaitResult::woken;
    switch (errno) {
      case EINTR: continue;  // a signal: sleep again for what is left
      case EAGAIN: return FutexWaitResult::value_changed;
      case ETIMEDOUT: return FutexWaitResult::timed_out;
      default: return FutexWaitResult::failed;
    }
  }
}

int futex_wake(std::atomic<std::uint32_t>* word, int count) noexcept {
  long rc = syscall(SYS_futex, raw_word(word), FUTEX_WAKE, count, nullptr, nullptr, 0);
  return rc < 0 ? 0 : static_cast<int>(rc);
}

}  // namespace gpuqos::ipc
