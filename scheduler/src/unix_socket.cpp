// AF_UNIX SOCK_SEQPACKET listening and connecting for gpuqosd and the gpuqos CLI.
#include "gpuqos/scheduler/unix_socket.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <system_error>
#include <vector>

#include "gpuqos/ipc/registration.h"

namespace gpuqos::scheduler {
namespace {

ipc::Error system_error_of(int error, const std::string& what) { return ipc::Error{what + ": " + std::strerror(error)}; }
ipc::Error system_error(const std::string& what) { return system_error_of(errno, what); }

ipc::Result<sockaddr_un> address_of(const std::string& path) {
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof address.sun_path) {
    return ipc::Error{"socket path '" + path + "' must be 1.." + std::to_string(sizeof address.sun_path - 1) + " bytes"};
  }
  std::memcpy(address.sun_path, path.c_str(), path.size() + 1);
  return address;
}

// Removes path when it is a socket nobody answers on; an error when a daemon answers there or
// the path is something other than a socket.
ipc::Status clear_stale_socket(const std::string& path) {
  struct stat info{};
  if (::lstat(path.c_str(), &info) != 0) return {};  // nothing there
  if (!S_ISSOCK(info.st_mode)) return ipc::Error{path + " exists and is not a socket"};
  // A daemon whose queue of new connections is full (stopped, or flooded) still serves it.
  if (int error = 0; connect_unix(path, &error) || error == EAGAIN) {
    return ipc::Error{"another gpuqosd is already serving " + path};
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) return system_error("cannot remove stale socket " + path);
  return {};
}

// The socket's directory, made if missing (a socket under /run/gpuqos on a fresh boot).
// The directories it makes are 0755 whatever the umask: the socket in one is for every local user's
// jobs (under umask 077 they were 0700, and other users' jobs could not reach the daemon, which said
// nothing of it). Made one component at a time, and only a directory this call made is given its
// mode, through a descriptor opened without following links: a link planted at a name being made
// is never followed to chmod what it points to.
ipc::Status make_parent_directory(const std::string& path) {
  namespace fs = std::filesystem;
  const fs::path parent = fs::path(path).parent_path();
  if (parent.empty()) return {};
  fs::path made;
  for (const fs::path& part : parent) {
    made /= part;
    if (::mkdir(made.c_str(), 0755) != 0) {
      if (errno == EEXIST) continue;  // there already (a link to a directory too: as it is)
      return system_error("cannot create " + made.string());
    }
    const int fd = ::open(made.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    const bool moded = fd >= 0 && ::fchmod(fd, 0755) == 0;
    const int error = errno;
    if (fd >= 0) ::close(fd);
    if (!moded) return system_error_of(error, "cannot make " + made.string() + " 0755");
  }
  return {};
}

// A lock file is opened without blocking and without becoming a controlling terminal: someone who
// may write in its directory can put a FIFO there (a review: opened to read while another process
// held it locked, the open waited for a writer for good, stalling gpuqosd's loop, which reads its
// own SIGTERM) or a device.
int open_lock_file(const std::string& lock_path, int flags) {
  return ::open(lock_path.c_str(), flags | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK | O_NOCTTY, 0644);
}

// What the open descriptor is, for a lock file: not a regular file (`odd` says so), or one with other
// names (a hard link to one elsewhere, which writing our pid would truncate; or made by a backup or
// deduplication tool), which locks all the same but whose text is not ours to write.
struct LockFileKind {
  std::string odd;  // empty: a regular file
  bool other_names = false;
};
LockFileKind lock_file_kind(int fd) {
  struct stat info{};
  if (::fstat(fd, &info) != 0) return {std::string("cannot be examined (") + std::strerror(errno) + ")"};
  if (!S_ISREG(info.st_mode)) return {"is not a regular file (a FIFO, a device or a directory)"};
  return {{}, info.st_nlink > 1};
}

}  // namespace

void FileDescriptor::reset() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
}

ipc::Result<FileDescriptor> listen_unix(const std::string& path) {
  auto address = address_of(path);
  if (!address) return ipc::Error{address.error()};
  if (ipc::Status made = make_parent_directory(path); !made) return ipc::Error{made.error()};
  if (ipc::Status cleared = clear_stale_socket(path); !cleared) return ipc::Error{cleared.error()};
  FileDescriptor fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return system_error("socket");
  // Any local user may register: who they are comes from SO_PEERCRED, and segments are theirs alone.
  const mode_t old_mask = ::umask(0);
  const int bound = ::bind(fd.get(), reinterpret_cast<const sockaddr*>(&address.value()), sizeof(sockaddr_un));
  ::umask(old_mask);
  if (bound != 0) return system_error("bind " + path);
  // As deep a queue of connections not yet accepted as the system allows: a full one makes a job's
  // connect fail (it runs unmanaged and asks again a second later).
  if (::listen(fd.get(), SOMAXCONN) != 0) return system_error("listen " + path);
  return fd;
}

std::string closed_to_others(const std::string& path, bool& group_only) {
  group_only = false;
  for (std::filesystem::path dir = std::filesystem::path(path).parent_path(); !dir.empty();
       dir = dir.parent_path()) {
    struct stat info{};
    if (::stat(dir.c_str(), &info) == 0 && (info.st_mode & S_IXOTH) == 0) {
      group_only = (info.st_mode & S_IXGRP) != 0;
      char mode[8];
      std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(info.st_mode & 07777));
      return dir.string() + " (mode " + mode + ", owner uid " + std::to_string(info.st_uid) + ", group " +
             std::to_string(info.st_gid) + ")";
    }
    if (dir == dir.root_path()) break;
  }
  return {};
}

