// Tests of the SIGBUS guard: a segment truncated by the other side under a daemon's guarded mapping
// reads as zeros and is flagged, and a fault anywhere else still kills the process as before.
#include "gpuqos/ipc/bus_guard.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <string>

#include "gpuqos/ipc/segment.h"

namespace gpuqos::ipc {
namespace {

std::string unique_name(const char* what) {
  static std::atomic<int> counter{0};
  return std::string("/gpuqos-test-bus-") + what + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
}

// Truncates a named shm object the way a hostile client could (it owns the file).
void truncate_shm(const std::string& name, off_t bytes) {
  const int fd = ::shm_open(name.c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0) << name;
  ASSERT_EQ(::ftruncate(fd, bytes), 0);
  ::close(fd);
}

TEST(BusGuard, TruncatedSegmentReadsAsZerosAndIsFlagged) {
  ASSERT_TRUE(install_bus_guard());
  const std::string name = unique_name("trunc");
  auto created = Segment::create(name, static_cast<std::uint32_t>(::geteuid()));
  ASSERT_TRUE(created) << created.error();
  Segment segment = std::move(created.value());
  ASSERT_TRUE(segment.ops().try_push(OpDescriptor{.seq = 1}));
  EXPECT_FALSE(segment.faulted());

  truncate_shm(name, 0);
  OpDescriptor op{};
  EXPECT_FALSE(segment.ops().try_pop(op));  // would have been SIGBUS: now an empty ring of zeros
  EXPECT_TRUE(segment.faulted());
  EXPECT_EQ(segment.header().magic, 0u);
  segment.publish_heartbeat(42);  // writes land in the private zero pages, harmlessly
  Segment::remove(name);
}

TEST(BusGuard, OnlyTheFaultedRangeIsFlagged) {
  ASSERT_TRUE(install_bus_guard());
  const std::string bad_name = unique_name("bad"), good_name = unique_name("good");
  auto bad = Segment::create(bad_name, static_cast<std::uint32_t>(::geteuid()));
  auto good = Segment::create(good_name, static_cast<std::uint32_t>(::geteuid()));
  ASSERT_TRUE(bad && good);
  truncate_shm(bad_name, 4096);  // keeps the header, loses the rest (the grants ring is past it)
  EXPECT_EQ(bad.value().header().magic, kSegmentMagic);
  EXPECT_FALSE(bad.value().faulted());  // nothing past the truncation touched yet
  ASSERT_GT(kGrantsRingOffset, 4096u);
  GrantDescriptor grant{};
  EXPECT_FALSE(bad.value().grants().try_pop(grant));
  EXPECT_TRUE(bad.value().faulted());
  EXPECT_FALSE(good.value().faulted());
  EXPECT_TRUE(good.value().ops().try_push(OpDescriptor{.seq = 1}));
  Segment::remove(bad_name);
  Segment::remove(good_name);
}

TEST(BusGuard, ReleasedRangeIsNoLongerGuarded) {
  int dummy = 0;
  BusGuard first(&dummy, sizeof dummy);
  ASSERT_TRUE(first.guarded());
  BusGuard moved = std::move(first);
  EXPECT_FALSE(first.guarded());
  EXPECT_TRUE(moved.guarded());
  EXPECT_FALSE(moved.faulted());
  EXPECT_FALSE(BusGuard(nullptr, 16).guarded());
}

TEST(BusGuardDeathTest, FaultOutsideGuardedRangesStillKills) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        if (!install_bus_guard()) std::_Exit(3);
        std::FILE* file = std::tmpfile();
        const int fd = ::fileno(file);
        if (::ftruncate(fd, 4096) != 0) std::_Exit(4);
        auto* bytes = static_cast<volatile char*>(::mmap(nullptr, 4096, PROT_READ, MAP_SHARED, fd, 0));
        if (::ftruncate(fd, 0) != 0) std::_Exit(5);
        std::_Exit(bytes[0] == 0 ? 6 : 7);  // SIGBUS: not guarded, so it must still kill
      },
      ::testing::KilledBySignal(SIGBUS), "");
}

}  // namespace
}  // namespace gpuqos::ipc
