// What a config file (config/) means to this gpuqosd: the daemon options it sets, and what this
// release cannot do yet (refused, never silently replaced: a job counting on QoS must not get less).
#pragma once

#include <string>

#include "gpuqos/config/config.h"
#include "gpuqos/ipc/result.h"
#include "gpuqos/scheduler/daemon.h"
#include "gpuqos/scheduler/device_table.h"

namespace gpuqos::scheduler {

// Options from `config`, on top of `base`. An error names what this daemon does not support
// (policy `none`, which means running without gpuqosd).
ipc::Result<DaemonOptions> options_from_config(const config::Config& config, DaemonOptions base);

// The policy's per-device settings (preemptive devices, time slices), which the config gives by
// ordinal and by GPU UUID, by gpuqosd's device numbers instead: each GPU takes those its UUID is
// named by (preemptive when any list entry names it; the slice of the longest prefix that does), and
// its config ordinal's (DeviceTable::config_ordinal) for the rest. Unchanged while no device is
// renumbered and nothing is named by UUID.
PolicyOptions by_device_number(const PolicyOptions& options, const DeviceTable& devices);

// The config file's path as gpuqosd keeps it (what status shows and SIGHUP reads, whatever its
// directory becomes): absolute, and otherwise as given, so the kernel resolves it at each reload as
// it did at the start: "link/.." is where link's target's parent is (lexically normalized, it was
// the file beside the link, and SIGHUP read another file than the start had), and a link on the
// way that a deployment repoints (current -> releases/v2) is followed again.
std::string config_path_to_keep(const std::string& given);

// Would the GPU with this UUID have different settings called ordinal a than called b?
bool device_settings_differ(const BaymaxOptions& options, const DeviceTable::Uuid& uuid, std::uint32_t a,
                            std::uint32_t b);

}  // namespace gpuqos::scheduler
