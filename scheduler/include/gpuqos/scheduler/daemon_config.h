// What a config file (config/) means to this gpuqosd: the daemon options it sets, and what this
// release cannot do yet (refused, never silently replaced: a job counting on QoS must not get less).
#pragma once

#include <string>

#include "gpuqos/config/config.h"
#include "gpuqos/ipc/result.h"
#include "gpuqos/scheduler/daemon.h"

namespace gpuqos::scheduler {

// Options from `config`, on top of `base`. An error names what this daemon does not support
// (policy `none`, which means running without gpuqosd).
ipc::Result<DaemonOptions> options_from_config(const config::Config& config, DaemonOptions base);

}  // namespace gpuqos::scheduler
