// SpscRing: a single-producer single-consumer ring of fixed-size items placed in shared memory.
//
// Follows folly's ProducerConsumerQueue: each side reads its own index relaxed and the other
// side's with acquire, and publishes its own with release. Unlike folly the indices run freely
// (u32, wrapping) and are masked into the slots, so all Capacity slots are usable. The object holds
// no pointers, only indices and slots, so it works at any address in any process.
//
// Contract: exactly one producer thread (try_push, wait_for_space) and one consumer thread
// (try_pop, wait_for_items) at a time, possibly in different processes. The other side may be
// hostile: an index it wrote can be anything, so the ring never reads outside its slots, treats
// an impossible fill level as "nothing to pop" / "full" and reports it through corrupted(); a
// popped item must be validated by the caller (it may have been rewritten while it was copied).
//
// Waiting: a side that finds the ring empty (consumer) or full (producer) may sleep on its futex
// word. It sets the word before sleeping and checks the ring again afterwards; the other side
// wakes it after publishing, and only when the word is set, so a ring whose consumer never sleeps
// costs no system call. A seq_cst fence on both sides (store word / fence / check ring against
// store index / fence / check word) guarantees one of them sees the other.
//
// Atomic is the index type (std::atomic, or a test double); Futex supplies wait/wake (tests count
// the wake-ups).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "gpuqos/ipc/futex.h"

namespace gpuqos::ipc {

inline constexpr std::size_t kCacheLineBytes = 64;

template <typename T, std::uint32_t Capacity, template <typename> class Atomic = std::atomic,
          typename Futex = SystemFutex>
class SpscRing {
  static_assert(Capacity >= 2 && (Capacity & (Capacity - 1)) == 0, "Capacity must be a power of two");
  static_assert(std::is_trivially_copyable_v<T>, "items are copied as bytes between processes");
  static_assert(Atomic<std::uint32_t>::is_always_lock_free, "indices are shared between processes");

 public:
  static constexpr std::uint32_t kCapacity = Capacity;

  SpscRing() noexcept {
    static_assert(std::is_standard_layout_v<SpscRing>, "the ring is a shared-memory layout");
  }
  SpscRing(const SpscRing&) = delete;
  SpscRing& operator=(const SpscRing&) = delete;

  // Producer: appends item unless the ring is full; wakes a sleeping consumer.
  bool try_push(const T& item) noexcept {
    return try_push(item, [this] { Futex::wake(&consumer_waiting_, 1); });
  }

  // Producer, for a consumer that sleeps elsewhere (arm_consumer(): epoll on a doorbell): calls
  // `wake` instead of the futex wake when the consumer announced it sleeps, once per announcement.
  template <class Wake>
  bool try_push(const T& item, Wake&& wake) noexcept {
    const std::uint32_t tail = tail_.load(std::memory_order_relaxed);
    const std::uint32_t head = head_.load(std::memory_order_acquire);
    if (tail - head >= Capacity) return false;  // full (or head is garbage: never overwrite)
    std::memcpy(&slots_[tail & kMask], &item, sizeof(T));
    tail_.store(tail + 1, std::memory_order_release);
    if (claim_sleeper(consumer_waiting_)) wake();
    return true;
  }

  // Consumer that sleeps elsewhere: announces that it is about to sleep, and says whether the ring
  // holds an item already (then it must not sleep). A producer that pushes after this calls its
  // wake (try_push above). disarm_consumer() takes the announcement back once it is awake.
  bool arm_consumer() noexcept {
    consumer_waiting_.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with the fence in claim_sleeper
    return !empty();
  }
  void disarm_consumer() noexcept { consumer_waiting_.store(0, std::memory_order_relaxed); }

  // Consumer: takes the oldest item unless the ring is empty (or corrupted()); wakes a sleeping
  // producer.
  bool try_pop(T& out) noexcept {
    const std::uint32_t head = head_.load(std::memory_order_relaxed);
    const std::uint32_t tail = tail_.load(std::memory_order_acquire);
    const std::uint32_t available = tail - head;
    if (available == 0 || available > Capacity) return false;
    std::memcpy(&out, &slots_[head & kMask], sizeof(T));
    head_.store(head + 1, std::memory_order_release);
    wake_if_sleeping(producer_waiting_);
    return true;
  }

