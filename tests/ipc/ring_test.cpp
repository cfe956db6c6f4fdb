// Tests of SpscRing: single-thread semantics, a two-thread stress, the memory orderings it uses
// (through a counting atomic) and its sleep/wake protocol (through a counting futex).
#include "gpuqos/ipc/ring.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <thread>

namespace gpuqos::ipc {
namespace {

using namespace std::chrono_literals;

// Sets both indices directly, as a (hostile) other process could. head_ is the first member,
// tail_ the first of the second cache line.
template <class Ring>
void set_indices(Ring& ring, std::uint32_t head, std::uint32_t tail) {
  auto* bytes = reinterpret_cast<unsigned char*>(&ring);
  std::memcpy(bytes, &head, sizeof head);
  std::memcpy(bytes + kCacheLineBytes, &tail, sizeof tail);
}

TEST(SpscRing, StartsEmpty) {
  SpscRing<std::uint64_t, 8> ring;
  std::uint64_t out = 0;
  EXPECT_TRUE(ring.empty());
  EXPECT_FALSE(ring.full());
  EXPECT_EQ(ring.size_approx(), 0u);
  EXPECT_FALSE(ring.try_pop(out));
}

TEST(SpscRing, UsesEverySlotThenRefusesAndKeepsOrder) {
  SpscRing<std::uint64_t, 8> ring;
  for (std::uint64_t i = 0; i < 8; ++i) ASSERT_TRUE(ring.try_push(i));
  EXPECT_TRUE(ring.full());
  EXPECT_EQ(ring.size_approx(), 8u);
  EXPECT_FALSE(ring.try_push(99));
  for (std::uint64_t i = 0; i < 8; ++i) {
    std::uint64_t out = 0;
    ASSERT_TRUE(ring.try_pop(out));
    EXPECT_EQ(out, i);
  }
  EXPECT_TRUE(ring.empty());
}

TEST(SpscRing, WrapsAroundWithVaryingFill) {
  SpscRing<std::uint64_t, 4> ring;
  std::uint64_t next_push = 0, next_pop = 0;
  for (int round = 0; round < 1000; ++round) {
    int pushes = 1 + round % 4;
    for (int i = 0; i < pushes && ring.try_push(next_push); ++i) ++next_push;
    int pops = 1 + (round * 7) % 4;
    std::uint64_t out = 0;
    for (int i = 0; i < pops && ring.try_pop(out); ++i) ASSERT_EQ(out, next_pop++);
    ASSERT_EQ(ring.size_approx(), next_push - next_pop);
  }
  EXPECT_GT(next_pop, 1000u);
}

TEST(SpscRing, IndicesWrapPastTheEndOfUint32) {
  SpscRing<std::uint64_t, 8> ring;
  set_indices(ring, 0xfffffffcu, 0xfffffffcu);
  for (std::uint64_t i = 0; i < 100; ++i) {
    ASSERT_TRUE(ring.try_push(i));
    ASSERT_TRUE(ring.try_push(i + 1000));
    std::uint64_t out = 0;
    ASSERT_TRUE(ring.try_pop(out));
    ASSERT_EQ(out, i);
    ASSERT_TRUE(ring.try_pop(out));
    ASSERT_EQ(out, i + 1000);
  }
  EXPECT_TRUE(ring.empty());
}

TEST(SpscRing, GarbageIndicesNeitherPopNorOverwrite) {
  SpscRing<std::uint64_t, 8> ring;
  set_indices(ring, 5, 5 + 9);  // nine items in an eight-slot ring: impossible
  std::uint64_t out = 0;
  EXPECT_TRUE(ring.corrupted());
  EXPECT_FALSE(ring.try_pop(out));
  EXPECT_FALSE(ring.try_push(1));
  EXPECT_EQ(ring.size_approx(), 8u);
  set_indices(ring, 100, 3);  // consumer index ahead of the producer's
  EXPECT_TRUE(ring.corrupted());
  EXPECT_FALSE(ring.try_push(1));
  EXPECT_FALSE(ring.try_pop(out));
}

TEST(SpscRing, TwoThreadStressKeepsOrderAndLosesNothing) {
  constexpr std::uint64_t kItems = 1'000'000;
  auto ring = std::make_unique<SpscRing<std::uint64_t, 1024>>();
  std::thread producer([&] {
    for (std::uint64_t i = 1; i <= kItems; ++i) {
      while (!ring->try_push(i)) std::this_thread::yield();
    }
  });
  std::uint64_t expected = 1, out = 0, mismatches = 0;
  while (expected <= kItems) {
    if (!ring->try_pop(out)) {
      std::this_thread::yield();
      continue;
    }
    mismatches += out != expected;
    ++expected;
  }
  producer.join();
  EXPECT_EQ(mismatches, 0u);
  EXPECT_TRUE(ring->empty());
}

// --- memory orderings, through an atomic that counts them ---

struct OrderCounts {
  std::array<int, 6> loads{};
  std::array<int, 6> stores{};
  int load(std::memory_order order) const { return loads[static_cast<int>(order)]; }
  int store(std::memory_order order) const { return stores[static_cast<int>(order)]; }
  int total() const {
    int sum = 0;
    for (int i = 0; i < 6; ++i) sum += loads[i] + stores[i];
    return sum;
  }
};
OrderCounts g_order_counts;  // single-threaded tests only

template <typename U>
class CountingAtomic {
 public:
  static constexpr bool is_always_lock_free = std::atomic<U>::is_always_lock_free;
  constexpr CountingAtomic(U value) noexcept : value_(value) {}  // NOLINT(google-explicit-constructor)
  U load(std::memory_order order) const noexcept {
    ++g_order_counts.loads[static_cast<int>(order)];
    return value_.load(order);
  }
  void store(U value, std::memory_order order) noexcept {
    ++g_order_counts.stores[static_cast<int>(order)];
    value_.store(value, order);
  }

