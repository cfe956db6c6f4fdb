// CUDA_VISIBLE_DEVICES: the CUDA Programming Guide's "CUDA Environment Variables" semantics.
#include "gpuqos/simgpu/visible_devices.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace gpuqos::simgpu {
namespace {

std::string_view trimmed(std::string_view entry) {
  while (!entry.empty() && std::isspace(static_cast<unsigned char>(entry.front()))) entry.remove_prefix(1);
  while (!entry.empty() && std::isspace(static_cast<unsigned char>(entry.back()))) entry.remove_suffix(1);
  return entry;
}

// The device a "GPU-" prefix names, if exactly one.
std::optional<std::uint32_t> named_by_uuid(std::string_view prefix, std::span<const std::array<std::uint8_t, 16>> uuids) {
  std::optional<std::uint32_t> found;
  for (std::size_t i = 0; i < uuids.size(); ++i) {
    if (!uuid_text(uuids[i]).starts_with(prefix)) continue;
    if (found) return std::nullopt;  // ambiguous
    found = static_cast<std::uint32_t>(i);
  }
  return found;
}

// The index an entry's leading digits give (as strtoul), if it is a device's.
std::optional<std::uint32_t> named_by_index(std::string_view entry, std::size_t count) {
  std::uint64_t index = 0;
  std::size_t digits = 0;
  for (; digits < entry.size() && std::isdigit(static_cast<unsigned char>(entry[digits])); ++digits) {
    index = index * 10 + static_cast<std::uint64_t>(entry[digits] - '0');
    if (index >= count) return std::nullopt;
  }
  if (digits == 0) return std::nullopt;
  return static_cast<std::uint32_t>(index);
}

}  // namespace

std::string uuid_text(const std::array<std::uint8_t, 16>& uuid) {
  std::string text = "GPU-";
  char hex[3];
  for (std::size_t i = 0; i < uuid.size(); ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) text += '-';
    std::snprintf(hex, sizeof hex, "%02x", uuid[i]);
    text += hex;
  }
  return text;
}

std::vector<std::uint32_t> visible_devices(std::optional<std::string_view> env,
                                           std::span<const std::array<std::uint8_t, 16>> uuids) {
  std::vector<std::uint32_t> visible;
  if (!env) {
    for (std::uint32_t i = 0; i < uuids.size(); ++i) visible.push_back(i);
    return visible;
  }
  // A list that starts with a UUID is a list of UUIDs.
  const bool by_uuid = trimmed(*env).starts_with("GPU-");
  std::string_view rest = *env;
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    const std::string_view entry = trimmed(rest.substr(0, comma));
    if (by_uuid && !entry.starts_with("GPU-")) break;
    const auto device = by_uuid ? named_by_uuid(entry, uuids) : named_by_index(entry, uuids.size());
    if (!device) break;
    // A device listed twice leaves none visible (as PyTorch's reading of the driver has it).
    if (std::find(visible.begin(), visible.end(), *device) != visible.end()) return {};
    visible.push_back(*device);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return visible;
}

}  // namespace gpuqos::simgpu
