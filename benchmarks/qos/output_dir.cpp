// The results folder's lock, clearing and whole-file writes (output_dir.h).
#include "output_dir.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>
#include <system_error>

namespace gpuqos::qos {

namespace fs = std::filesystem;

namespace {

std::string errno_text() { return std::strerror(errno); }

// Closes `fd` (when open), removes the temp file and throws what failed.
[[noreturn]] void write_failed(const fs::path& path, const fs::path& temp, const std::string& what, int error, int fd) {
  if (fd >= 0) ::close(fd);
  std::error_code ignored;
  fs::remove(temp, ignored);
  throw std::runtime_error("cannot write " + path.string() + ": " + what + ": " + std::strerror(error));
}

}  // namespace

OutDirLock::OutDirLock(const fs::path& dir) {
  fs::create_directories(dir);
  const fs::path lock = dir / ".lock";
  fd_ = ::open(lock.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw std::runtime_error("cannot open " + lock.string() + ": " + errno_text());
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int error = errno;
    ::close(fd_);
    if (error == EWOULDBLOCK) {
      throw std::runtime_error("another gpuqos-bench is writing to " + dir.string() + " (it holds " + lock.string() +
                               "); give this one another --out");
    }
    throw std::runtime_error("cannot lock " + lock.string() + ": " + std::strerror(error));
  }
}

OutDirLock::~OutDirLock() { ::close(fd_); }  // releases the lock

std::vector<std::string> remove_previous_results(const fs::path& dir, const std::vector<std::string>& files,
                                                 const std::string& extension) {
  std::vector<std::string> removed;
  std::vector<fs::path> paths;
  for (const std::string& name : files) paths.push_back(dir / name);
  if (!extension.empty()) {
    for (const fs::directory_entry& entry : fs::directory_iterator(dir)) {
      if (entry.is_regular_file() && entry.path().extension() == extension) paths.push_back(entry.path());
    }
  }
  for (const fs::path& path : paths) {
    if (fs::remove(path)) removed.push_back(path.filename().string());  // throws when it cannot
  }
  return removed;
}

std::string json_text(const nlohmann::json& document) {
  return document.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

std::string valid_utf8(const std::string& text) {
  // dump() with `replace` is nlohmann's UTF-8 decoder; parsing its output back undoes the escaping.
  return nlohmann::json::parse(nlohmann::json(text).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace))
      .get<std::string>();
}

void write_file_whole(const fs::path& path, const std::string& text) {
  const fs::path temp = path.parent_path() / ("." + path.filename().string() + ".tmp");
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) write_failed(path, temp, "open " + temp.string(), errno, -1);
  for (std::size_t done = 0; done < text.size();) {
    const ssize_t n = ::write(fd, text.data() + done, text.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) write_failed(path, temp, "write", errno, fd);
    done += static_cast<std::size_t>(n);
  }
  // Durable before the rename: after a crash the name holds the old file or the new one, whole.
  if (::fsync(fd) != 0) write_failed(path, temp, "fsync", errno, fd);
  if (::close(fd) != 0) write_failed(path, temp, "close", errno, -1);
  if (::rename(temp.c_str(), path.c_str()) != 0) write_failed(path, temp, "rename", errno, -1);
}

}  // namespace gpuqos::qos
