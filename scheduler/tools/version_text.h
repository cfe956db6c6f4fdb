// `--version` of gpuqosd and gpuqos.
#pragma once

#include <string>

#include "gpuqos/ipc/registration.h"

namespace gpuqos::tools {

// The build's version (CMake's project version, GPUQOS_VERSION) and the shim-daemon protocol it speaks.
inline std::string version_text(const std::string& tool) {
  return tool + " " GPUQOS_VERSION " (shim-daemon protocol " + std::to_string(ipc::kProtocolVersionMajor) + "." +
         std::to_string(ipc::kProtocolVersionMinor) + ")";
}

}  // namespace gpuqos::tools
