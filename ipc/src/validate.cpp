// validate_op / validate_completion: field-by-field checks of untrusted descriptors.
#include "gpuqos/ipc/validate.h"

#include <string>

namespace gpuqos::ipc {
namespace {

std::string str(std::uint64_t value) { return std::to_string(value); }

Error bad(const std::string& why) { return Error{"op descriptor: " + why}; }

bool all_zero(const std::uint32_t (&values)[3]) { return values[0] == 0 && values[1] == 0 && values[2] == 0; }

Status check_launch_geometry(const OpDescriptor& op) {
  const std::uint32_t grid_limits[3] = {kMaxGridX, kMaxGridYZ, kMaxGridYZ};
  const std::uint32_t block_limits[3] = {kMaxBlockXY, kMaxBlockXY, kMaxBlockZ};
  for (int axis = 0; axis < 3; ++axis) {
    if (op.grid[axis] == 0 || op.grid[axis] > grid_limits[axis]) {
      return bad("grid[" + str(axis) + "] = " + str(op.grid[axis]) + " not in 1.." + str(grid_limits[axis]));
    }
    if (op.block[axis] == 0 || op.block[axis] > block_limits[axis]) {
      return bad("block[" + str(axis) + "] = " + str(op.block[axis]) + " not in 1.." + str(block_limits[axis]));
    }
  }
  std::uint64_t threads = std::uint64_t{op.block[0]} * op.block[1] * op.block[2];
  if (threads > kMaxThreadsPerBlock) return bad(str(threads) + " threads per block, more than 1024");
  return {};
}

Status check_kernel(const OpDescriptor& op) {
  if (op.kernel_id == 0) return bad("kernel without a kernel id");
  if (Status geometry = check_launch_geometry(op); !geometry) return geometry;
  if (op.shared_bytes > kMaxSharedBytesPerBlock) return bad("shared_bytes " + str(op.shared_bytes) + " over the limit");
  if (op.param_bytes > kMaxParamBytes) return bad("param_bytes " + str(op.param_bytes) + " over the limit");
  if (op.arg_count > kMaxScalarArgs) return bad("arg_count " + str(op.arg_count) + " > 8");
  if (op.sm_count > kMaxSmCount) return bad("sm_count " + str(op.sm_count) + " over the limit");
  if (op.bytes != 0 || op.direction != CopyDirection::none || op.host_memory != HostMemory::none) {
    return bad("kernel with copy fields");
  }
  return {};
}

// Everything but a kernel: no launch geometry, no arguments.
Status check_no_launch_fields(const OpDescriptor& op) {
  if (!all_zero(op.grid) || !all_zero(op.block) || op.shared_bytes != 0 || op.param_bytes != 0 || op.arg_count != 0) {
    return bad("launch geometry or arguments on an op that is not a kernel");
  }
  if (op.kind != OpKind::graph && op.kernel_id != 0) return bad("kernel id on an op that is not a kernel or graph");
  return {};
}

Status check_copy(const OpDescriptor& op) {
  switch (op.direction) {
    case CopyDirection::h2d:
    case CopyDirection::d2h:
      if (op.host_memory != HostMemory::pinned && op.host_memory != HostMemory::pageable) {
        return bad("host copy without pinned or pageable host memory");
      }
      break;
    case CopyDirection::d2d:
      if (op.host_memory != HostMemory::none) return bad("device-to-device copy with host memory");
      break;
    default: return bad("copy direction " + str(static_cast<unsigned>(op.direction)) + " is not h2d, d2h or d2d");
  }
  return {};
}

Status check_by_kind(const OpDescriptor& op) {
  if (op.kind == OpKind::kernel) return check_kernel(op);
  if (Status clean = check_no_launch_fields(op); !clean) return clean;
  if (op.bytes > kMaxOpBytes) return bad("bytes " + str(op.bytes) + " over the limit");
  switch (op.kind) {
    case OpKind::copy: return check_copy(op);
    case OpKind::memset:
      if (op.direction != CopyDirection::memset || op.host_memory != HostMemory::none) {
        return bad("memset must have direction memset and no host memory");
      }
      return {};
    default:  // graph, sync, query marks
      if (op.direction != CopyDirection::none || op.host_memory != HostMemory::none || op.bytes != 0) {
        return bad("copy fields on a graph, sync or query mark");
      }
      return {};
  }
}

}  // namespace

Status validate_op(const OpDescriptor& op, std::uint64_t previous_seq, std::uint32_t device_count) {
  if (static_cast<std::uint8_t>(op.kind) >= kOpKindCount) return bad("kind " + str(static_cast<unsigned>(op.kind)) + " unknown");
  if (op.seq <= previous_seq) return bad("seq " + str(op.seq) + " not after the previous " + str(previous_seq));
  if (op.device >= device_count) return bad("device " + str(op.device) + " out of range");
  if (op.posted_ns <= 0) return bad("posted_ns " + std::to_string(op.posted_ns) + " is not a monotonic time");
  return check_by_kind(op);
}

Status validate_completion(const CompletionDescriptor& completion, std::uint64_t highest_posted_seq) {
  if (completion.seq == 0 || completion.seq > highest_posted_seq) {
    return Error{"completion: seq " + str(completion.seq) + " was never posted (highest " + str(highest_posted_seq) + ")"};
  }
  if (completion.start_ns < 0 || completion.end_ns < completion.start_ns) {
    return Error{"completion: times " + std::to_string(completion.start_ns) + ".." + std::to_string(completion.end_ns) +
                 " are not an interval"};
  }
  return {};
}

}  // namespace gpuqos::ipc
