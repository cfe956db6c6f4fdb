// Activity hooks: the subscriber (simgpu's libcupti) and the reports the API functions make to it.
#include "activity.h"

#include <atomic>

#include "gpuqos/simgpu/activity.h"

namespace gpuqos::simgpu::driver {
namespace {

namespace act = gpuqos::simgpu::activity;

// The one piece of state: who listens. Static storage (constant-initialised), never destroyed.
std::atomic<const act::Hooks*> subscriber{nullptr};

// The subscriber, or nullptr. The relaxed load is the whole cost when nobody listens; the acquire
// load (the same instruction on x86-64) makes the table's contents visible to this thread.
const act::Hooks* hooks() {
  if (!subscriber.load(std::memory_order_relaxed)) return nullptr;
  return subscriber.load(std::memory_order_acquire);
}

act::SubmittedOp op_on(act::OpKind kind, std::uint64_t op_id, const CUstream_st& stream) {
  act::SubmittedOp op{};
  op.kind = kind;
  op.correlation = op_id;
  op.stream = stream.id;
  op.context = stream.ctx ? stream.ctx->id : 0;
  op.device = stream.ctx ? static_cast<std::uint32_t>(stream.ctx->device) : 0;
  return op;
}

act::MemoryKind memory_kind(const void* p, std::size_t bytes) {
  if (find_allocation(reinterpret_cast<std::uintptr_t>(p), bytes)) return act::MemoryKind::device;
  return is_pinned(p, bytes) ? act::MemoryKind::pinned : act::MemoryKind::pageable;
}

act::CopyKind copy_kind(act::MemoryKind src, act::MemoryKind dst) {
  const bool src_device = src == act::MemoryKind::device, dst_device = dst == act::MemoryKind::device;
  if (src_device && dst_device) return act::CopyKind::dtod;
  if (dst_device) return act::CopyKind::htod;
  if (src_device) return act::CopyKind::dtoh;
  return act::CopyKind::htoh;
}

// Sends `op` to the subscriber for a submitted op, or keeps it as the report of the node a capture
// just recorded (op_id 0 on a capturing stream).
void report(const act::Hooks& h, std::uint64_t op_id, const CUstream_st& stream, act::SubmittedOp op,
            std::string name = {}) {
  if (op_id != 0) {
    h.submitted(&op);
    return;
  }
  if (!stream.capture || stream.capture->nodes.empty()) return;
  auto node = std::make_shared<NodeReport>(NodeReport{op, std::move(name)});
  node->op.name = nullptr;
  stream.capture->nodes.back().report = std::move(node);
}

}  // namespace

void report_kernel(std::uint64_t op_id, const CUfunc_st& fn, const CUstream_st& stream, const KernelShape& shape) {
  const act::Hooks* h = hooks();
  if (!h) return;
  act::SubmittedOp op = op_on(act::OpKind::kernel, op_id, stream);
  op.name = fn.entry.name.c_str();
  for (int i = 0; i < 3; ++i) {
    op.grid[i] = shape.grid[i];
    op.block[i] = shape.block[i];
  }
  op.dynamic_shared_bytes = shape.shared_bytes;
  op.static_shared_bytes = 0;  // as cuFuncGetAttribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES) says
  report(*h, op_id, stream, op, op_id == 0 ? fn.entry.name : std::string());
}

void report_copy(std::uint64_t op_id, const CUstream_st& stream, const void* dst, const void* src, std::size_t bytes,
                 bool async) {
  const act::Hooks* h = hooks();
  if (!h) return;
  act::SubmittedOp op = op_on(act::OpKind::memcpy, op_id, stream);
  op.async = async;
  op.bytes = bytes;
  op.src_memory = memory_kind(src, bytes);
  op.dst_memory = memory_kind(dst, bytes);
  op.copy_kind = copy_kind(op.src_memory, op.dst_memory);
  report(*h, op_id, stream, op);
}

void report_memset(std::uint64_t op_id, const CUstream_st& stream, std::size_t bytes, std::uint32_t value, bool async) {
  const act::Hooks* h = hooks();
  if (!h) return;
  act::SubmittedOp op = op_on(act::OpKind::memset, op_id, stream);
  op.async = async;
  op.bytes = bytes;
  op.dst_memory = act::MemoryKind::device;
  op.memset_value = value;
  report(*h, op_id, stream, op);
}

void report_graph_launch(std::uint64_t op_id, const CUstream_st& stream, const GraphExec& exec) {
  const act::Hooks* h = hooks();
  if (!h || op_id == 0) return;
  std::uint32_t reported = 0;
  for (const GraphNode& node : exec.nodes) {
    if (!node.report) continue;
    act::SubmittedOp op = node.report->op;
    const act::SubmittedOp on = op_on(op.kind, op_id, stream);
    op.correlation = on.correlation;
    op.stream = on.stream;
    op.context = on.context;
    op.device = on.device;
    op.name = op.kind == act::OpKind::kernel ? node.report->name.c_str() : nullptr;
    op.graph_id = exec.id;
    op.graph_node = reported++;
    h->submitted(&op);
  }
}

void report_completion(const wire::CompletionMsg& msg) {
  const act::Hooks* h = hooks();
  if (!h) return;
  const std::int64_t epoch = driver().epoch_monotonic_ns;  // device time 0 on CLOCK_MONOTONIC
  act::Completion completion{msg.op, msg.start_ns + epoch, msg.end_ns + epoch, msg.status, 0};
  h->completed(&completion);
}

}  // namespace gpuqos::simgpu::driver

SIMGPU_EXPORT int simgpuActivitySubscribe(const gpuqos::simgpu::activity::Hooks* hooks) {
  if (hooks && hooks->version != gpuqos::simgpu::activity::kVersion) return -1;
  gpuqos::simgpu::driver::subscriber.store(hooks, std::memory_order_release);
  return 0;
}
