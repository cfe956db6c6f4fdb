// The QoS benchmark's measurements, in order: per device mode, the LC's closed-loop calibration,
// the standalone LC at each load and each BE job alone, then every cell of that mode. A failed run
// is recorded with its reason and the others go on.
#pragma once

#include <atomic>

#include "plan.h"
#include "qos_rig.h"
#include "results.h"

namespace gpuqos::qos {

// Contract: `rig` has converted the LC workload and every BE workload the options' mixes use.
// Once `interrupted` is set (by a signal handler) it returns before the next run, with what was
// measured and Results::interrupted. Does not throw for a failed run or device mode: those are
// failed records.
Results run_experiment(QosRig& rig, const Options& options, const std::atomic<bool>& interrupted);

}  // namespace gpuqos::qos
