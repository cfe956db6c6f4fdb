// FrameWriter: writing `gpuqos top`'s frames without blocking on a reader that does not read.
#include "gpuqos/scheduler/frame_writer.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <string>

namespace gpuqos::scheduler {

FrameWriter::FrameWriter(int fd, bool reopen) : fd_(fd), how_(How::flag_around_each_write) {
  struct stat about{};
  if (::fstat(fd, &about) == 0 && (S_ISREG(about.st_mode) || S_ISBLK(about.st_mode))) {
    how_ = How::blocking;
    return;
  }
  if (::fstat(fd, &about) == 0 && S_ISSOCK(about.st_mode)) {  // /proc/self/fd cannot open one
    how_ = How::send_dontwait;
    return;
  }
  if (!reopen) return;
  // O_NOCTTY: a terminal opened again must not become top's controlling one. A FIFO with no reader
  // left refuses (ENXIO): its write would fail anyway, and the flag's way says so.
  const std::string path = "/proc/self/fd/" + std::to_string(fd);
  reopened_ = FileDescriptor(::open(path.c_str(), O_WRONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC));
  if (reopened_.valid()) how_ = How::reopened;
}

long FrameWriter::write_some(const char* data, std::size_t bytes) {
  switch (how_) {
    case How::reopened: return ::write(reopened_.get(), data, bytes);
    case How::send_dontwait: return ::send(fd_, data, bytes, MSG_DONTWAIT);  // SIGPIPE as write's
    case How::blocking: return ::write(fd_, data, bytes);
    case How::flag_around_each_write: break;
  }
  const int flags = ::fcntl(fd_, F_GETFL);
  if (flags < 0) return -1;
  if ((flags & O_NONBLOCK) == 0 && ::fcntl(fd_, F_SETFL, flags | O_NONBLOCK) != 0) return -1;
  const ssize_t wrote = ::write(fd_, data, bytes);
  const int error = errno;
  if ((flags & O_NONBLOCK) == 0) ::fcntl(fd_, F_SETFL, flags);  // as it was, before anyone else writes
  errno = error;
  return wrote;
}

FrameWriter::Wrote FrameWriter::write(std::string_view text, int quit_fd, const std::function<bool()>& quits) {
  const int out_fd = how_ == How::reopened ? reopened_.get() : fd_;
  while (!text.empty()) {
    const long wrote = write_some(text.data(), text.size());
    if (wrote > 0) {
      text.remove_prefix(static_cast<std::size_t>(wrote));
      continue;
    }
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) return Wrote::failed;
    pollfd watched[2] = {{out_fd, POLLOUT, 0}, {quit_fd, POLLIN, 0}};
    if (::poll(watched, quit_fd >= 0 ? 2 : 1, -1) < 0 && errno != EINTR) return Wrote::failed;
    if (quit_fd >= 0 && (watched[1].revents & POLLIN) != 0 && (!quits || quits())) return Wrote::quit;
    // Writable, or an error or hang-up there, which the next write says.
  }
  return Wrote::all;
}

void FrameWriter::write_now(std::string_view text) {
  while (!text.empty()) {
    const long wrote = write_some(text.data(), text.size());
    if (wrote < 0 && errno == EINTR) continue;
    if (wrote <= 0) return;
    text.remove_prefix(static_cast<std::size_t>(wrote));
  }
}

}  // namespace gpuqos::scheduler
