// Plain-socket HTTP on 127.0.0.1 for tests of the metrics endpoint: a free port, one exchange.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/time.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "gpuqos/scheduler/unix_socket.h"

namespace gpuqos::testing {

// A TCP port on 127.0.0.1 nothing listens on right now (bound to port 0, read, closed).
inline std::uint16_t free_port() {
  scheduler::FileDescriptor probe(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t length = sizeof address;
  if (::bind(probe.get(), reinterpret_cast<sockaddr*>(&address), sizeof address) != 0 ||
      ::getsockname(probe.get(), reinterpret_cast<sockaddr*>(&address), &length) != 0) {
    throw std::runtime_error("cannot find a free port");
  }
  return ntohs(address.sin_port);
}

// The address 127.0.0.1:port.
inline sockaddr_in loopback(std::uint16_t port) {
  sockaddr_in address{};
  address.sin_family = AF_INET;
  address.sin_port = htons(port);
  address.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  return address;
}

// A TCP connection to 127.0.0.1:port whose reads give up after 5 s; not valid() if nobody listens.
inline scheduler::FileDescriptor connect_loopback(std::uint16_t port) {
  scheduler::FileDescriptor socket(::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
  const timeval timeout{5, 0};
  ::setsockopt(socket.get(), SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  const sockaddr_in address = loopback(port);
  if (::connect(socket.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) return {};
  return socket;
}

// Everything the peer sends until it closes (or 5 s pass without a byte).
inline std::string receive_all(const scheduler::FileDescriptor& socket) {
  std::string response;
  char buffer[4096];
  for (ssize_t got; (got = ::recv(socket.get(), buffer, sizeof buffer, 0)) > 0;) response.append(buffer, static_cast<std::size_t>(got));
  return response;
}

// Sends `request` to 127.0.0.1:port; the whole answer ("" when nobody listens or nothing comes
// within 5 s).
inline std::string http_exchange(std::uint16_t port, const std::string& request) {
  const scheduler::FileDescriptor socket = connect_loopback(port);
  if (!socket.valid()) return "";
  if (::send(socket.get(), request.data(), request.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(request.size())) return "";
  return receive_all(socket);
}

// GET `path` from 127.0.0.1:port; the whole response, or "" if nothing answers.
inline std::string http_get(std::uint16_t port, const std::string& path) {
  return http_exchange(port, "GET " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n");
}

}  // namespace gpuqos::testing
