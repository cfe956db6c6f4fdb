// Validation of every client message: one decode function per message type.
#include "decode.h"

#include <cstring>

namespace gpuqos::simgpu::server {
namespace {

using Payload = std::span<const std::byte>;

Decoded fail(std::string why) { return Decoded{std::nullopt, std::move(why)}; }

Decoded ok(Request request) { return Decoded{std::move(request), {}}; }

template <class T>
T read_at(Payload payload, std::size_t offset) {
  T value;
  std::memcpy(&value, payload.data() + offset, sizeof(T));
  return value;
}

// A fixed-size message: the payload must be exactly one T.
template <class T>
bool read_exact(Payload payload, T& out) {
  if (payload.size() != sizeof(T)) return false;
  out = read_at<T>(payload, 0);
  return true;
}

Decoded size_error(const char* what, std::size_t got, std::size_t want) {
  return fail(std::string(what) + ": payload of " + std::to_string(got) + " bytes, expected " + std::to_string(want));
}

bool valid_op_id(std::uint64_t op) { return op != 0 && op < kClientOpIdLimit; }

Decoded decode_hello(Payload payload) {
  constexpr std::size_t kVersionBytes = offsetof(wire::Hello, pid);
  if (payload.size() < kVersionBytes) return size_error("hello", payload.size(), sizeof(wire::Hello));
  wire::Hello hello{};
  std::memcpy(&hello, payload.data(), kVersionBytes);
  bool current = hello.magic == wire::kMagic && hello.version_major == wire::kVersionMajor;
  if (!current) return ok(hello);  // refused by the server with a HelloReply, whatever its size
  if (!read_exact(payload, hello)) return size_error("hello", payload.size(), sizeof(wire::Hello));
  if (hello.observer > 1) return fail("hello: observer must be 0 or 1");
  return ok(hello);
}

Decoded decode_create_context(Payload payload, std::uint32_t device_count) {
  wire::CreateContext msg{};
  if (!read_exact(payload, msg)) return size_error("create_context", payload.size(), sizeof msg);
  if (msg.device >= device_count) return fail("create_context: device " + std::to_string(msg.device) + " out of range");
  return ok(msg);
}

Decoded decode_destroy_context(Payload payload) {
  wire::DestroyContext msg{};
  if (!read_exact(payload, msg)) return size_error("destroy_context", payload.size(), sizeof msg);
  return ok(msg);
}

Decoded decode_create_stream(Payload payload) {
  wire::CreateStream msg{};
  if (!read_exact(payload, msg)) return size_error("create_stream", payload.size(), sizeof msg);
  if (static_cast<std::uint32_t>(msg.kind) > static_cast<std::uint32_t>(wire::WireStreamKind::non_blocking)) {
    return fail("create_stream: bad stream kind");
  }
  return ok(msg);
}

Decoded decode_destroy_stream(Payload payload) {
  wire::DestroyStream msg{};
  if (!read_exact(payload, msg)) return size_error("destroy_stream", payload.size(), sizeof msg);
  return ok(msg);
}

Decoded decode_register_kernel(Payload payload) {
  if (payload.size() < sizeof(wire::RegisterKernel)) {
    return size_error("register_kernel", payload.size(), sizeof(wire::RegisterKernel));
  }
  auto head = read_at<wire::RegisterKernel>(payload, 0);
  if (head.name_len == 0 || head.name_len > wire::kMaxKernelName) return fail("register_kernel: bad name length");
  if (payload.size() != sizeof head + head.name_len) {
    return size_error("register_kernel", payload.size(), sizeof head + head.name_len);
  }
  RegisterKernelRequest request;
  request.request = head.request;
  request.kernel = head.kernel;
  request.name.assign(reinterpret_cast<const char*>(payload.data() + sizeof head), head.name_len);
  return ok(std::move(request));
}

// Checks one operation (or graph node); empty when it is well formed.
std::string check_op(const wire::WireOp& op) {
  if (static_cast<unsigned>(op.kind) > static_cast<unsigned>(wire::WireOpKind::graph)) return "bad op kind";
  if (static_cast<unsigned>(op.engine) > static_cast<unsigned>(wire::WireEngine::local)) return "bad engine";
  if (op.pageable > 1 || op.has_duration_arg > 1) return "bad flag";
  if (op.kind == wire::WireOpKind::kernel && op.blocks == 0) return "kernel with 0 blocks";
  return {};
}

bool is_graph_node_kind(wire::WireOpKind kind) {
  return kind == wire::WireOpKind::kernel || kind == wire::WireOpKind::copy || kind == wire::WireOpKind::memset;
}

// The number of tail items a submit of this kind may carry and their size.
struct TailShape {
  std::uint32_t max_items;
  std::size_t item_bytes;
};

TailShape tail_shape(wire::WireOpKind kind) {
  if (kind == wire::WireOpKind::wait) return {wire::kMaxWaitDeps, sizeof(std::uint64_t)};
  if (kind == wire::WireOpKind::graph) return {wire::kMaxGraphNodes, sizeof(wire::WireOp)};
  return {0, 0};
}

Decoded decode_submit(Payload payload) {
  if (payload.size() < sizeof(wire::Submit)) return size_error("submit", payload.size(), sizeof(wire::Submit));
  SubmitRequest request;
  request.head = read_at<wire::Submit>(payload, 0);
  const wire::Submit& head = request.head;
  if (!valid_op_id(head.op)) return fail("submit: op id must be in [1, 2^40)");
  if (std::string why = check_op(head.spec); !why.empty()) return fail("submit: " + why);
  TailShape shape = tail_shape(head.spec.kind);
  if (head.extra > shape.max_items) return fail("submit: too many extra items");
  std::size_t want = sizeof head + std::size_t{head.extra} * shape.item_bytes;
  if (payload.size() != want) return size_error("submit", payload.size(), want);
  for (std::uint32_t i = 0; i < head.extra; ++i) {
    std::size_t offset = sizeof head + i * shape.item_bytes;
    if (head.spec.kind == wire::WireOpKind::wait) {
      auto dep = read_at<std::uint64_t>(payload, offset);
      if (dep >= kClientOpIdLimit) return fail("submit: wait dependency id out of range");
      request.wait_for.push_back(dep);
    } else {
      auto node = read_at<wire::WireOp>(payload, offset);
      if (std::string why = check_op(node); !why.empty()) return fail("submit: graph node: " + why);
      if (!is_graph_node_kind(node.kind)) return fail("submit: graph node must be a kernel, copy or memset");
      request.graph_nodes.push_back(node);
    }
  }
  return ok(std::move(request));
}

Decoded decode_host_func_done(Payload payload) {
  wire::HostFuncDone msg{};
  if (!read_exact(payload, msg)) return size_error("host_func_done", payload.size(), sizeof msg);
  if (!valid_op_id(msg.op)) return fail("host_func_done: op id must be in [1, 2^40)");
  return ok(msg);
}

Decoded decode_mem_alloc(Payload payload, std::uint32_t device_count) {
  wire::MemAlloc msg{};
  if (!read_exact(payload, msg)) return size_error("mem_alloc", payload.size(), sizeof msg);
  if (msg.device >= device_count) return fail("mem_alloc: device out of range");
  return ok(msg);
}

Decoded decode_mem_free(Payload payload, std::uint32_t device_count) {
  wire::MemFree msg{};
  if (!read_exact(payload, msg)) return size_error("mem_free", payload.size(), sizeof msg);
  if (msg.device >= device_count) return fail("mem_free: device out of range");
  return ok(msg);
}

Decoded decode_mem_info(Payload payload, std::uint32_t device_count) {
  wire::MemInfo msg{};
  if (!read_exact(payload, msg)) return size_error("mem_info", payload.size(), sizeof msg);
  if (msg.device >= device_count) return fail("mem_info: device out of range");
  return ok(msg);
}

Decoded decode_stats(Payload payload) {
  wire::StatsRequest msg{};
  if (!read_exact(payload, msg)) return size_error("stats", payload.size(), sizeof msg);
  return ok(msg);
}

}  // namespace

Decoded decode_message(std::span<const std::byte> message, std::uint32_t device_count) {
  if (message.size() < sizeof(wire::MsgHeader)) return fail("message shorter than its header");
  auto header = read_at<wire::MsgHeader>(message, 0);
  Payload payload = message.subspan(sizeof header);
  if (header.size != payload.size()) return fail("header size does not match the record");
  if (payload.size() > wire::kMaxPayload) return fail("payload larger than kMaxPayload");
  using wire::MsgType;
  switch (header.type) {
    case MsgType::hello: return decode_hello(payload);
    case MsgType::create_context: return decode_create_context(payload, device_count);
    case MsgType::destroy_context: return decode_destroy_context(payload);
    case MsgType::create_stream: return decode_create_stream(payload);
    case MsgType::destroy_stream: return decode_destroy_stream(payload);
    case MsgType::register_kernel: return decode_register_kernel(payload);
    case MsgType::submit: return decode_submit(payload);
    case MsgType::host_func_done: return decode_host_func_done(payload);
    case MsgType::mem_alloc: return decode_mem_alloc(payload, device_count);
    case MsgType::mem_free: return decode_mem_free(payload, device_count);
    case MsgType::mem_info: return decode_mem_info(payload, device_count);
    case MsgType::stats: return decode_stats(payload);
    default: break;
  }
  return fail("unknown message type " + std::to_string(static_cast<std::uint32_t>(header.type)));
}

}  // namespace gpuqos::simgpu::server
