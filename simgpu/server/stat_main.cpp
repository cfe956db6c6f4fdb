// simgpu-stat: asks a running simgpud for its statistics and prints them as one JSON object.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <array>
#include <cerrno>
#include <cstring>
#include <iostream>
#include <optional>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include "gpuqos/simgpu/protocol.h"
#include "gpuqos/simgpu/visible_devices.h"

namespace {

namespace wire = gpuqos::simgpu::wire;

struct StatError {
  std::string message;
};

int connect_to(const std::string& path) {
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  if (path.size() >= sizeof addr.sun_path) throw StatError{"socket path too long: " + path};
  std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
  int fd = ::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
  if (fd < 0) throw StatError{std::string("socket: ") + std::strerror(errno)};
  if (::connect(fd, reinterpret_cast<const sockaddr*>(&addr), sizeof addr) != 0) {
    std::string why = std::strerror(errno);
    ::close(fd);
    throw StatError{"no simgpud is serving " + path + " (" + why + ")"};
  }
  timeval timeout{5, 0};  // a server that does not answer is as good as none
  ::setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof timeout);
  return fd;
}

// Receives one message of `type`; returns its payload.
std::vector<std::byte> receive(int fd, wire::MsgType type) {
  std::vector<std::byte> buffer(sizeof(wire::MsgHeader) + wire::kMaxPayload);
  ssize_t n = ::recv(fd, buffer.data(), buffer.size(), 0);
  if (n <= 0) throw StatError{"simgpud closed the connection or did not answer"};
  wire::MsgHeader header{};
  if (static_cast<std::size_t>(n) < sizeof header) throw StatError{"short message from simgpud"};
  std::memcpy(&header, buffer.data(), sizeof header);
  if (header.type != type || header.size != n - sizeof header) throw StatError{"unexpected message from simgpud"};
  return {buffer.begin() + sizeof header, buffer.begin() + n};
}

nlohmann::ordered_json query_stats(int fd) {
  wire::Hello hello{wire::kMagic, wire::kVersionMajor, wire::kVersionMinor, static_cast<std::uint32_t>(::getpid()), 1};
  if (!wire::send_message(fd, wire::MsgType::hello, &hello, sizeof hello)) throw StatError{"cannot send hello"};
  auto hello_payload = receive(fd, wire::MsgType::hello_reply);
  wire::HelloReply hello_reply{};
  if (hello_payload.size() < sizeof hello_reply) throw StatError{"short hello reply"};
  std::memcpy(&hello_reply, hello_payload.data(), sizeof hello_reply);
  if (hello_reply.status != 0) {
    throw StatError{"simgpud refused the connection (it speaks protocol " + std::to_string(hello_reply.version_major) +
                    "." + std::to_string(hello_reply.version_minor) + ")"};
  }
  // Which device each is, as a program's cuDeviceGetName and cuDeviceGetUuid say (nvidia-smi -L's).
  if (hello_payload.size() != sizeof hello_reply + hello_reply.device_count * sizeof(wire::DeviceInfo)) {
    throw StatError{"malformed hello reply"};
  }
  std::vector<wire::DeviceInfo> infos(hello_reply.device_count);
  for (std::uint32_t d = 0; d < hello_reply.device_count; ++d) {
    std::memcpy(&infos[d], hello_payload.data() + sizeof hello_reply + d * sizeof infos[d], sizeof infos[d]);
  }
  wire::StatsRequest request{1};
  if (!wire::send_message(fd, wire::MsgType::stats, &request, sizeof request)) throw StatError{"cannot ask for stats"};
  auto payload = receive(fd, wire::MsgType::stats_reply);
  wire::StatsReply head{};
  if (payload.size() < sizeof head) throw StatError{"short stats reply"};
  std::memcpy(&head, payload.data(), sizeof head);
  if (payload.size() != sizeof head + head.device_count * sizeof(wire::WireDeviceStats)) {
    throw StatError{"malformed stats reply"};
  }
  nlohmann::ordered_json devices = nlohmann::ordered_json::array();
  for (std::uint32_t d = 0; d < head.device_count; ++d) {
    wire::WireDeviceStats s{};
    std::memcpy(&s, payload.data() + sizeof head + d * sizeof s, sizeof s);
    nlohmann::ordered_json device = nlohmann::ordered_json::object();
    if (d < infos.size()) {
      std::array<std::uint8_t, 16> uuid{};
      std::memcpy(uuid.data(), infos[d].uuid, uuid.size());
      device["name"] = std::string(infos[d].name, strnlen(infos[d].name, sizeof infos[d].name));
      device["uuid"] = gpuqos::simgpu::uuid_text(uuid);
    }
    device.update(nlohmann::ordered_json{{"compute_busy_ns", s.compute_busy_ns},
                       {"h2d_busy_ns", s.h2d_busy_ns},
                       {"d2h_busy_ns", s.d2h_busy_ns},
                       {"local_busy_ns", s.local_busy_ns},
                       {"kernels_completed", s.kernels_completed},
                       {"copies_completed", s.copies_completed},
                       {"context_switches", s.context_switches},
                       {"memory_used_bytes", s.memory_used_bytes}});
    devices.push_back(std::move(device));
  }
  return {{"now_ns", head.now_ns}, {"clients", head.clients}, {"devices", devices}};
}

}  // namespace

int main(int argc, char** argv) {
  std::string socket_path = wire::default_socket_path();
  CLI::App app{"simgpu-stat: print a running simgpud's statistics as JSON"};
  app.add_option("--socket", socket_path, "the simgpud socket");
  CLI11_PARSE(app, argc, argv);
  try {
    int fd = connect_to(socket_path);
    nlohmann::ordered_json stats;
    try {
      stats = query_stats(fd);
    } catch (...) {
      ::close(fd);
      throw;
    }
    ::close(fd);
    std::cout << stats.dump() << "\n";
    return 0;
  } catch (const StatError& e) {
    std::cerr << "simgpu-stat: " << e.message << "\n";
    return 1;
  }
}
