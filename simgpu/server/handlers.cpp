// simgpud's answers to each client request, after decode_message() has validated it.
#include <algorithm>
#include <variant>

#include <spdlog/spdlog.h>

#include "device_info.h"
#include "server.h"

namespace gpuqos::simgpu::server {
namespace {

// Clients choose durations and sizes: cap them where the engine's int64 clock stays far from
// overflow (about 11.6 days of device time, 1 PiB), whatever the time_scale.
constexpr Nanos kMaxKernelNs = 1'000'000'000'000'000;
constexpr std::uint64_t kMaxCopyBytes = std::uint64_t{1} << 50;

// Kernel names come from clients: keep log lines bounded.
std::string loggable(const std::string& name) { return name.size() <= 200 ? name : name.substr(0, 200) + "..."; }

}  // namespace

void Server::on_message(Session& session, std::span<const std::byte> message) {
  Decoded decoded = decode_message(message, device_count());
  if (!decoded.request) return doom(session, "sent a bad message (" + decoded.error + ")");
  const Request& request = *decoded.request;
  bool is_hello = std::holds_alternative<wire::Hello>(request);
  if (is_hello && session.greeted) return doom(session, "sent a second hello");
  if (!is_hello && !session.greeted) return doom(session, "sent a message before hello");
  if (session.observer && !std::holds_alternative<wire::StatsRequest>(request)) {
    return doom(session, "is an observer and may only ask for stats");
  }
  std::visit([&](const auto& msg) { handle(session, msg); }, request);
}

void Server::handle(Session& session, const wire::Hello& msg) {
  wire::HelloReply reply{0, wire::kVersionMajor, wire::kVersionMinor, 0, session.number, start_monotonic_ns_};
  if (msg.magic != wire::kMagic || msg.version_major != wire::kVersionMajor) {
    reply.status = 1;
    send(session, wire::MsgType::hello_reply, &reply, sizeof reply);
    return doom(session, fmt::format("refused: magic {:#x}, protocol {}.{}, this server speaks {}.{}", msg.magic,
                                     msg.version_major, msg.version_minor, wire::kVersionMajor,
                                     wire::kVersionMinor));
  }
  session.greeted = true;
  session.observer = msg.observer != 0;
  session.memory_bytes.assign(device_count(), 0);
  std::vector<wire::DeviceInfo> devices;
  for (int d = 0; d < engine_.device_count(); ++d) devices.push_back(make_device_info(d, engine_.profile(d)));
  reply.device_count = device_count();
  send(session, wire::MsgType::hello_reply, &reply, sizeof reply, devices.data(),
       devices.size() * sizeof(wire::DeviceInfo));
  if (!session.observer) spdlog::info("client pid {} connected (session {})", session.pid, session.number);
}

void Server::handle(Session& session, const wire::CreateContext& msg) {
  EngineStatus status = engine_.create_context(session.context_id(msg.ctx), static_cast<int>(msg.device));
  if (status == EngineStatus::ok) {
    session.contexts.insert(msg.ctx);
  } else {
    spdlog::warn("client pid {}: create_context {} failed: {}", session.pid, msg.ctx, to_string(status));
  }
}

void Server::handle(Session& session, const wire::DestroyContext& msg) {
  EngineEvents events;
  EngineStatus status = engine_.destroy_context(session.context_id(msg.ctx), events);
  session.contexts.erase(msg.ctx);
  deliver(events);
  if (status != EngineStatus::ok) {
    spdlog::warn("client pid {}: destroy_context {} failed: {}", session.pid, msg.ctx, to_string(status));
  }
}

void Server::handle(Session& session, const wire::CreateStream& msg) {
  auto kind = static_cast<StreamKind>(msg.kind);  // same order; decode checked the range
  EngineStatus status = engine_.create_stream(session.stream_id(msg.stream), session.context_id(msg.ctx), kind);
  if (status != EngineStatus::ok) {
    spdlog::warn("client pid {}: create_stream {} failed: {}", session.pid, msg.stream, to_string(status));
  }
}

void Server::handle(Session& session, const wire::DestroyStream& msg) {
  EngineEvents events;
  EngineStatus status = engine_.destroy_stream(session.stream_id(msg.stream), events);
  deliver(events);
  if (status != EngineStatus::ok) {
    spdlog::warn("client pid {}: destroy_stream {} failed: {}", session.pid, msg.stream, to_string(status));
  }
}

void Server::handle(Session& session, const RegisterKernelRequest& msg) {
  KernelModel model = catalog_.resolve(msg.name);
  if (model.kind == KernelModel::Kind::unknown && warned_kernel_names_.insert(msg.name).second) {
    spdlog::warn("kernel '{}' (client pid {}) is not in the catalog: it takes the default {} us",
                 loggable(msg.name), session.pid, catalog_.default_us());
  }
  session.kernels[msg.kernel] = model;
  std::uint64_t arg_index = model.kind == KernelModel::Kind::from_arg ? static_cast<std::uint64_t>(model.arg) + 1 : 0;
  reply(session, msg.request, wire::ReplyStatus::ok, arg_index);
}

Nanos Server::kernel_duration_ns(Session& session, const wire::WireOp& op) {
  KernelModel model;  // Kind::unknown: default_us
  if (auto it = session.kernels.find(op.kernel); it != session.kernels.end()) {
    model = it->second;
  } else if (session.warned_kernel_ids.insert(op.kernel).second) {
    spdlog::warn("client pid {} launched kernel id {} it never registered: it takes the default {} us",
                 session.pid, op.kernel, catalog_.default_us());
  }
  LaunchShape shape{op.blocks, op.has_duration_arg ? std::optional(op.duration_arg) : std::nullopt};
  return std::min(catalog_.duration_ns(model, shape), kMaxKernelNs);
}

OpSpec Server::to_op_spec(Session& session, const wire::WireOp& op) {
  OpSpec spec;
  spec.kind = static_cast<OpKind>(op.kind);  // same order; decode checked the range
  switch (op.kind) {
    case wire::WireOpKind::kernel:
      spec.kernel_ns = kernel_duration_ns(session, op);
      spec.blocks = op.blocks;
      break;
    case wire::WireOpKind::copy:
    case wire::WireOpKind::memset:
      spec.engine = static_cast<CopyEngine>(op.engine);
      spec.bytes = std::min(op.bytes, kMaxCopyBytes);
      spec.pageable = op.kind == wire::WireOpKind::copy && op.pageable != 0;
      break;
    default:
      break;
  }
  return spec;
}

void Server::handle(Session& session, const SubmitRequest& msg) {
  advance_to_sent(msg.head.sent_ns);
  OpSpec spec = to_op_spec(session, msg.head.spec);
  for (std::uint64_t dep : msg.wait_for) spec.wait_for.push_back(session.op_id(dep));
  for (const wire::WireOp& node : msg.graph_nodes) spec.graph_nodes.push_back(to_op_spec(session, node));
  EngineEvents events;
  EngineStatus status =
      engine_.submit(session.stream_id(msg.head.stream), session.op_id(msg.head.op), std::move(spec), events);
  deliver(events);
  if (status == EngineStatus::ok) return;
  spdlog::warn("client pid {}: op {} on stream {} refused: {}", session.pid, msg.head.op, msg.head.stream,
               to_string(status));
  // The client waits for every op it submits: answer at once, as complete with an error.
  wire::CompletionMsg refused{msg.head.op, engine_.now(), engine_.now(), static_cast<std::int32_t>(status), 0};
  send(session, wire::MsgType::completion, &refused, sizeof refused);
}

void Server::handle(Session& session, const wire::HostFuncDone& msg) {
  advance_to_sent(msg.sent_ns);
  EngineEvents events;
  EngineStatus status = engine_.host_func_done(session.op_id(msg.op), events);
  deliver(events);
  if (status != EngineStatus::ok) {
    spdlog::warn("client pid {}: host_func_done for op {}: {}", session.pid, msg.op, to_string(status));
  }
}

void Server::handle(Session& session, const wire::MemAlloc& msg) {
  std::uint64_t capacity = engine_.profile(static_cast<int>(msg.device)).memory_bytes();
  std::uint64_t& used = memory_used_bytes_[msg.device];
  if (msg.bytes > capacity - std::min(used, capacity)) {
    spdlog::debug("client pid {}: mem_alloc of {} bytes on device {}: out of memory", session.pid, msg.bytes,
                  msg.device);
    return reply(session, msg.request, wire::ReplyStatus::out_of_memory);
  }
  used += msg.bytes;
  session.memory_bytes[msg.device] += msg.bytes;
  reply(session, msg.request, wire::ReplyStatus::ok);
}

void Server::handle(Session& session, const wire::MemFree& msg) {
  std::uint64_t freed = std::min(msg.bytes, session.memory_bytes[msg.device]);
  session.memory_bytes[msg.device] -= freed;
  memory_used_bytes_[msg.device] -= std::min(freed, memory_used_bytes_[msg.device]);
}

void Server::handle(Session& session, const wire::MemInfo& msg) {
  std::uint64_t capacity = engine_.profile(static_cast<int>(msg.device)).memory_bytes();
  std::uint64_t used = std::min(memory_used_bytes_[msg.device], capacity);
  reply(session, msg.request, wire::ReplyStatus::ok, capacity - used, capacity);
}

void Server::handle(Session& session, const wire::StatsRequest& msg) {
  // To now, not to the last due event: an idle device's clock must not lag (a window between two
  // reads would be longer than it was, and a busy share over it too small).
  advance_to_sent(0);
  auto clients = std::count_if(sessions_.begin(), sessions_.end(), [](const auto& entry) {
    const Session& s = *entry.second;
    return s.greeted && !s.observer && !s.closing;
  });
  wire::StatsReply head{msg.request, engine_.now(), device_count(), static_cast<std::uint32_t>(clients)};
  std::vector<wire::WireDeviceStats> devices;
  for (int d = 0; d < engine_.device_count(); ++d) {
    DeviceStats s = engine_.stats(d);
    devices.push_back({s.compute_busy_ns, s.h2d_busy_ns, s.d2h_busy_ns, s.local_busy_ns, s.kernels_completed,
                       s.copies_completed, s.context_switches, memory_used_bytes_[static_cast<std::size_t>(d)]});
  }
  send(session, wire::MsgType::stats_reply, &head, sizeof head, devices.data(),
       devices.size() * sizeof(wire::WireDeviceStats));
}

void Server::reply(Session& session, std::uint64_t request, wire::ReplyStatus status, std::uint64_t value0,
                   std::uint64_t value1) {
  wire::Reply msg{request, status, 0, value0, value1};
  send(session, wire::MsgType::reply, &msg, sizeof msg);
}

}  // namespace gpuqos::simgpu::server
