// Tests of Segment: create/open, the header checks that refuse a segment, names, permissions,
// and a real second process (fork) that pushes through the rings.
#include "gpuqos/ipc/segment.h"

#include <gtest/gtest.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <filesystem>
#include <stdexcept>
#include <string_view>
#include <thread>
#include <vector>
#include <boost/interprocess/shared_memory_object.hpp>

#include "gpuqos/ipc/bus_guard.h"
#include "gpuqos/ipc/clock.h"

namespace gpuqos::ipc {
namespace {

// A unique segment name, removed when the test ends, passed or failed.
class ScopedSegmentName {
 public:
  ScopedSegmentName() {
    static std::atomic<int> counter{0};
    name_ = "/gpuqos-test-" + std::to_string(::getpid()) + "-" + std::to_string(counter++);
    Segment::remove(name_);
  }
  ~ScopedSegmentName() { Segment::remove(name_); }
  const std::string& get() const { return name_; }

 private:
  std::string name_;
};

// A forked child, killed and reaped when the test ends however it ends.
class ChildProcess {
 public:
  explicit ChildProcess(pid_t pid) : pid_(pid) {}
  ~ChildProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  // The child's exit status, or -1 if it did not exit normally.
  int wait() {
    int status = 0;
    pid_t reaped = ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return reaped > 0 && WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

 private:
  pid_t pid_;
};

// Throws on failure: GoogleTest reports the exception as the test's failure.
Segment create_or_fail(const std::string& name) {
  auto created = Segment::create(name, ::getuid(), static_cast<std::uint32_t>(::getpid()));
  if (!created) throw std::runtime_error(created.error());
  return std::move(created).value();
}

// Protocol 1.10: a sealed memfd, mapped through the descriptor the daemon passes; nothing in /dev/shm.
TEST(Segment, ASealedSegmentIsMappedThroughItsDescriptor) {
  const std::string name = segment_name(static_cast<std::uint32_t>(::getpid()), 1, 0x5ea1);
  auto daemon = Segment::create_sealed(name, ::getuid(), static_cast<std::uint32_t>(::getpid()));
  ASSERT_TRUE(daemon) << daemon.error();
  EXPECT_FALSE(std::filesystem::exists("/dev/shm" + name));
  const int fd = daemon->take_descriptor();
  ASSERT_GE(fd, 0);
  EXPECT_EQ(daemon->take_descriptor(), -1) << "once";
  EXPECT_EQ(::fcntl(fd, F_GET_SEALS), F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  auto client = Segment::open_passed(fd, name);
  ASSERT_TRUE(client) << client.error();
  ::close(fd);  // the mapping does not need it
  EXPECT_EQ(client->header().client_uid, ::getuid());
  OpDescriptor op{};
  op.seq = 1;
  op.kind = OpKind::sync;
  ASSERT_TRUE(client->ops().try_push(op));
  OpDescriptor popped{};
  ASSERT_TRUE(daemon->ops().try_pop(popped));
  EXPECT_EQ(popped.seq, 1u);
  EXPECT_EQ(Segment::create(name, ::getuid()).ok(), true) << "its name is free in /dev/shm";
  Segment::remove(name);
}

// A sealed segment's name is only a label: removing "its" name must not unlink a named segment
// that has the same one (the daemon removes each client's name when the client goes).
TEST(Segment, OnlyANamedSegmentRemovesItsName) {
  ScopedSegmentName name;
  Segment named = create_or_fail(name.get());
  auto sealed = Segment::create_sealed(name.get(), ::getuid());
  ASSERT_TRUE(sealed) << sealed.error();
  const int fd = sealed->take_descriptor();
  auto passed = Segment::open_passed(fd, name.get());
  ::close(fd);
  ASSERT_TRUE(passed) << passed.error();
  EXPECT_FALSE(sealed->remove_name());
  EXPECT_FALSE(passed->remove_name());
  Segment moved = std::move(sealed.value());
  EXPECT_FALSE(moved.remove_name()) << "a moved sealed segment is still unnamed";
  EXPECT_TRUE(Segment::open(name.get())) << "the named segment is still there";
  auto opened = Segment::open(name.get());
  ASSERT_TRUE(opened) << opened.error();
  EXPECT_TRUE(opened->remove_name());
  EXPECT_FALSE(Segment::open(name.get())) << "removed";
  EXPECT_FALSE(named.remove_name()) << "already gone";
}

// A review: past the SIGBUS guard's table a named segment (its client may truncate it) was mapped
// unguarded, and a truncation then killed gpuqosd. It is refused instead, its name removed; a sealed
// one, which cannot shrink, needs no guard.
TEST(Segment, ANamedSegmentThatCannotBeGuardedIsRefused) {
  std::vector<char> memory(BusGuard::kMaxGuardedRanges);
  std::vector<BusGuard> taken;
  taken.reserve(BusGuard::kMaxGuardedRanges);
  for (std::size_t i = 0; i < BusGuard::kMaxGuardedRanges; ++i) {
    taken.emplace_back(&memory[i], 1);
    if (!taken.back().guarded()) taken.pop_back();  // slots other tests' segments hold
  }
  ASSERT_FALSE(BusGuard(memory.data(), 1).guarded()) << "the table is full";
  ScopedSegmentName name;
  auto named = Segment::create(name.get(), ::getuid());
  ASSERT_FALSE(named);
  EXPECT_NE(named.error().find("segments its clients could truncate are mapped already"), std::string::npos)
      << named.error();
  EXPECT_FALSE(Segment::open(name.get())) << "its name was removed";
  EXPECT_TRUE(Segment::create_sealed(name.get(), ::getuid())) << "a sealed one needs no guard";
  taken.pop_back();
  auto now = Segment::create(name.get(), ::getuid());
  EXPECT_TRUE(now) << "a slot is free again: " << (now ? "" : now.error());
}

// A passed descriptor that is not a sealed segment is refused, so the shim never maps memory that
// can be truncated under it (SIGBUS in the job).
TEST(Segment, APassedDescriptorThatIsNotASealedSegmentIsRefused) {
  const std::string name = "/gpuqos-test-passed";
  EXPECT_NE(Segment::open_passed(-1, name).error().find("not a shared memory file"), std::string::npos);
  int pipe_ends[2];
  ASSERT_EQ(::pipe(pipe_ends), 0);
  EXPECT_NE(Segment::open_passed(pipe_ends[0], name).error().find("not a shared memory file"), std::string::npos);
  ::close(pipe_ends[0]);
  ::close(pipe_ends[1]);
  // A good segment's bytes in a memfd whose size is not sealed.
  auto sealed = Segment::create_sealed(name, ::getuid());
  ASSERT_TRUE(sealed) << sealed.error();
  const int unsealed = ::memfd_create("unsealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(unsealed, 0);
  ASSERT_EQ(::write(unsealed, &sealed->header(), kSegmentBytes), static_cast<ssize_t>(kSegmentBytes));
  EXPECT_NE(Segment::open_passed(unsealed, name).error().find("its size is not sealed"), std::string::npos);
  ASSERT_EQ(::fcntl(unsealed, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  EXPECT_TRUE(Segment::open_passed(unsealed, name)) << "the same, sealed";
  ::close(unsealed);
  // Sealed, but not a segment of ours.
  const int other = ::memfd_create("other", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  ASSERT_GE(other, 0);
  ASSERT_EQ(::ftruncate(other, static_cast<off_t>(kSegmentBytes)), 0);
  ASSERT_EQ(::fcntl(other, F_ADD_SEALS, F_SEAL_SHRINK), 0);
  EXPECT_NE(Segment::open_passed(other, name).error().find("bad magic"), std::string::npos);
  ::close(other);
}

TEST(Segment, CreateThenOpenSharesTheRings) {
  ScopedSegmentName name;
  Segment daemon = create_or_fail(name.get());
  auto client = Segment::open(name.get());
  ASSERT_TRUE(client) << client.error();
  OpDescriptor op{};
  op.seq = 1;
  op.kind = OpKind::sync;
  ASSERT_TRUE(client->ops().try_push(op));
  OpDescriptor popped{};
  ASSERT_TRUE(daemon.ops().try_pop(popped));
  EXPECT_EQ(popped.seq, 1u);
  ASSERT_TRUE(daemon.grants().try_push(GrantDescriptor{1, 0, kGrantNone, 0, 0}));
  GrantDescriptor grant{};
  ASSERT_TRUE(client->grants().try_pop(grant));
  EXPECT_EQ(grant.granted_through_seq, 1u);
}

TEST(Segment, HeaderDescribesTheLayout) {
  ScopedSegmentName name;
  Segment segment = create_or_fail(name.get());
  const SegmentHeader& header = segment.header();
  EXPECT_EQ(header.magic, kSegmentMagic);
  EXPECT_EQ(header.version_major, kSegmentVersionMajor);
  EXPECT_EQ(header.total_bytes, kSegmentBytes);
  EXPECT_EQ(header.ops_ring_offset, kOpsRingOffset);
  EXPECT_EQ(header.grants_ring_offset, kGrantsRingOffset);
  EXPECT_EQ(header.client_pid, static_cast<std::uint32_t>(::getpid()));
  EXPECT_EQ(header.client_uid, ::getuid());
  EXPECT_GT(header.daemon_heartbeat_ns, 0u);
  EXPECT_GE(segment.mapped_bytes(), kSegmentBytes);
}

TEST(Segment, IsPrivateToItsUser) {
  ScopedSegmentName name;
  Segment segment = create_or_fail(name.get());
  struct stat info{};
  ASSERT_EQ(::stat(("/dev/shm" + name.get()).c_str(), &info), 0);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  EXPECT_EQ(info.st_uid, ::getuid());
}

TEST(Segment, RootGivesTheSegmentToTheClientsUser) {
  if (::geteuid() != 0) GTEST_SKIP() << "only root can give a segment away";
  ScopedSegmentName name;
  constexpr std::uint32_t kClientUid = 54321;
  auto created = Segment::create(name.get(), kClientUid);
  ASSERT_TRUE(created) << created.error();
  struct stat info{};
  ASSERT_EQ(::stat(("/dev/shm" + name.get()).c_str(), &info), 0);
  EXPECT_EQ(info.st_uid, kClientUid);
  EXPECT_EQ(info.st_mode & 0777, 0600u);
  EXPECT_EQ(created->header().client_uid, kClientUid);
}

// A client that can open its named segment (root gives it the file; a gpuqosd that is not root
// shares its user) may truncate it while gpuqosd sets it up. A review's client did, with inotify on
// /dev/shm, and the layout was written past a short mapping (SIGSEGV) or before the guard (SIGBUS).
// Here the truncating thread is the creator's own user: it can open the file from its creation on.
TEST(Segment, ASegmentTruncatedWhileBeingSetUpNeverCrashesItsCreator) {
  const std::string prefix = "gpuqos-test-" + std::to_string(::getpid()) + "-race-";
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (!install_bus_guard()) ::_exit(3);
    const int watch = ::inotify_init1(IN_NONBLOCK);
    if (watch < 0 || ::inotify_add_watch(watch, "/dev/shm", IN_CREATE) < 0) ::_exit(4);
    std::atomic<bool> done{false};
    std::thread truncator([&] {
      alignas(inotify_event) char events[4096];
      while (!done.load()) {
        const ssize_t got = ::read(watch, events, sizeof events);
        if (got <= 0) {
          std::this_thread::sleep_for(std::chrono::microseconds(100));
          continue;
        }
        for (char* at = events; at < events + got;) {
          const auto* event = reinterpret_cast<const inotify_event*>(at);
          if (event->len > 0 && std::string_view(event->name).starts_with(prefix)) {
            const int fd = ::open(("/dev/shm/" + std::string(event->name)).c_str(), O_RDWR);
            for (int i = 0; fd >= 0 && i < 2000; ++i) (void)::ftruncate(fd, 4096);
            if (fd >= 0) ::close(fd);
          }
          at += sizeof(inotify_event) + event->len;
        }
      }
    });
    int created = 0, refused = 0;
    for (int i = 0; i < 300; ++i) {
      const std::string name = "/" + prefix + std::to_string(i);
      auto segment = Segment::create(name, ::getuid(), static_cast<std::uint32_t>(::getpid()));
      if (segment) {
        ++created;
        segment->publish_heartbeat(1);  // as gpuqosd writes it next: guarded, whatever the file's size
      } else if (segment.error().find(name) == std::string::npos) {
        ::_exit(5);  // a reason that does not name the segment
      } else {
        ++refused;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
      Segment::remove(name);
    }
    done = true;
    truncator.join();
    std::printf("created %d refused %d\n", created, refused);
    std::fflush(stdout);
    ::_exit(created + refused == 300 ? 0 : 6);
  }
  ChildProcess child(pid);
  EXPECT_EQ(child.wait(), 0) << "the creating process died (-1: by a signal) or a create failed without its name";
  for (const auto& entry : std::filesystem::directory_iterator("/dev/shm")) {
    if (entry.path().filename().string().starts_with(prefix)) std::filesystem::remove(entry.path());
  }
}

TEST(Segment, HeartbeatIsSeenByTheOtherMapping) {
  ScopedSegmentName name;
  Segment daemon = create_or_fail(name.get());
  auto client = Segment::open(name.get());
  ASSERT_TRUE(client) << client.error();
  daemon.publish_heartbeat(123456789);
  EXPECT_EQ(client->daemon_heartbeat_ns(), 123456789u);
}

// A full /dev/shm: creating a segment fails with a reason, and no segment is left behind. Its pages
// used to come at their first write, and a job's shim, or gpuqosd, died of SIGBUS there. The child
// mounts a 1 MiB /dev/shm of its own (a private mount namespace: root) and fills it.
TEST(Segment, CreateOnAFullDevShmFailsWithItsReason) {
  if (::geteuid() != 0) GTEST_SKIP() << "only root can mount a /dev/shm of its own";
  constexpr int kSkip = 77;
  const pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    if (::unshare(CLONE_NEWNS) != 0 || ::mount(nullptr, "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
        ::mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") != 0) {
      ::_exit(kSkip);  // no mount namespaces here (a container without CAP_SYS_ADMIN)
    }
    const int fill = ::open("/dev/shm/fill", O_CREAT | O_WRONLY, 0600);
    std::vector<char> block(64 * 1024, 1);
    while (fill >= 0 && ::write(fill, block.data(), block.size()) > 0) {
    }
    ::close(fill);
    const auto full = Segment::create("/gpuqos-test-full", ::getuid());
    if (full) ::_exit(1);
    if (full.error().find("No space left on device") == std::string::npos ||
        full.error().find("/gpuqos-test-full") == std::string::npos) {
      std::fprintf(stderr, "unexpected: %s\n", full.error().c_str());
      ::_exit(2);
    }
    if (::access("/dev/shm/gpuqos-test-full", F_OK) == 0) ::_exit(3);  // left behind
    ::unlink("/dev/shm/fill");
    if (!Segment::create("/gpuqos-test-full", ::getuid())) ::_exit(4);  // with room, it works
    ::_exit(0);
  }
  ChildProcess child(pid);
  const int code = child.wait();
  if (code == kSkip) GTEST_SKIP() << "cannot mount a private /dev/shm here";
  EXPECT_EQ(code, 0) << "1: created on a full /dev/shm; 2: no reason; 3: left behind; 4: not created with room; "
                        "-1: killed (SIGBUS)";
}

TEST(Segment, CreateRefusesAnExistingName) {
  ScopedSegmentName name;
  Segment first = create_or_fail(name.get());
  auto second = Segment::create(name.get(), ::getuid());
  ASSERT_FALSE(second);
  EXPECT_NE(second.error().find(name.get()), std::string::npos) << second.error();
}

TEST(Segment, OpenOfAMissingSegmentFailsWithItsName) {
  ScopedSegmentName name;
  auto missing = Segment::open(name.get());
  ASSERT_FALSE(missing);
  EXPECT_NE(missing.error().find(name.get()), std::string::npos) << missing.error();
}

TEST(Segment, CreateToAnotherUserFailsCleanlyWhenNotRoot) {
  if (::geteuid() == 0) GTEST_SKIP() << "root may give segments away";
  ScopedSegmentName name;
  auto created = Segment::create(name.get(), ::getuid() + 1);
  ASSERT_FALSE(created);
  EXPECT_NE(created.error().find("root"), std::string::npos) << created.error();
  EXPECT_FALSE(Segment::remove(name.get()));  // nothing left behind
}

TEST(Segment, RefusesBadMagic) {
  ScopedSegmentName name;
  Segment daemon = create_or_fail(name.get());
  daemon.header().magic = 0xdeadbeef;
  auto client = Segment::open(name.get());
  ASSERT_FALSE(client);
  EXPECT_NE(client.error().find("bad magic 0xdeadbeef"), std::string::npos) << client.error();
}

TEST(Segment, RefusesAnotherMajorVersion) {
  ScopedSegmentName name;
  Segment daemon = create_or_fail(name.get());
  daemon.header().version_major = kSegmentVersionMajor + 1;
  auto client = Segment::open(name.get());
  ASSERT_FALSE(client);
  EXPECT_NE(client.error().find("version " + std::to_string(kSegmentVersionMajor + 1)), std::string::npos)
      << client.error();
}

TEST(Segment, AcceptsANewerMinorVersion) {
  ScopedSegmentName name;
  Segment daemon = create_or_fail(name.get());
  daemon.header().version_minor = kSegmentVersionMinor + 3;
  auto client = Segment::open(name.get());
  EXPECT_TRUE(client) << client.error();
}

TEST(Segment, RefusesAnotherLayout) {
  ScopedSegmentName name;
  Segment daemon = create_or_fail(name.get());
  daemon.header().ops_ring_capacity = kOpsRingCapacity * 2;
  auto client = Segment::open(name.get());
  ASSERT_FALSE(client);
  EXPECT_NE(client.error().find("layout"), std::string::npos) << client.error();
}

void truncate_segment(const std::string& name, std::int64_t bytes) {
  namespace bip = boost::interprocess;
  bip::shared_memory_object shm(bip::open_only, name.c_str(), bip::read_write);
  shm.truncate(bytes);
}

TEST(Segment, RefusesASegmentShorterThanItsHeaderSays) {
  ScopedSegmentName name;
  { Segment daemon = create_or_fail(name.get()); }  // unmapped before it shrinks
  truncate_segment(name.get(), static_cast<std::int64_t>(kSegmentBytes / 2));
  auto client = Segment::open(name.get());
  ASSERT_FALSE(client);
  EXPECT_NE(client.error().find("truncated"), std::string::npos) << client.error();
}

TEST(Segment, RefusesASegmentShorterThanAHeader) {
  ScopedSegmentName name;
  { Segment daemon = create_or_fail(name.get()); }
  truncate_segment(name.get(), 16);
  auto client = Segment::open(name.get());
  ASSERT_FALSE(client);
  EXPECT_NE(client.error().find("smaller than its header"), std::string::npos) << client.error();
}

TEST(Segment, NamesAreChecked) {
  EXPECT_EQ(segment_name(4242, 7, 0x1f), "/gpuqos-4242-7-000000000000001f");
  EXPECT_TRUE(check_segment_name(segment_name(4294967295u, 4294967295u, ~std::uint64_t{0})));
  for (const std::string& bad : std::vector<std::string>{"", "/", "gpuqos-1-2", "/a/b", "/a b", "/" + std::string(63, 'x')}) {
    EXPECT_FALSE(check_segment_name(bad)) << '"' << bad << '"';
    auto created = Segment::create(bad, ::getuid());
    EXPECT_FALSE(created) << '"' << bad << '"';
    auto opened = Segment::open(bad);
    EXPECT_FALSE(opened) << '"' << bad << '"';
  }
}

// A named segment created for the test and removed when it ends, passed or failed.
class ScopedSegment {
 public:
  explicit ScopedSegment(std::string name) : name_(std::move(name)) {
    Segment::remove(name_);
    auto created = Segment::create(name_, ::getuid());
    if (!created) throw std::runtime_error(created.error());
  }
  ~ScopedSegment() { Segment::remove(name_); }
  bool exists() const { return static_cast<bool>(Segment::open(name_)); }

 private:
  std::string name_;
};

// The pid of a process that has exited and been reaped.
std::uint32_t a_dead_pid() {
  const pid_t child = ::fork();
  if (child == 0) ::_exit(0);
  if (child < 0) throw std::runtime_error("fork failed");
  ::waitpid(child, nullptr, 0);
  return static_cast<std::uint32_t>(child);
}

// What a SIGKILLed gpuqosd leaves is removed by the next one; a live daemon's segments and names
// that are not gpuqosd's stay.
TEST(Segment, StaleSegmentsOfDeadOrReusedDaemonPidsAreRemoved) {
  const std::uint32_t dead = a_dead_pid();
  const auto self = static_cast<std::uint32_t>(::getpid());
  const auto live = static_cast<std::uint32_t>(::getppid());
  ScopedSegment dead_1(segment_name(dead, 1, 0xabc));
  ScopedSegment dead_2("/gpuqos-" + std::to_string(dead) + "-2");  // named as before the nonce
  ScopedSegment reused(segment_name(self, 77, 1));
  ScopedSegment running(segment_name(live, 4242, 2));
  ScopedSegment other("/gpuqos-test-" + std::to_string(dead) + "-1");
  ScopedSegment not_a_nonce("/gpuqos-" + std::to_string(dead) + "-3-xyz");

  // The dead pid's may be removed by a gpuqosd that a test running alongside starts: only the
  // reused pid's are sure to be this call's.
  const std::vector<std::string> removed = remove_stale_segments(self);
  EXPECT_NE(std::find(removed.begin(), removed.end(), segment_name(self, 77, 1)), removed.end());
  EXPECT_EQ(std::find(removed.begin(), removed.end(), segment_name(live, 4242, 2)), removed.end());
  EXPECT_FALSE(dead_1.exists());
  EXPECT_FALSE(dead_2.exists());
  EXPECT_FALSE(reused.exists());
  EXPECT_TRUE(running.exists());
  EXPECT_TRUE(other.exists());
  EXPECT_TRUE(not_a_nonce.exists());
}

// The child: maps the segment, posts kOps ops (sleeping when the ring is full), then waits for
// the grant of all of them. Exit code 0 on success.
constexpr std::uint64_t kOps = 200'000;
constexpr std::int64_t kChildWaitNs = 2'000'000'000;

// Waits may return early (a timeout, a spurious wake-up) while the parent is descheduled on a
// loaded machine: only an overall deadline counts as the parent having stopped.
int child_main(const std::string& name) {
  auto segment = Segment::open(name);
  if (!segment) return 10;
  const std::int64_t deadline_ns = monotonic_ns() + 60'000'000'000;
  for (std::uint64_t seq = 1; seq <= kOps; ++seq) {
    OpDescriptor op{};
    op.seq = seq;
    op.kind = OpKind::sync;
    op.posted_ns = monotonic_ns();
    while (!segment->ops().try_push(op)) {
      if (monotonic_ns() > deadline_ns) return 11;
      segment->ops().wait_for_space(kChildWaitNs);
    }
  }
  GrantDescriptor grant{};
  while (!segment->grants().try_pop(grant)) {
    if (monotonic_ns() > deadline_ns) return 12;
    segment->grants().wait_for_items(kChildWaitNs);
  }
  return grant.granted_through_seq == kOps ? 0 : 13;
}

TEST(Segment, AnotherProcessPostsAndIsGranted) {
  ScopedSegmentName name;
  Segment daemon = create_or_fail(name.get());
  pid_t pid = ::fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) ::_exit(child_main(name.get()));
  ChildProcess child(pid);

  const std::int64_t deadline_ns = monotonic_ns() + 60'000'000'000;
  std::uint64_t expected = 1;
  OpDescriptor op{};
  while (expected <= kOps && monotonic_ns() < deadline_ns) {
    if (daemon.ops().try_pop(op)) {
      ASSERT_EQ(op.seq, expected);
      ++expected;
    } else {
      daemon.ops().wait_for_items(100'000'000);
    }
  }
  ASSERT_EQ(expected, kOps + 1) << "the child stopped posting";
  ASSERT_TRUE(daemon.grants().try_push(GrantDescriptor{kOps, 0, kGrantNone, 0, 0}));
  EXPECT_EQ(child.wait(), 0);
}

}  // namespace
}  // namespace gpuqos::ipc
