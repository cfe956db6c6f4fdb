// Tests of FrameWriter: `gpuqos top`'s frames to an output that stops taking them, a quit meanwhile,
// and stdout's flags left as they were.
#include "gpuqos/scheduler/frame_writer.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <csignal>
#include <future>
#include <string>
#include <thread>

#include "gpuqos/testing/temp_dir.h"

namespace gpuqos::scheduler {
namespace {

using namespace std::chrono_literals;

struct Pipe {
  FileDescriptor read_end, write_end;
  Pipe() {
    int ends[2];
    if (::pipe2(ends, O_CLOEXEC) != 0) throw std::runtime_error("pipe");
    read_end = FileDescriptor(ends[0]);
    write_end = FileDescriptor(ends[1]);
    ::fcntl(ends[1], F_SETPIPE_SZ, 4096);  // full after a page
  }
  bool write_end_blocks() const { return (::fcntl(write_end.get(), F_GETFL) & O_NONBLOCK) == 0; }
};

// A review: `gpuqos top > fifo` with a reader that never reads could not be ended by SIGTERM or
// SIGINT (blocked for the signalfd) while its write waited. The write waits in poll() with the
// quit descriptor now, and the pipe's shared description never turns non-blocking.
TEST(FrameWriter, AQuitEndsAWriteThatTheOutputDoesNotTake) {
  for (const bool reopen : {true, false}) {
    Pipe pipe;
    FrameWriter writer(pipe.write_end.get(), reopen);
    EXPECT_EQ(writer.how(), reopen ? FrameWriter::How::reopened : FrameWriter::How::flag_around_each_write);
    FileDescriptor quit(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
    std::atomic<int> asked = 0;
    const auto quits = [&] {  // as QuitWatch::quits: reads what came; the second one quits
      std::uint64_t count = 0;
      [[maybe_unused]] const auto got = ::read(quit.get(), &count, sizeof count);
      return ++asked == 2;
    };
    auto wrote = std::async(std::launch::async, [&] { return writer.write(std::string(1 << 20, 'x'), quit.get(), quits); });
    EXPECT_EQ(wrote.wait_for(300ms), std::future_status::timeout) << "the reader takes nothing";
    EXPECT_TRUE(pipe.write_end_blocks()) << "stdout's description is as it was while top waits (reopen " << reopen << ")";
    const std::uint64_t one = 1;
    ASSERT_EQ(::write(quit.get(), &one, sizeof one), static_cast<ssize_t>(sizeof one));
    EXPECT_EQ(wrote.wait_for(300ms), std::future_status::timeout) << "what came did not quit";
    EXPECT_EQ(asked, 1);
    ASSERT_EQ(::write(quit.get(), &one, sizeof one), static_cast<ssize_t>(sizeof one));
    ASSERT_EQ(wrote.wait_for(5s), std::future_status::ready);
    EXPECT_EQ(wrote.get(), FrameWriter::Wrote::quit);
    EXPECT_EQ(asked, 2);
    EXPECT_TRUE(pipe.write_end_blocks()) << "reopen " << reopen;
    writer.write_now("\n");  // does not wait either
    EXPECT_TRUE(pipe.write_end_blocks());
  }
}

// What the output takes arrives whole and in order, however slowly it is read.
TEST(FrameWriter, AFrameArrivesWholeThroughASlowReader) {
  for (const bool reopen : {true, false}) {
    Pipe pipe;
    FrameWriter writer(pipe.write_end.get(), reopen);
    std::string frame;
    for (int i = 0; frame.size() < 100'000; ++i) frame += "line " + std::to_string(i) + "\n";
    auto wrote = std::async(std::launch::async, [&] { return writer.write(frame); });
    std::string got;
    char buffer[1000];
    while (got.size() < frame.size()) {
      const ssize_t n = ::read(pipe.read_end.get(), buffer, sizeof buffer);
      ASSERT_GT(n, 0);
      got.append(buffer, static_cast<std::size_t>(n));
      std::this_thread::sleep_for(std::chrono::microseconds(200));
    }
    EXPECT_EQ(wrote.get(), FrameWriter::Wrote::all);
    EXPECT_EQ(got, frame);
    EXPECT_TRUE(pipe.write_end_blocks());
  }
}

// An output that cannot take anything at all fails, said by errno: a pipe nobody holds open
// (SIGPIPE ignored, as systemd runs services) and /dev/full.
TEST(FrameWriter, AnOutputThatCannotBeWrittenFails) {
  const auto old = ::signal(SIGPIPE, SIG_IGN);
  {
    Pipe pipe;
    pipe.read_end.reset();
    FrameWriter writer(pipe.write_end.get());
    EXPECT_EQ(writer.write("frame"), FrameWriter::Wrote::failed);
    EXPECT_EQ(errno, EPIPE);
  }
  ::signal(SIGPIPE, old);
  FileDescriptor full(::open("/dev/full", O_WRONLY | O_CLOEXEC));
  if (!full.valid()) GTEST_SKIP() << "no /dev/full here";
  FrameWriter writer(full.get());
  EXPECT_EQ(writer.write("frame"), FrameWriter::Wrote::failed);
  EXPECT_EQ(errno, ENOSPC);
}

// A socket (a service's stdout to the journal) is written with MSG_DONTWAIT, a regular file as it is.
TEST(FrameWriter, SocketsAndFilesAreWrittenWithoutTheirFlags) {
  int pair[2];
  ASSERT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pair), 0);
  FileDescriptor ours(pair[0]), theirs(pair[1]);
  FrameWriter to_socket(ours.get());
  EXPECT_EQ(to_socket.how(), FrameWriter::How::send_dontwait);
  FileDescriptor quit(::eventfd(1, EFD_CLOEXEC | EFD_NONBLOCK));  // readable at once
  EXPECT_EQ(to_socket.write(std::string(8 << 20, 'x'), quit.get()), FrameWriter::Wrote::quit)
      << "the buffer fills, then the quit ends it";
  EXPECT_EQ(::fcntl(ours.get(), F_GETFL) & O_NONBLOCK, 0);

  const testing::TempDir dir("frame-writer");
  FileDescriptor file(::open((dir.path() / "frames").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600));
  ASSERT_TRUE(file.valid());
  FrameWriter to_file(file.get());
  EXPECT_EQ(to_file.how(), FrameWriter::How::blocking);
  EXPECT_EQ(to_file.write("frame\n"), FrameWriter::Wrote::all);
  EXPECT_EQ(::lseek(file.get(), 0, SEEK_END), 6);
}

}  // namespace
}  // namespace gpuqos::scheduler
