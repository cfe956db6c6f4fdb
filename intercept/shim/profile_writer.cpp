// Formatting the profile's records, and writing them: to a temporary file, added to the profile at exit.
#include "profile_writer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <thread>

namespace gpuqos::intercept {
namespace {

const char* direction_name(ipc::CopyDirection direction) {
  switch (direction) {
    case ipc::CopyDirection::h2d: return "h2d";
    case ipc::CopyDirection::d2h: return "d2h";
    default: return "d2d";
  }
}

const char* host_memory_name(ipc::HostMemory memory) {
  switch (memory) {
    case ipc::HostMemory::pinned: return "pinned";
    case ipc::HostMemory::pageable: return "pageable";
    default: return "none";
  }
}

std::string triple(const std::uint32_t (&v)[3]) {
  return "[" + std::to_string(v[0]) + "," + std::to_string(v[1]) + "," + std::to_string(v[2]) + "]";
}

std::string times(std::uint64_t start_ns, std::uint64_t end_ns) {
  return "\"start_ns\":" + std::to_string(start_ns) + ",\"end_ns\":" + std::to_string(end_ns) + "}";
}

}  // namespace

std::string json_escaped(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char c : text) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (byte < 0x20) {
      char escape[8];
      std::snprintf(escape, sizeof escape, "\\u%04x", byte);
      out += escape;
    } else {
      out += c;
    }
  }
  return out;
}

std::string kernel_line(std::string_view name, const ipc::OpDescriptor& launch, std::uint64_t start_ns,
                        std::uint64_t end_ns) {
  std::string args;
  for (std::uint8_t i = 0; i < launch.arg_count && i < ipc::kMaxScalarArgs; ++i) {
    args += (i ? "," : "") + std::to_string(launch.args[i]);
  }
  return "{\"kind\":\"kernel\",\"name\":\"" + json_escaped(name) + "\",\"device\":" + std::to_string(launch.device) +
         ",\"grid\":" + triple(launch.grid) + ",\"block\":" + triple(launch.block) +
         ",\"shared_bytes\":" + std::to_string(launch.shared_bytes) + ",\"args\":[" + args + "]," +
         times(start_ns, end_ns);
}

std::string copy_line(ipc::CopyDirection direction, ipc::HostMemory host_memory, std::uint64_t bytes,
                      std::uint64_t start_ns, std::uint64_t end_ns) {
  return std::string("{\"kind\":\"copy\",\"direction\":\"") + direction_name(direction) + "\",\"host_memory\":\"" +
         host_memory_name(host_memory) + "\",\"bytes\":" + std::to_string(bytes) + "," + times(start_ns, end_ns);
}

std::string memset_line(std::uint64_t bytes, std::uint64_t start_ns, std::uint64_t end_ns) {
  return "{\"kind\":\"memset\",\"bytes\":" + std::to_string(bytes) + "," + times(start_ns, end_ns);
}

bool ProfileWriter::open(const std::string& path, std::string_view job, int pid, std::string& why) {
  path_ = path;
  pid_ = pid;
  // The rename at exit could not replace a directory: said now, before the run is profiled for nothing.
  if (struct stat target{}; ::stat(path.c_str(), &target) == 0 && S_ISDIR(target.st_mode)) {
    why = path + " is a directory, not a file to write";
    return false;
  } else if (::stat(path.c_str(), &target) == 0 && !S_ISREG(target.st_mode)) {
    // A FIFO nobody reads hung the process's exit in the records' write; a device is no profile.
    why = path + " is not a regular file (a FIFO or a device): a profile is a file `gpuqos train` reads";
    return false;
  }
  // A file of its own (O_EXCL: never through a link another user planted at the name in a shared
  // directory, nor over a killed process's records of the same pid): <path>.tmp.<pid>, or -1, -2...
  int fd = -1;
  for (int taken = 0; fd < 0 && taken < kMaxTempNames; ++taken) {
    temp_path_ = path + ".tmp." + std::to_string(pid) + (taken == 0 ? "" : "-" + std::to_string(taken));
    fd = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
    if (fd < 0 && errno != EEXIST) break;
  }
  if (fd >= 0) file_ = ::fdopen(fd, "w");
  if (!file_) {
    why = "cannot write " + temp_path_ + ": " + std::strerror(errno);
    if (fd >= 0) ::close(fd), ::unlink(temp_path_.c_str());
    return false;
  }
  const std::string header = "{\"format\":\"gpuqos-profile\",\"version\":1,\"job\":\"" + json_escaped(job) +
                             "\",\"pid\":" + std::to_string(pid) + "}\n";
  std::fputs(header.c_str(), file_);
  return true;
}

void ProfileWriter::write_line(const std::string& line) {
  if (!file_) return;
  std::fputs(line.c_str(), file_);
  std::fputc('\n', file_);
  ++records_;
}

void ProfileWriter::flush() {
  if (file_) std::fflush(file_);
}

