// `gpuqos top`'s output: frames written to stdout so that a reader that stops reading (a pipe
// nobody drains, a terminal held with Ctrl-S) cannot keep top from quitting.
//
// SIGINT and SIGTERM are blocked while top runs (read on a signalfd), so a plain write to such an
// output blocked for good with nothing able to end it but SIGKILL (a review: `gpuqos top > fifo`
// with a reader that never reads). FrameWriter writes without blocking and waits for the output
// in poll(), together with the descriptor that says quit.
//
// stdout's O_NONBLOCK is a flag of its open file description, which the shell, the terminal's other
// processes and the other end's writers share: it is not set there. A pipe, FIFO or terminal is
// opened again through /proc/self/fd (a description of top's own, non-blocking); a socket is
// written with MSG_DONTWAIT; a regular file or block device is written as it is (it does not wait
// for a reader). Only when the reopen fails (a terminal owned by another user, after su) is
// O_NONBLOCK set on stdout's own description, for one write at a time, and its flags put back
// before write() returns, whatever happened.
#pragma once

#include <functional>
#include <string_view>

#include "gpuqos/scheduler/unix_socket.h"

namespace gpuqos::scheduler {

class FrameWriter {
 public:
  enum class How { reopened, send_dontwait, blocking, flag_around_each_write };
  enum class Wrote { all, quit, failed };

  // Writes to `fd` (not owned), choosing How as above; `reopen` false skips the reopen (tests).
  explicit FrameWriter(int fd, bool reopen = true);

  How how() const { return how_; }

  // Writes all of `text`. While the output takes no more, waits for it and for `quit_fd` (-1: none)
  // to be readable; then `quits` (none: anything quits) says whether what came ends the wait (quit).
  // failed: the output cannot be written (errno says why: EPIPE, ENOSPC...).
  Wrote write(std::string_view text, int quit_fd = -1, const std::function<bool()>& quits = {});
  // As much of `text` as the output takes now, without waiting (the newline after top's last frame,
  // when it quits: a stuck reader must not hold the quit).
  void write_now(std::string_view text);

 private:
  // One write or send of at most `bytes` that does not wait (flag_around_each_write sets and puts
  // back the flag around it); what write(2) returns.
  long write_some(const char* data, std::size_t bytes);

  int fd_;
  FileDescriptor reopened_;  // with How::reopened
  How how_;
};

}  // namespace gpuqos::scheduler
