// Readers of each section of the file into its struct; problems go to Diagnostics.
#pragma once

#include <toml++/toml.h>

#include <vector>

#include "diagnostics.h"
#include "gpuqos/config/config.h"

namespace gpuqos::config::detail {

void read_daemon(Diagnostics& diagnostics, const toml::table& table, DaemonConfig& out);         // [daemon]
void read_devices(Diagnostics& diagnostics, const toml::table& table, DevicesConfig& out);       // [devices]
void read_access(Diagnostics& diagnostics, const toml::table& table, AccessConfig& out);         // [access]
void read_policy(Diagnostics& diagnostics, const toml::table& table, PolicyConfig& out);         // [policy]
void read_jobs(Diagnostics& diagnostics, const toml::array& jobs, std::vector<JobConfig>& out);  // [[job]]

}  // namespace gpuqos::config::detail
