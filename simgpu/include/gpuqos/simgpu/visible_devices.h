// CUDA_VISIBLE_DEVICES as the CUDA driver reads it: which of the node's devices a process sees, and
// in what order (its device ordinal i is the node's device visible[i]).
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace gpuqos::simgpu {

// A device's UUID as nvidia-smi and CUDA_VISIBLE_DEVICES spell it: "GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx".
std::string uuid_text(const std::array<std::uint8_t, 16>& uuid);

// The node's devices a process sees under `env` (the variable's value; nullopt when unset: all of
// them). Comma-separated entries: indices (each its leading digits, as strtoul reads them: "1gpu"
// is 1) or, in a list that starts with "GPU-", UUID prefixes that each name one device. The list
// ends at the first entry that names no device ("0,2,-1,1" is 0 and 2; "" hides every device); a
// device named twice hides every device, as PyTorch's reading of the driver
// (torch.cuda._parse_visible_devices) has it. Corner cases that reading leaves open may differ
// from a real driver's: a repeat after an index out of range ("1,7,1" is 1 here), "+1" (none here).
std::vector<std::uint32_t> visible_devices(std::optional<std::string_view> env,
                                           std::span<const std::array<std::uint8_t, 16>> uuids);

}  // namespace gpuqos::simgpu
