// What a client is told about a simulated device (HelloReply's DeviceInfo).
#pragma once

#include "gpuqos/simgpu/profile.h"
#include "gpuqos/simgpu/protocol.h"

namespace gpuqos::simgpu::server {

// The uuid is derived from the device index and name only, so it is stable across restarts.
wire::DeviceInfo make_device_info(int index, const DeviceProfile& profile);

}  // namespace gpuqos::simgpu::server
