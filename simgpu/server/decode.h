// Decoding of client messages: the one place where simgpud validates what a client sends.
//
// Everything read from a client socket is untrusted. decode_message() checks the header, the
// exact payload size, enum ranges, id ranges and variable tails, and returns either a typed
// request or the reason it was rejected. It has no side effects, so unit tests feed it garbage.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <variant>
#include <vector>

#include "gpuqos/simgpu/protocol.h"

namespace gpuqos::simgpu::server {

// Client op ids live in 40 bits: the server maps them to (session << 40 | op).
inline constexpr std::uint64_t kClientOpIdLimit = std::uint64_t{1} << 40;

struct RegisterKernelRequest {
  std::uint64_t request = 0;
  std::uint32_t kernel = 0;
  std::string name;
};

struct SubmitRequest {
  wire::Submit head{};
  std::vector<std::uint64_t> wait_for;    // kind wait: client op ids
  std::vector<wire::WireOp> graph_nodes;  // kind graph: kernels, copies and memsets
};

using Request = std::variant<wire::Hello, wire::CreateContext, wire::DestroyContext, wire::CreateStream,
                             wire::DestroyStream, RegisterKernelRequest, SubmitRequest, wire::HostFuncDone,
                             wire::MemAlloc, wire::MemFree, wire::MemInfo, wire::StatsRequest>;

struct Decoded {
  std::optional<Request> request;
  std::string error;  // why the message was rejected, when request is empty
};

// One whole record as received (header + payload). device_count bounds device indices.
// A Hello with another magic or major version decodes (so the server can refuse it politely);
// its other fields are then zero unless the payload had the current size.
Decoded decode_message(std::span<const std::byte> message, std::uint32_t device_count);

}  // namespace gpuqos::simgpu::server