namespace {

// Appends the file at `from` to `fd`, skipping its first line when `skip_header`. False on an error.
bool append_file(const std::string& from, int fd, bool skip_header) {
  std::FILE* in = std::fopen(from.c_str(), "r");
  if (!in) return false;
  char buffer[65536];
  bool in_header = skip_header, ok = true;
  for (std::size_t got; ok && (got = std::fread(buffer, 1, sizeof buffer, in)) > 0;) {
    const char* begin = buffer;
    if (in_header) {
      const char* newline = static_cast<const char*>(std::memchr(buffer, '\n', got));
      if (!newline) continue;  // still in the header line
      in_header = false;
      begin = newline + 1;
    }
    for (std::size_t left = static_cast<std::size_t>(buffer + got - begin); ok && left > 0;) {
      const ssize_t wrote = ::write(fd, begin, left);
      if (wrote < 0 && errno == EINTR) continue;
      ok = wrote > 0;
      if (ok) begin += wrote, left -= static_cast<std::size_t>(wrote);
    }
  }
  ok = ok && !std::ferror(in);
  std::fclose(in);
  return ok;
}

// Whether the file open at `fd` starts as a gpuqos profile does.
bool is_profile(int fd) {
  constexpr char kStart[] = "{\"format\":\"gpuqos-profile\"";
  char head[sizeof kStart - 1] = {};
  return ::pread(fd, head, sizeof head, 0) == static_cast<ssize_t>(sizeof head) && std::memcmp(head, kStart, sizeof head) == 0;
}

}  // namespace

bool ProfileWriter::commit(std::string& why) {
  if (!file_) return false;
  const bool written = std::ferror(file_) == 0;
  const bool closed = std::fclose(file_) == 0;
  file_ = nullptr;
  if (!written || !closed) {
    why = "cannot write " + temp_path_ + " (disk full?)";
    std::remove(temp_path_.c_str());
    return false;
  }
  // Not through a link another user planted at the path (in a shared directory): a link of our
  // own user's is followed, as the user may have meant it.
  // Never blocked on (O_NONBLOCK: a FIFO or a device put there since open() is no profile, and goes
  // beside below).
  int fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
  if (struct stat link{}; fd < 0 && errno == ELOOP && ::lstat(path_.c_str(), &link) == 0 && link.st_uid == ::geteuid()) {
    fd = ::open(path_.c_str(), O_RDWR | O_CREAT | O_APPEND | O_CLOEXEC | O_NONBLOCK, 0644);
  } else if (fd < 0 && errno == ELOOP) {
    written_to_ = path_ + "." + std::to_string(pid_);  // beside it, as beside another tool's file
    const bool moved = std::rename(temp_path_.c_str(), written_to_.c_str()) == 0;
    if (!moved) why = "cannot rename " + temp_path_ + " to " + written_to_ + ": " + std::strerror(errno);
    std::remove(temp_path_.c_str());
    return moved;
  }
  if (fd < 0) {
    why = "cannot write " + path_ + ": " + std::strerror(errno);
    std::remove(temp_path_.c_str());
    return false;
  }
  // Polled, not blocked on: a holder stopped for good would hang this process's exit. Waited for
  // as long as the file grows (ranks adding large profiles one after another).
  int locked = 0;
  const auto size_of = [fd] {
    struct stat now {};
    return ::fstat(fd, &now) == 0 ? now.st_size : off_t{-1};
  };
  off_t last_size = size_of();
  auto give_up = std::chrono::steady_clock::now() + lock_wait_;
  while ((locked = ::flock(fd, LOCK_EX | LOCK_NB)) != 0 && (errno == EINTR || errno == EWOULDBLOCK)) {
    if (errno != EWOULDBLOCK) continue;
    const auto now = std::chrono::steady_clock::now();
    if (const off_t size = size_of(); size != last_size) {
      last_size = size;
      give_up = now + lock_wait_;
    } else if (now >= give_up) {
      lock_timed_out_ = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  struct stat target {};
  const bool regular = ::fstat(fd, &target) == 0 && S_ISREG(target.st_mode);
  const bool empty = regular && target.st_size == 0;
  bool ok = false;
  if (regular && !lock_timed_out_ && (empty || (locked == 0 && is_profile(fd)))) {
    added_ = !empty;
    written_to_ = path_;
    ok = append_file(temp_path_, fd, added_);
    if (!ok) why = "cannot add to " + path_ + ": " + std::strerror(errno);
  } else {
    // Not ours to add to (another tool's file, or one cut short by a crash), or locked for longer than
    // we wait: the records go beside it.
    written_to_ = path_ + "." + std::to_string(pid_);
    ok = std::rename(temp_path_.c_str(), written_to_.c_str()) == 0;
    if (!ok) why = "cannot rename " + temp_path_ + " to " + written_to_ + ": " + std::strerror(errno);
  }
  ::close(fd);  // and the lock with it
  std::remove(temp_path_.c_str());  // added from (or left by a failed rename)
  return ok;
}

void ProfileWriter::discard() {
  if (!file_) return;
  std::fclose(file_);
  file_ = nullptr;
  std::remove(temp_path_.c_str());
}

}  // namespace gpuqos::intercept
