// The socket's directory and lock file on a node shared by several users.
#include "gpuqos/scheduler/unix_socket.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <string>
#include <thread>

#include <gtest/gtest.h>

#include "gpuqos/testing/ready_child.h"
#include "gpuqos/testing/temp_dir.h"

namespace gpuqos::scheduler {
namespace {

namespace fs = std::filesystem;

// Restores the process's umask however the test ends.
class UmaskScope {
 public:
  explicit UmaskScope(mode_t mask) : old_(::umask(mask)) {}
  ~UmaskScope() { ::umask(old_); }
  UmaskScope(const UmaskScope&) = delete;
  UmaskScope& operator=(const UmaskScope&) = delete;

 private:
  mode_t old_;
};

// A user test: under umask 077 the socket's new directory was 0700, so other users' jobs could not
// reach the daemon (connect: Permission denied), and the daemon's log said nothing of it.
TEST(UnixSocket, DirectoriesItMakesAreOpenToEveryUserWhateverTheUmask) {
  const testing::TempDir dir;
  const fs::path socket = dir.path() / "run" / "gpuqos" / "gpuqosd.sock";
  {
    const UmaskScope mask(077);
    auto listening = listen_unix(socket.string());
    ASSERT_TRUE(listening) << listening.error();
  }
  for (const fs::path& made : {dir.path() / "run", dir.path() / "run" / "gpuqos"}) {
    EXPECT_EQ(fs::status(made).permissions(), fs::perms(0755)) << made;
  }
  EXPECT_EQ(fs::status(socket).permissions(), fs::perms(0777));
  // A directory that was there is left as it is.
  const fs::path own = dir.path() / "own";
  fs::create_directory(own);
  fs::permissions(own, fs::perms(0750), fs::perm_options::replace);
  ASSERT_TRUE(listen_unix((own / "s.sock").string()));
  EXPECT_EQ(fs::status(own).permissions(), fs::perms(0750));
}

// A user test: a root daemon's socket in an existing 0700 directory, and other users' jobs ran
// unmanaged while the daemon's log read as a normal start. The directory in the way is found.
TEST(UnixSocket, TheDirectoryThatKeepsOtherUsersOutIsFound) {
  const testing::TempDir dir;
  fs::permissions(dir.path(), fs::perms(0755), fs::perm_options::replace);
  const fs::path closed = dir.path() / "closed";
  fs::create_directories(closed / "open");
  fs::permissions(closed, fs::perms(0700), fs::perm_options::replace);
  bool group_only = true;
  EXPECT_EQ(closed_to_others((closed / "open" / "s.sock").string(), group_only),
            closed.string() + " (mode 0700, owner uid " + std::to_string(::geteuid()) + ", group " +
                std::to_string(::getegid()) + ")");
  EXPECT_FALSE(group_only);
  fs::permissions(closed, fs::perms(0750), fs::perm_options::replace);
  EXPECT_NE(closed_to_others((closed / "open" / "s.sock").string(), group_only), "");
  EXPECT_TRUE(group_only);
  fs::permissions(closed, fs::perms(0755), fs::perm_options::replace);
  EXPECT_EQ(closed_to_others((closed / "open" / "s.sock").string(), group_only), "");
}

// A service user's gpuqosd with its socket in a directory it cannot write said "cannot open
// <socket>.lock: No such file or directory" (the error of its read-only second try).
TEST(UnixSocket, ALockFileThatCannotBeMadeSaysWhy) {
  const testing::TempDir dir;
  fs::permissions(dir.path(), fs::perms(0755), fs::perm_options::replace);  // nobody may look in
  const fs::path closed = dir.path() / "closed";
  fs::create_directory(closed);
  fs::permissions(closed, fs::perms(0555), fs::perm_options::replace);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    // Root writes anywhere: the check runs as nobody then.
    if (::geteuid() == 0 && (::setgid(65534) != 0 || ::setuid(65534) != 0)) ::_exit(10);
    auto lock = lock_beside((closed / "svc.sock").string());
    if (lock) ::_exit(11);
    const std::string expected = "cannot create " + (closed / "svc.sock.lock").string() + ": Permission denied";
    ::_exit(lock.error() == expected ? 0 : 12);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0) << "10: could not become nobody; 11: locked; 12: another message";
  fs::permissions(closed, fs::perms(0755), fs::perm_options::replace);
}

// A review: a FIFO at <socket>.lock, held locked through a descriptor that only reads it. The lock
// failed, and opening the FIFO to read who held it waited for a writer for good (gpuqosd hung at
// start, and its loop every half second, SIGTERM unread). Now it is refused at once, said why. A
// file with other names (a hard link: writing the pid would truncate the other file) is locked but
// not written.
TEST(UnixSocket, ALockPathThatIsNoRegularFileIsRefusedWithoutWaiting) {
  const testing::TempDir dir;
  const std::string socket = (dir.path() / "gq.sock").string();
  const std::string lock = socket + ".lock";
  ASSERT_EQ(::mkfifo(lock.c_str(), 0644), 0);
  const int holder = ::open(lock.c_str(), O_RDONLY | O_NONBLOCK);  // a reader: no writer then
  ASSERT_GE(holder, 0);
  ASSERT_EQ(::flock(holder, LOCK_EX), 0);
  std::promise<std::string> said;
  std::future<std::string> result = said.get_future();
  std::thread locker([&] {
    auto locked = lock_socket_path(socket);
    said.set_value(locked ? std::string("locked") : locked.error());
  });
  const bool done = result.wait_for(std::chrono::seconds(5)) == std::future_status::ready;
  if (!done) ::close(::open(lock.c_str(), O_WRONLY | O_NONBLOCK));  // a writer lets the stuck open go
  locker.join();
  ::close(holder);
  ASSERT_TRUE(done) << "waited for a writer";
  EXPECT_EQ(result.get(), lock + " is not a regular file (a FIFO, a device or a directory): gpuqosd keeps its lock in "
                                 "a regular file there; remove it");

  const std::string elsewhere = (dir.path() / "precious").string();
  { std::ofstream(elsewhere) << "keep me\n"; }
  const std::string linked = (dir.path() / "other.sock").string();
  ASSERT_EQ(::link(elsewhere.c_str(), (linked + ".lock").c_str()), 0);
  auto locked = lock_beside(linked);
  ASSERT_TRUE(locked) << locked.error();
  std::ifstream kept(elsewhere);
  std::string text;
  std::getline(kept, text);
  EXPECT_EQ(text, "keep me") << "not truncated";
}

// A user test: another user made <socket>.lock in a shared directory and held it locked, and root's
// gpuqosd refused to start, naming "another gpuqosd (its pid is not recorded)". The owner is named.
TEST(UnixSocket, ALockHeldThroughAnotherUsersFileNamesItsOwner) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give the lock file to another user";
  const testing::TempDir dir;
  const std::string socket = (dir.path() / "gq.sock").string();
  const std::string lock = socket + ".lock";
  { std::ofstream(lock) << "1\n"; }  // a live pid, the file owner's word
  ASSERT_EQ(::chown(lock.c_str(), 4242, 4242), 0);
  testing::ReadyChild holder([&] {
    const int fd = ::open(lock.c_str(), O_RDONLY);
    return fd >= 0 && ::flock(fd, LOCK_EX) == 0;
  });
  ASSERT_TRUE(holder.ready());
  auto locked = lock_socket_path(socket);
  ASSERT_FALSE(locked);
  EXPECT_EQ(locked.error().find("a process of uid 4242 (the lock file's owner) holds " + lock), 0u) << locked.error();
}

}  // namespace
}  // namespace gpuqos::scheduler
