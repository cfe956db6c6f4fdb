// The daemon's socket: an owned file descriptor, listening (with the stale-socket and
// another-daemon checks) and connecting on an AF_UNIX SOCK_SEQPACKET path, and a non-blocking
// record read that tells "nothing yet" from "gone".
#pragma once

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

#include "gpuqos/ipc/result.h"

namespace gpuqos::scheduler {

inline constexpr const char* kDefaultSocketPath = "/run/gpuqos/gpuqosd.sock";

// Owns one file descriptor; closes it on destruction.
class FileDescriptor {
 public:
  FileDescriptor() = default;
  explicit FileDescriptor(int fd) noexcept : fd_(fd) {}
  ~FileDescriptor() { reset(); }
  FileDescriptor(FileDescriptor&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  FileDescriptor& operator=(FileDescriptor&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;

  int get() const noexcept { return fd_; }
  bool valid() const noexcept { return fd_ >= 0; }
  void reset() noexcept;

 private:
  int fd_ = -1;
};

// Creates the parent directory if missing, removes a stale socket, and refuses when another
// daemon answers on path. The socket is non-blocking and close-on-exec.
ipc::Result<FileDescriptor> listen_unix(const std::string& path);

// Who besides their owner can reach a socket at `path`: the first directory above it that others may
// not search, as "DIR (mode 0700, owner uid U)"; `group_only` is set when its group may (access by
// group, which may be meant). "" when every directory lets anyone through.
std::string closed_to_others(const std::string& path, bool& group_only);

// One daemon per socket path: takes an exclusive flock on path + ".lock" (created, with the parent
// directory, if missing; left in place at exit, as lock files are) and writes this process's pid in
// it. Held while the descriptor lives. An error naming the pid of the daemon that holds it.
ipc::Result<FileDescriptor> lock_socket_path(const std::string& path);

// The same lock for any path: an exclusive flock on path + ".lock", this process's pid written in
// it. An empty error when another process holds it (held_by says who), otherwise why it could not
// be taken. read_only_fallback: a lock file this process cannot write (another user's) is locked
// through a read-only descriptor (its pid not written); else that is an error.
ipc::Result<FileDescriptor> lock_beside(const std::string& path, bool read_only_fallback = true);

// Who holds lock_path, for a message: "another gpuqosd (pid N)", or without the pid when the one
// recorded there does not run.
std::string held_by(const std::string& lock_path);

// A blocking, close-on-exec connection to path, made without waiting: a daemon that does not accept
// (its queue of new connections full) is an error at once. connect_error: connect's errno on failure.
ipc::Result<FileDescriptor> connect_unix(const std::string& path, int* connect_error = nullptr);

enum class ReadOutcome { record, would_block, closed, error };

// Reads one record without blocking. error: too long (truncated) or a socket error (in error).
ReadOutcome read_record_nonblocking(int fd, std::vector<std::byte>& buffer, std::size_t max_bytes,
                                    std::string& error);

}  // namespace gpuqos::scheduler
