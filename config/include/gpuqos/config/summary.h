// The loaded config as text a person can check: what `gpuqosd --check-config FILE` prints.
#pragma once

#include <string>

#include "gpuqos/config/config.h"

namespace gpuqos::config {

// Every setting, one per line, grouped by section; ends with a newline.
std::string render_summary(const Config& config);

// "every device" or "devices 0, 2": what [devices] ordinals leaves the daemon to manage.
std::string managed_devices_text(const DevicesConfig& devices);

}  // namespace gpuqos::config
