// What one CUPTI activity record says, for the profiler's join (profiler.h): the record layouts of
// the cupti_activity.h this shim was built with (CuptiLibrary::load checks the API version).
#pragma once

#include <cupti.h>

#include <cstdint>
#include <string>

#include "gpuqos/ipc/descriptor.h"

namespace gpuqos::intercept {

// One device-timed op from a CUPTI record.
struct ActivityTiming {
  ipc::OpKind kind = ipc::OpKind::kernel;
  std::uint64_t start_ns = 0, end_ns = 0, bytes = 0;
  ipc::CopyDirection direction = ipc::CopyDirection::none;  // copies: none when CUPTI did not say
  ipc::HostMemory host_memory = ipc::HostMemory::none;
  std::string cupti_name;  // kernels: the record's name, used when the shim has none
};

struct ActivityRecord {
  enum class What : std::uint8_t {
    other,         // nothing for the profile (another kind, another external kind)
    external,      // EXTERNAL_CORRELATION of `external_kind`: correlation -> external_id
    timing,        // a kernel, copy or memset the device ran: `timing`
    no_timing,     // a kernel, copy or memset of `correlation` that makes no profile record (a
                   // host-to-host copy, or times not complete at a forced flush): its op, if the
                   // shim began one, is done with
    graph_node,    // a node of a graph launch (graphId set): the shim profiles no graph launch
  };
  What what = What::other;
  std::uint32_t correlation = 0;
  std::uint64_t external_id = 0;
  ActivityTiming timing;
};

ActivityRecord read_activity(const CUpti_Activity& record, CUpti_ExternalCorrelationKind external_kind);

}  // namespace gpuqos::intercept
