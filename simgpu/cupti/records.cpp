// Building the CUPTI records: every field simgpu knows, the others as real CUPTI leaves them
// when it did not collect them (zero, UNKNOWN).
#include "records.h"

namespace gpuqos::simgpu::cupti {
namespace {

namespace act = gpuqos::simgpu::activity;

// Every record starts where the previous one ended: sizes are whole 8-byte units (PACKED_ALIGNMENT).
static_assert(sizeof(KernelRecord) % 8 == 0 && sizeof(MemcpyRecord) % 8 == 0 && sizeof(MemsetRecord) % 8 == 0 &&
              sizeof(ExternalCorrelationRecord) % 8 == 0);

std::uint8_t memcpy_kind(act::CopyKind kind) {
  switch (kind) {
    case act::CopyKind::htod: return CUPTI_ACTIVITY_MEMCPY_KIND_HTOD;
    case act::CopyKind::dtoh: return CUPTI_ACTIVITY_MEMCPY_KIND_DTOH;
    case act::CopyKind::dtod: return CUPTI_ACTIVITY_MEMCPY_KIND_DTOD;
    case act::CopyKind::htoh: return CUPTI_ACTIVITY_MEMCPY_KIND_HTOH;
    case act::CopyKind::unknown: break;
  }
  return CUPTI_ACTIVITY_MEMCPY_KIND_UNKNOWN;
}

std::uint8_t memory_kind(act::MemoryKind kind) {
  switch (kind) {
    case act::MemoryKind::pageable: return CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE;
    case act::MemoryKind::pinned: return CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
    case act::MemoryKind::device: return CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
    case act::MemoryKind::unknown: break;
  }
  return CUPTI_ACTIVITY_MEMORY_KIND_UNKNOWN;
}

}  // namespace

KernelRecord kernel_record(const act::SubmittedOp& op, CUpti_ActivityKind kernel_kind, const char* name) {
  KernelRecord r{};
  r.kind = kernel_kind;
  r.registersPerThread = 32;  // what simgpu's cuFuncGetAttribute(CU_FUNC_ATTRIBUTE_NUM_REGS) says
  r.partitionedGlobalCacheRequested = CUPTI_ACTIVITY_PARTITIONED_GLOBAL_CACHE_CONFIG_UNKNOWN;
  r.partitionedGlobalCacheExecuted = CUPTI_ACTIVITY_PARTITIONED_GLOBAL_CACHE_CONFIG_UNKNOWN;
  r.deviceId = op.device;
  r.contextId = op.context;
  r.streamId = op.stream;
  r.gridX = static_cast<std::int32_t>(op.grid[0]);
  r.gridY = static_cast<std::int32_t>(op.grid[1]);
  r.gridZ = static_cast<std::int32_t>(op.grid[2]);
  r.blockX = static_cast<std::int32_t>(op.block[0]);
  r.blockY = static_cast<std::int32_t>(op.block[1]);
  r.blockZ = static_cast<std::int32_t>(op.block[2]);
  r.staticSharedMemory = static_cast<std::int32_t>(op.static_shared_bytes);
  r.dynamicSharedMemory = static_cast<std::int32_t>(op.dynamic_shared_bytes);
  r.sharedMemoryExecuted = op.static_shared_bytes + op.dynamic_shared_bytes;
  r.correlationId = static_cast<std::uint32_t>(op.correlation);
  // Unique per launch, as CUPTI's grid id is: a graph launch's nodes share its correlation id.
  r.gridId = static_cast<std::int64_t>(op.graph_id == 0 ? op.correlation
                                                         : (std::uint64_t{1} << 62) | (op.correlation << 16) | op.graph_node);
  r.graphId = op.graph_id;
  r.graphNodeId = op.graph_id == 0 ? 0 : op.graph_node + 1;
  r.name = name;
  r.launchType = CUPTI_ACTIVITY_LAUNCH_TYPE_REGULAR;
  return r;
}

MemcpyRecord memcpy_record(const act::SubmittedOp& op) {
  MemcpyRecord r{};
  r.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  r.copyKind = memcpy_kind(op.copy_kind);
  r.srcKind = memory_kind(op.src_memory);
  r.dstKind = memory_kind(op.dst_memory);
  r.flags = op.async ? CUPTI_ACTIVITY_FLAG_MEMCPY_ASYNC : 0;
  r.bytes = op.bytes;
  r.deviceId = op.device;
  r.contextId = op.context;
  r.streamId = op.stream;
  r.correlationId = static_cast<std::uint32_t>(op.correlation);
  r.graphId = op.graph_id;
  r.graphNodeId = op.graph_id == 0 ? 0 : op.graph_node + 1;
  r.copyCount = 1;
  return r;
}

MemsetRecord memset_record(const act::SubmittedOp& op) {
  MemsetRecord r{};
  r.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  r.value = op.memset_value;
  r.bytes = op.bytes;
  r.deviceId = op.device;
  r.contextId = op.context;
  r.streamId = op.stream;
  r.correlationId = static_cast<std::uint32_t>(op.correlation);
  r.flags = op.async ? CUPTI_ACTIVITY_FLAG_MEMSET_ASYNC : 0;
  r.memoryKind = memory_kind(op.dst_memory);
  r.graphId = op.graph_id;
  r.graphNodeId = op.graph_id == 0 ? 0 : op.graph_node + 1;
  return r;
}

ExternalCorrelationRecord external_correlation_record(CUpti_ExternalCorrelationKind kind, std::uint64_t external_id,
                                                      std::uint64_t correlation) {
  ExternalCorrelationRecord r{};
  r.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
  r.externalKind = kind;
  r.externalId = external_id;
  r.correlationId = static_cast<std::uint32_t>(correlation);
  return r;
}

void set_times(InFlightRecord& record, std::uint64_t start_ns, std::uint64_t end_ns) {
  std::visit(
      [&](auto& r) {
        r.start = start_ns;
        r.end = end_ns;
        if constexpr (std::is_same_v<std::decay_t<decltype(r)>, KernelRecord>) r.completed = end_ns;
      },
      record);
}

std::size_t record_size(CUpti_ActivityKind kind) {
  switch (kind) {
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: return sizeof(KernelRecord);
    case CUPTI_ACTIVITY_KIND_MEMCPY: return sizeof(MemcpyRecord);
    case CUPTI_ACTIVITY_KIND_MEMSET: return sizeof(MemsetRecord);
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: return sizeof(ExternalCorrelationRecord);
    default: return 0;
  }
}

}  // namespace gpuqos::simgpu::cupti
