// What the replayer loads: a PTX module with one duration-spinning entry per kernel, and the
// simgpu kernel catalog that gives those entries their recorded durations.
#pragma once

#include <string>

#include "gpuqos/replay/workload.h"

namespace gpuqos::replay {

// PTX text (.version 7.0, .target sm_70, .address_size 64). Each `.visible .entry` takes its
// duration in ns as its only parameter (.u64) and spins on %globaltimer until that much time
// has passed, so the same module reproduces the durations on a real GPU too.
std::string generate_ptx(const Workload& workload);

// simgpu catalog JSON: every "^gq_" kernel takes the duration of its argument 0, in ns.
std::string generate_catalog_json();

}  // namespace gpuqos::replay