ipc::Result<FileDescriptor> lock_socket_path(const std::string& path) {
  auto lock = lock_beside(path);
  if (!lock && lock.error().empty()) {
    return ipc::Error{held_by(path + ".lock") + " holds " + path + ".lock: it serves " + path +
                      " (if that socket is gone, it serves it again within a second)"};
  }
  return lock;
}

std::string held_by(const std::string& lock_path) {
  FileDescriptor fd(open_lock_file(lock_path, O_RDONLY));
  // Another user's lock file (a user test: a user who made and locked it in a shared directory kept
  // root's gpuqosd from starting): its owner is named, and the pid in it, that user's word, is not.
  struct stat info{};
  if (fd.valid() && ::fstat(fd.get(), &info) == 0 && info.st_uid != ::geteuid()) {
    return "a process of uid " + std::to_string(info.st_uid) + " (the lock file's owner)";
  }
  std::array<char, 32> text{};
  const ssize_t got = fd.valid() ? ::pread(fd.get(), text.data(), text.size() - 1, 0) : 0;
  std::string pid = got > 0 ? std::string(text.data(), static_cast<std::size_t>(got)) : std::string();
  pid = pid.substr(0, pid.find_first_of("\n"));
  // The pid written there is the holder's unless it could not write its own (another user's file).
  const long number = pid.empty() ? 0 : std::strtol(pid.c_str(), nullptr, 10);
  const bool running = number > 0 && (::kill(static_cast<pid_t>(number), 0) == 0 || errno == EPERM);
  return running ? "another gpuqosd (pid " + std::to_string(number) + ")" : "another gpuqosd (its pid is not recorded)";
}

ipc::Result<FileDescriptor> lock_beside(const std::string& path, bool read_only_fallback) {
  const std::string lock_path = path + ".lock";
  if (ipc::Status made = make_parent_directory(path); !made) return ipc::Error{made.error()};
  FileDescriptor fd(open_lock_file(lock_path, O_RDWR | O_CREAT));
  // Another user's lock file (left by their gpuqosd in a shared directory): a read-only descriptor
  // locks all the same; the pid is not written then.
  bool writable = fd.valid();
  if (!writable && errno == EACCES && read_only_fallback) {
    fd = FileDescriptor(open_lock_file(lock_path, O_RDONLY));
    // No lock file to share, and none can be made: the directory is what refused (not "no such file").
    if (!fd.valid() && errno == ENOENT) return system_error_of(EACCES, "cannot create " + lock_path);
  }
  if (!fd.valid()) return system_error("cannot open " + lock_path);
  const LockFileKind kind = lock_file_kind(fd.get());
  if (!kind.odd.empty()) {
    return ipc::Error{lock_path + " " + kind.odd + ": gpuqosd keeps its lock in a regular file there; remove it"};
  }
  writable = writable && !kind.other_names;
  if (::flock(fd.get(), LOCK_EX | LOCK_NB) != 0) {
    if (errno != EWOULDBLOCK) return system_error("cannot lock " + lock_path);
    return ipc::Error{""};  // held: the caller says by whom (held_by)
  }
  const std::string pid = std::to_string(::getpid()) + "\n";
  if (writable &&
      (::ftruncate(fd.get(), 0) != 0 || ::pwrite(fd.get(), pid.data(), pid.size(), 0) != static_cast<ssize_t>(pid.size()))) {
    return system_error("cannot write " + lock_path);
  }
  return fd;
}

ipc::Result<FileDescriptor> connect_unix(const std::string& path, int* connect_error) {
  auto address = address_of(path);
  if (!address) return ipc::Error{address.error()};
  // Connected without blocking: a blocking connect to a daemon whose queue of connections not yet
  // accepted is full waits until it accepts one, for ever while it is stopped (a user test: shims
  // asking again each second filled a stopped gpuqosd's queue, and then `gpuqos status` hung, and
  // `gpuqos top`, its SIGINT and SIGTERM read on a signalfd, could be ended only by SIGKILL). On a
  // Unix socket that queue is the only wait: EAGAIN says it is full, and nothing is connected.
  FileDescriptor fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!fd.valid()) return system_error("socket");
  if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address.value()), sizeof(sockaddr_un)) != 0) {
    const int error = errno;
    if (connect_error != nullptr) *connect_error = error;
    return ipc::Error{ipc::connect_failure(path, error)};
  }
  const int flags = ::fcntl(fd.get(), F_GETFL);
  if (flags < 0 || ::fcntl(fd.get(), F_SETFL, flags & ~O_NONBLOCK) != 0) return system_error("fcntl");
  return fd;
}

ReadOutcome read_record_nonblocking(int fd, std::vector<std::byte>& buffer, std::size_t max_bytes, std::string& error) {
  buffer.resize(max_bytes);
  ssize_t got;
  do {
    got = ::recv(fd, buffer.data(), buffer.size(), MSG_DONTWAIT | MSG_TRUNC);
  } while (got < 0 && errno == EINTR);
  if (got < 0) {
    buffer.clear();
    if (errno == EAGAIN || errno == EWOULDBLOCK) return ReadOutcome::would_block;
    if (errno == ECONNRESET) return ReadOutcome::closed;
    error = std::string("recv: ") + std::strerror(errno);
    return ReadOutcome::error;
  }
  if (got == 0) {
    buffer.clear();
    return ReadOutcome::closed;
  }
  if (static_cast<std::size_t>(got) > max_bytes) {  // MSG_TRUNC: the real length
    buffer.clear();
    error = "record of " + std::to_string(got) + " bytes, longer than " + std::to_string(max_bytes);
    return ReadOutcome::error;
  }
  buffer.resize(static_cast<std::size_t>(got));
  return ReadOutcome::record;
}

}  // namespace gpuqos::scheduler
