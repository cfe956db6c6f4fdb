// The device's listening socket: AF_UNIX SOCK_SEQPACKET, refusing to take over a live server.
#pragma once

#include <string>
#include <sys/stat.h>

namespace gpuqos::simgpu::server {

// Binds and listens on `path` (non-blocking, close-on-exec) with permissions `mode`.
// If a server answers on `path`, throws "another simgpud is serving PATH"; a stale socket file
// (connection refused) is removed first. Throws std::runtime_error with a message for the user.
int open_listen_socket(const std::string& path, mode_t mode);

}  // namespace gpuqos::simgpu::server
