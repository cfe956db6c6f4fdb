// futex wait/wake on a 32-bit word that lives in a MAP_SHARED segment used by two processes.
//
// The shared (non-PRIVATE) futex operations are used: the kernel keys the word by its page, so a
// sleeper in one process is woken by the other. Neither function throws, exits or blocks without
// a bound unless the caller asks for it (the shim never does).
#pragma once

#include <atomic>
#include <cstdint>

namespace gpuqos::ipc {

static_assert(sizeof(std::atomic<std::uint32_t>) == sizeof(std::uint32_t) &&
                  std::atomic<std::uint32_t>::is_always_lock_free,
              "a futex word must be a plain lock-free 32-bit integer");

enum class FutexWaitResult {
  woken,          // woken by futex_wake, or spuriously: re-check the condition
  value_changed,  // *word != expected when the call started
  timed_out,
  failed,         // an unexpected errno (a bad address); treat as timed out
};

// Sleeps while *word == expected, at most timeout_ns (< 0: no bound). EINTR is retried with the
// time that is left. Call only after re-checking the condition the word guards.
FutexWaitResult futex_wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                           std::int64_t timeout_ns) noexcept;

// Wakes up to `count` sleepers on word; returns how many were woken (0 on failure).
int futex_wake(std::atomic<std::uint32_t>* word, int count) noexcept;

// The futex operations a ring uses, as a type so tests can inject a counting double.
struct SystemFutex {
  static FutexWaitResult wait(std::atomic<std::uint32_t>* word, std::uint32_t expected,
                              std::int64_t timeout_ns) noexcept {
    return futex_wait(word, expected, timeout_ns);
  }
  static int wake(std::atomic<std::uint32_t>* word, int count) noexcept { return futex_wake(word, count); }
};

}  // namespace gpuqos::ipc