  // Either side; exact only when the other side is idle. Clamped to Capacity.
  std::uint32_t size_approx() const noexcept {
    const std::uint32_t available = tail_.load(std::memory_order_acquire) - head_.load(std::memory_order_acquire);
    return available > Capacity ? Capacity : available;
  }

  // Consumer's view.
  bool empty() const noexcept {
    return head_.load(std::memory_order_relaxed) == tail_.load(std::memory_order_acquire);
  }

  // Producer's view (also true when the consumer's index is garbage).
  bool full() const noexcept {
    return tail_.load(std::memory_order_relaxed) - head_.load(std::memory_order_acquire) >= Capacity;
  }

  // True when the indices describe more than Capacity items: the other process wrote garbage.
  bool corrupted() const noexcept {
    return tail_.load(std::memory_order_acquire) - head_.load(std::memory_order_acquire) > Capacity;
  }

  // Consumer: sleeps until an item is there or timeout_ns (< 0: no bound) passes. Returns whether
  // the ring holds an item. May return false early (a spurious wake-up, or the other process
  // cleared the word): callers loop with their own deadline.
  bool wait_for_items(std::int64_t timeout_ns) noexcept {
    return sleep_until_ready(consumer_waiting_, timeout_ns, [this] { return !empty(); });
  }

  // The same, also ending once `cancel` is set and wake_consumer() called after it.
  bool wait_for_items(std::int64_t timeout_ns, const std::atomic<bool>& cancel) noexcept {
    return sleep_until_ready(consumer_waiting_, timeout_ns,
                             [&] { return !empty() || cancel.load(std::memory_order_relaxed); });
  }

  // Another thread of the consumer's process, after setting the `cancel` of the consumer's wait:
  // ends that wait, whether it sleeps already or is about to. Clearing the word makes a sleep that
  // has not begun return at once; the fences order it with the sleeper's check of `cancel`.
  void wake_consumer() noexcept {
    std::atomic_thread_fence(std::memory_order_seq_cst);
    consumer_waiting_.store(0, std::memory_order_relaxed);
    Futex::wake(&consumer_waiting_, 1);
  }

  // Producer: sleeps until a slot is free, as wait_for_items.
  bool wait_for_space(std::int64_t timeout_ns) noexcept {
    return sleep_until_ready(producer_waiting_, timeout_ns, [this] { return !full(); });
  }

  // For tests and diagnostics: whether a side has announced that it sleeps.
  bool consumer_sleeping() const noexcept { return consumer_waiting_.load(std::memory_order_acquire) != 0; }
  bool producer_sleeping() const noexcept { return producer_waiting_.load(std::memory_order_acquire) != 0; }

 private:
  static constexpr std::uint32_t kMask = Capacity - 1;

  template <class Ready>
  bool sleep_until_ready(std::atomic<std::uint32_t>& word, std::int64_t timeout_ns, Ready ready) noexcept {
    if (ready()) return true;
    word.store(1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with the fence in wake_if_sleeping
    if (!ready()) Futex::wait(&word, 1, timeout_ns);
    word.store(0, std::memory_order_relaxed);
    return ready();
  }

  // Whether the other side announced that it sleeps (the announcement is then taken: one wake each).
  static bool claim_sleeper(std::atomic<std::uint32_t>& word) noexcept {
    std::atomic_thread_fence(std::memory_order_seq_cst);  // pairs with the fences that announce
    return word.load(std::memory_order_relaxed) != 0 && word.exchange(0, std::memory_order_relaxed) != 0;
  }

  void wake_if_sleeping(std::atomic<std::uint32_t>& word) noexcept {
    if (claim_sleeper(word)) Futex::wake(&word, 1);
  }

  // The consumer's cache line: its index and its futex word (the producer reads both per push).
  alignas(kCacheLineBytes) Atomic<std::uint32_t> head_{0};
  std::atomic<std::uint32_t> consumer_waiting_{0};
  // The producer's cache line.
  alignas(kCacheLineBytes) Atomic<std::uint32_t> tail_{0};
  std::atomic<std::uint32_t> producer_waiting_{0};
  alignas(kCacheLineBytes) T slots_[Capacity];
};

}  // namespace gpuqos::ipc
