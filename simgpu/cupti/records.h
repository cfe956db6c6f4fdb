// CUPTI activity records as the installed toolkit lays them out, made from the driver's reports.
//
// The record types are the toolkit's own current versions (cupti_activity.h): CUpti_ActivityKernel10
// for CONCURRENT_KERNEL and KERNEL, CUpti_ActivityMemcpy6, CUpti_ActivityMemset4 and
// CUpti_ActivityExternalCorrelation, so a collector reads them exactly as it would real CUPTI's.
#pragma once

#include <cupti.h>

#include <cstddef>
#include <cstdint>
#include <variant>

#include "gpuqos/simgpu/activity.h"

namespace gpuqos::simgpu::cupti {

using KernelRecord = CUpti_ActivityKernel10;
using MemcpyRecord = CUpti_ActivityMemcpy6;
using MemsetRecord = CUpti_ActivityMemset4;
using ExternalCorrelationRecord = CUpti_ActivityExternalCorrelation;

// A record waiting for its device times.
using InFlightRecord = std::variant<KernelRecord, MemcpyRecord, MemsetRecord>;

// The record of a submitted op, times not yet set. `kernel_kind` is CONCURRENT_KERNEL or KERNEL;
// `name` must outlive the record (an interned copy of op.name).
KernelRecord kernel_record(const activity::SubmittedOp& op, CUpti_ActivityKind kernel_kind, const char* name);
MemcpyRecord memcpy_record(const activity::SubmittedOp& op);
MemsetRecord memset_record(const activity::SubmittedOp& op);
ExternalCorrelationRecord external_correlation_record(CUpti_ExternalCorrelationKind kind, std::uint64_t external_id,
                                                      std::uint64_t correlation);

// Sets start and end (and a kernel's completed) from the device's times.
void set_times(InFlightRecord& record, std::uint64_t start_ns, std::uint64_t end_ns);

// Bytes of a record of `kind` in a buffer; 0 for a kind simgpu never writes.
std::size_t record_size(CUpti_ActivityKind kind);

}  // namespace gpuqos::simgpu::cupti
