// Binding the device socket, with detection of a live or stale previous server.
#include "listen_socket.h"

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

namespace gpuqos::simgpu::server {
namespace {

std::runtime_error sys_error(const std::string& what, const std::string& path) {
  return std::runtime_error(what + " " + path + ": " + std::strerror(errno));
}

sockaddr_un make_address(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.empty() || path.size() >= sizeof addr.sun_path) {
    throw std::runtime_error("socket path '" + path + "' is empty or longer than " +
                             std::to_string(sizeof addr.sun_path - 1) + " bytes");
  }
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  return addr;
}

// Removes a stale socket file at `path`; throws if a server answers there or it is not a socket.
void clear_previous(const std::string& path, const sockaddr_un& addr) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0) return;  // nothing there
  if (!S_ISSOCK(st.st_mode)) throw std::runtime_error(path + " exists and is not a socket");
  int probe = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (probe < 0) throw sys_error("cannot create a socket to probe", path);
  int rc = ::connect(probe, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  int saved = errno;
  ::close(probe);
  if (rc == 0) throw std::runtime_error("another simgpud is serving " + path);
  if (saved != ECONNREFUSED) {
    errno = saved;
    throw sys_error("cannot probe", path);
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) throw sys_error("cannot remove stale socket", path);
}

}  // namespace

int open_listen_socket(const std::string& path, mode_t mode) {
  sockaddr_un addr = make_address(path);
  clear_previous(path, addr);
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) throw sys_error("cannot create socket for", path);
  mode_t old_mask = ::umask(0777 & ~mode);  // the file is born with `mode`: no window for others
  int rc = ::bind(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr);
  int saved = errno;
  ::umask(old_mask);
  if (rc != 0 || ::chmod(path.c_str(), mode) != 0 || ::listen(fd, 64) != 0) {
    if (rc != 0) errno = saved;
    auto error = sys_error("cannot listen on", path);
    ::close(fd);
    if (rc == 0) ::unlink(path.c_str());
    throw error;
  }
  return fd;
}

}  // namespace gpuqos::simgpu::server
