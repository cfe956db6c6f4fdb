// Reading CUPTI activity records (activity_records.h).
#include "activity_records.h"

#include "gpuqos/ipc/registration.h"

namespace gpuqos::intercept {
namespace {

ipc::HostMemory host_memory_of(std::uint8_t cupti_kind) {
  switch (cupti_kind) {
    case CUPTI_ACTIVITY_MEMORY_KIND_PINNED: return ipc::HostMemory::pinned;
    case CUPTI_ACTIVITY_MEMORY_KIND_PAGEABLE: return ipc::HostMemory::pageable;
    default: return ipc::HostMemory::none;  // the descriptor's answer is used
  }
}

// Direction and host memory of a copy as CUPTI saw it; false for a host-to-host copy (no GPU engine).
bool classify_copy(const CUpti_ActivityMemcpy6& r, ipc::CopyDirection& direction, ipc::HostMemory& host) {
  switch (r.copyKind) {
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOD:
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOA:
      direction = ipc::CopyDirection::h2d;
      host = host_memory_of(r.srcKind);
      return true;
    case CUPTI_ACTIVITY_MEMCPY_KIND_DTOH:
    case CUPTI_ACTIVITY_MEMCPY_KIND_ATOH:
      direction = ipc::CopyDirection::d2h;
      host = host_memory_of(r.dstKind);
      return true;
    case CUPTI_ACTIVITY_MEMCPY_KIND_HTOH: return false;
    case CUPTI_ACTIVITY_MEMCPY_KIND_UNKNOWN: direction = ipc::CopyDirection::none; return true;
    default: direction = ipc::CopyDirection::d2d; return true;  // DTOD, PTOP and the array kinds
  }
}

// A kernel, copy or memset record of `correlation`: a node of a graph launch, one with no profile
// record, or its timing.
ActivityRecord of_op(std::uint32_t correlation, std::uint32_t graph_id, bool makes_record, ActivityTiming timing) {
  ActivityRecord read;
  read.correlation = correlation;
  if (graph_id != 0) {
    read.what = ActivityRecord::What::graph_node;
  } else if (!makes_record || timing.start_ns == 0 || timing.end_ns < timing.start_ns) {
    read.what = ActivityRecord::What::no_timing;  // times incomplete: a forced flush
  } else {
    read.what = ActivityRecord::What::timing;
    read.timing = std::move(timing);
  }
  return read;
}

}  // namespace

ActivityRecord read_activity(const CUpti_Activity& record, CUpti_ExternalCorrelationKind external_kind) {
  ActivityTiming timing;
  switch (record.kind) {
    case CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION: {
      const auto& r = reinterpret_cast<const CUpti_ActivityExternalCorrelation&>(record);
      ActivityRecord read;
      if (r.externalKind != external_kind) return read;
      read.what = ActivityRecord::What::external;
      read.correlation = r.correlationId;
      read.external_id = r.externalId;
      return read;
    }
    case CUPTI_ACTIVITY_KIND_KERNEL:
    case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
      const auto& r = reinterpret_cast<const CUpti_ActivityKernel10&>(record);
      timing.kind = ipc::OpKind::kernel;
      timing.start_ns = r.start, timing.end_ns = r.end;
      if (r.graphId == 0) timing.cupti_name = r.name ? ipc::wire_kernel_name(r.name) : "";  // as the registry's names
      return of_op(r.correlationId, r.graphId, true, std::move(timing));
    }
    case CUPTI_ACTIVITY_KIND_MEMCPY: {
      const auto& r = reinterpret_cast<const CUpti_ActivityMemcpy6&>(record);
      const bool device_copy = classify_copy(r, timing.direction, timing.host_memory);
      timing.kind = ipc::OpKind::copy;
      timing.start_ns = r.start, timing.end_ns = r.end, timing.bytes = r.bytes;
      return of_op(r.correlationId, r.graphId, device_copy, std::move(timing));
    }
    case CUPTI_ACTIVITY_KIND_MEMSET: {
      const auto& r = reinterpret_cast<const CUpti_ActivityMemset4&>(record);
      timing.kind = ipc::OpKind::memset;
      timing.start_ns = r.start, timing.end_ns = r.end, timing.bytes = r.bytes;
      return of_op(r.correlationId, r.graphId, true, std::move(timing));
    }
    default: return {};
  }
}

}  // namespace gpuqos::intercept
