// OpDescriptor -> features.
#include "gpuqos/predictor/features.h"

#include <algorithm>
#include <optional>

namespace gpuqos::predictor {

namespace {

LaunchShape shape_of(const ipc::OpDescriptor& op) {
  LaunchShape shape;
  for (std::size_t d = 0; d < 3; ++d) {
    shape.grid[d] = std::max<std::uint32_t>(op.grid[d], 1);
    shape.block[d] = std::max<std::uint32_t>(op.block[d], 1);
  }
  shape.shared_bytes = op.shared_bytes;
  shape.arg_count = static_cast<std::uint8_t>(std::min<std::size_t>(op.arg_count, kMaxArgs));
  std::copy_n(op.args, shape.arg_count, shape.args.begin());
  return shape;
}

std::optional<CopyDirection> direction_of(ipc::CopyDirection direction) {
  switch (direction) {
    case ipc::CopyDirection::h2d: return CopyDirection::h2d;
    case ipc::CopyDirection::d2h: return CopyDirection::d2h;
    case ipc::CopyDirection::d2d: return CopyDirection::d2d;
    case ipc::CopyDirection::memset: return CopyDirection::memset;
    case ipc::CopyDirection::none: break;
  }
  return std::nullopt;
}

HostMemory host_memory_of(ipc::HostMemory memory) {
  switch (memory) {
    case ipc::HostMemory::pinned: return HostMemory::pinned;
    case ipc::HostMemory::pageable: return HostMemory::pageable;
    case ipc::HostMemory::none: break;
  }
  return HostMemory::none;
}

}  // namespace

OpFeatures features_of(const ipc::OpDescriptor& op, std::string_view kernel_name) {
  OpFeatures features;
  switch (op.kind) {
    case ipc::OpKind::kernel:
      features.op_class = OpClass::kernel;
      features.kernel = {kernel_name, shape_of(op)};
      break;
    case ipc::OpKind::graph:
      features.op_class = OpClass::kernel;
      features.kernel = {kernel_name, LaunchShape{}};
      break;
    case ipc::OpKind::copy:
    case ipc::OpKind::memset: {
      const auto direction = op.kind == ipc::OpKind::memset ? CopyDirection::memset : direction_of(op.direction);
      if (!direction) break;
      features.op_class = OpClass::copy;
      const bool has_host = *direction == CopyDirection::h2d || *direction == CopyDirection::d2h;
      features.copy = {*direction, has_host ? host_memory_of(op.host_memory) : HostMemory::none, op.bytes};
      break;
    }
    default:
      break;
  }
  return features;
}

const char* to_string(CopyDirection direction) {
  switch (direction) {
    case CopyDirection::h2d: return "h2d";
    case CopyDirection::d2h: return "d2h";
    case CopyDirection::d2d: return "d2d";
    case CopyDirection::memset: return "memset";
  }
  return "?";
}

const char* to_string(HostMemory memory) {
  switch (memory) {
    case HostMemory::none: return "none";
    case HostMemory::pinned: return "pinned";
    case HostMemory::pageable: return "pageable";
  }
  return "?";
}

}  // namespace gpuqos::predictor