 private:
  std::atomic<U> value_;
};

TEST(SpscRingOrderings, PushReadsOwnIndexRelaxedOtherAcquireAndPublishesRelease) {
  SpscRing<std::uint64_t, 8, CountingAtomic> ring;
  g_order_counts = {};
  ASSERT_TRUE(ring.try_push(7));
  EXPECT_EQ(g_order_counts.load(std::memory_order_relaxed), 1);  // own tail
  EXPECT_EQ(g_order_counts.load(std::memory_order_acquire), 1);  // consumer's head
  EXPECT_EQ(g_order_counts.store(std::memory_order_release), 1);  // new tail
  EXPECT_EQ(g_order_counts.total(), 3);
}

TEST(SpscRingOrderings, PopReadsOwnIndexRelaxedOtherAcquireAndPublishesRelease) {
  SpscRing<std::uint64_t, 8, CountingAtomic> ring;
  ASSERT_TRUE(ring.try_push(7));
  g_order_counts = {};
  std::uint64_t out = 0;
  ASSERT_TRUE(ring.try_pop(out));
  EXPECT_EQ(out, 7u);
  EXPECT_EQ(g_order_counts.load(std::memory_order_relaxed), 1);
  EXPECT_EQ(g_order_counts.load(std::memory_order_acquire), 1);
  EXPECT_EQ(g_order_counts.store(std::memory_order_release), 1);
  EXPECT_EQ(g_order_counts.total(), 3);
}

TEST(SpscRingOrderings, FailedPushAndPopPublishNothing) {
  SpscRing<std::uint64_t, 2, CountingAtomic> ring;
  std::uint64_t out = 0;
  g_order_counts = {};
  EXPECT_FALSE(ring.try_pop(out));
  ASSERT_TRUE(ring.try_push(1));
  ASSERT_TRUE(ring.try_push(2));
  g_order_counts = {};
  EXPECT_FALSE(ring.try_push(3));
  EXPECT_EQ(g_order_counts.store(std::memory_order_release), 0);
  EXPECT_EQ(g_order_counts.load(std::memory_order_seq_cst), 0);
}

// --- sleeping and waking, through a futex that counts its calls ---

struct CountingFutex {
  static inline std::atomic<int> waits{0};
  static inline std::atomic<int> wakes{0};
  static inline std::atomic<FutexWaitResult> last_wait{FutexWaitResult::failed};
  static void reset() {
    waits = 0;
    wakes = 0;
    last_wait = FutexWaitResult::failed;
  }
  static FutexWaitResult wait(std::atomic<std::uint32_t>* word, std::uint32_t expected, std::int64_t timeout_ns) noexcept {
    ++waits;
    FutexWaitResult result = futex_wait(word, expected, timeout_ns);
    last_wait = result;
    return result;
  }
  static int wake(std::atomic<std::uint32_t>* word, int count) noexcept {
    ++wakes;
    return futex_wake(word, count);
  }
};

using WaitRing = SpscRing<std::uint64_t, 4, std::atomic, CountingFutex>;
constexpr std::int64_t kLongWaitNs = 20'000'000'000;  // a bound that is never reached when it works

TEST(SpscRingWaiting, NoWakeSyscallWhenNobodySleeps) {
  WaitRing ring;
  CountingFutex::reset();
  std::uint64_t out = 0;
  for (std::uint64_t i = 0; i < 10'000; ++i) {
    ASSERT_TRUE(ring.try_push(i));
    ASSERT_TRUE(ring.try_pop(out));
  }
  EXPECT_EQ(CountingFutex::wakes.load(), 0);
  EXPECT_EQ(CountingFutex::waits.load(), 0);
}

TEST(SpscRingWaiting, WaitWithItemsReturnsAtOnceWithoutSleeping) {
  WaitRing ring;
  CountingFutex::reset();
  ASSERT_TRUE(ring.try_push(1));
  EXPECT_TRUE(ring.wait_for_items(kLongWaitNs));
  EXPECT_EQ(CountingFutex::waits.load(), 0);
}

TEST(SpscRingWaiting, WaitOnEmptyRingTimesOutAndClearsItsFlag) {
  WaitRing ring;
  CountingFutex::reset();
  EXPECT_FALSE(ring.wait_for_items(1'000'000));
  EXPECT_EQ(CountingFutex::last_wait.load(), FutexWaitResult::timed_out);
  EXPECT_FALSE(ring.consumer_sleeping());
  ASSERT_TRUE(ring.try_push(1));
  EXPECT_EQ(CountingFutex::wakes.load(), 0);  // the flag was cleared: no wake for nobody
}

TEST(SpscRingWaiting, SleepingConsumerIsWokenByOnePush) {
  WaitRing ring;
  CountingFutex::reset();
  std::atomic<bool> got_item{false};
  std::thread consumer([&] { got_item = ring.wait_for_items(kLongWaitNs); });
  while (!ring.consumer_sleeping()) std::this_thread::yield();
  std::this_thread::sleep_for(5ms);  // let it reach the kernel (either way must work)
  ASSERT_TRUE(ring.try_push(42));
  ASSERT_TRUE(ring.try_push(43));  // the flag is already cleared: no second wake
  consumer.join();
  EXPECT_TRUE(got_item.load());
  EXPECT_NE(CountingFutex::last_wait.load(), FutexWaitResult::timed_out);
  EXPECT_EQ(CountingFutex::wakes.load(), 1);
}

// A consumer that sleeps elsewhere (gpuqosd's loop in epoll, on the ring's doorbell): it arms the
// ring before it sleeps, and the first push after that calls the producer's wake, once, with no
// futex call; a push while it is disarmed (awake) calls nothing. An arm that finds an item says so,
// so the consumer does not sleep on it.
TEST(SpscRingWaiting, AConsumerThatSleepsElsewhereIsRungOncePerArmingAndNeverMissesAnItem) {
  WaitRing ring;
  CountingFutex::reset();
  int rung = 0;
  const auto ring_it = [&] { ++rung; };
  std::uint64_t out = 0;
  EXPECT_FALSE(ring.arm_consumer());  // empty: may sleep
  ASSERT_TRUE(ring.try_push(1, ring_it));
  ASSERT_TRUE(ring.try_push(2, ring_it));
  EXPECT_EQ(rung, 1);
  EXPECT_TRUE(ring.arm_consumer()) << "items are there: the consumer must not sleep";
  ring.disarm_consumer();
  ASSERT_TRUE(ring.try_push(3, ring_it));
  EXPECT_EQ(rung, 1) << "disarmed: nobody to ring";
  while (ring.try_pop(out)) {
  }
  EXPECT_FALSE(ring.arm_consumer());
  ASSERT_TRUE(ring.try_push(4, ring_it));
  EXPECT_EQ(rung, 2);
  EXPECT_EQ(CountingFutex::wakes.load(), 0);
  EXPECT_EQ(CountingFutex::waits.load(), 0);

  // Across threads: a consumer that arms, re-checks and then waits on an eventfd-like flag never
  // misses an item (Dekker's pairing of the two fences).
  while (ring.try_pop(out)) {
  }
  ring.disarm_consumer();
  std::atomic<int> doorbell{0};
  constexpr std::uint64_t kItems = 100'000;
  std::thread consumer([&] {
    std::uint64_t next = 0, item = 0;
    while (next < kItems) {
      if (ring.try_pop(item)) {
        EXPECT_EQ(item, next);
        ++next;
        continue;
      }
      if (ring.arm_consumer()) {
        ring.disarm_consumer();
        continue;
      }
      while (doorbell.exchange(0) == 0) std::this_thread::yield();  // "epoll_wait"
      ring.disarm_consumer();
    }
  });
  for (std::uint64_t i = 0; i < kItems;) {
    if (ring.try_push(i, [&] { doorbell.store(1); })) ++i;
  }
  consumer.join();
}

TEST(SpscRingWaiting, SleepingProducerIsWokenByAPop) {
  WaitRing ring;
  for (std::uint64_t i = 0; i < WaitRing::kCapacity; ++i) ASSERT_TRUE(ring.try_push(i));
  CountingFutex::reset();
  std::atomic<bool> got_space{false};
  std::thread producer([&] { got_space = ring.wait_for_space(kLongWaitNs); });
  while (!ring.producer_sleeping()) std::this_thread::yield();
  std::uint64_t out = 0;
  ASSERT_TRUE(ring.try_pop(out));
  producer.join();
  EXPECT_TRUE(got_space.load());
  EXPECT_NE(CountingFutex::last_wait.load(), FutexWaitResult::timed_out);
  EXPECT_EQ(CountingFutex::wakes.load(), 1);
}

TEST(SpscRingWaiting, SleepingConsumerNeverMissesAWakeUp) {
  // Many short sleeps racing with pushes: a lost wake-up would show as a timed-out wait.
  constexpr std::uint64_t kItems = 20'000;
  WaitRing ring;
  CountingFutex::reset();
  std::thread producer([&] {
    for (std::uint64_t i = 1; i <= kItems; ++i) {
      while (!ring.try_push(i)) ring.wait_for_space(kLongWaitNs);
    }
  });
  std::uint64_t expected = 1, out = 0;
  while (expected <= kItems) {
    if (ring.try_pop(out)) {
      ASSERT_EQ(out, expected++);
    } else {
      ring.wait_for_items(kLongWaitNs);
    }
  }
  producer.join();
  EXPECT_NE(CountingFutex::last_wait.load(), FutexWaitResult::timed_out);
}

}  // namespace
}  // namespace gpuqos::ipc
