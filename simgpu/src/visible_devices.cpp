// CUDA_VISIBLE_DEVICES: the CUDA Programming Guide's "CUDA Environment Variables" semantics.
#include "gpuqos/simgpu/visible_devices.h"

#include <algorithm>
#include <cctype>
#include <cstdio>

namespace gpuqos::simgpu {
namespace {

// The device an entry names, if exactly one.
std::optional<std::uint32_t> named_device(std::string_view entry, std::span<const std::array<std::uint8_t, 16>> uuids) {
  while (!entry.empty() && std::isspace(static_cast<unsigned char>(entry.front()))) entry.remove_prefix(1);
  if (entry.starts_with("GPU-")) {
    std::optional<std::uint32_t> found;
    for (std::size_t i = 0; i < uuids.size(); ++i) {
      if (!uuid_text(uuids[i]).starts_with(entry)) continue;
      if (found) return std::nullopt;  // ambiguous
      found = static_cast<std::uint32_t>(i);
    }
    return found;
  }
  std::uint64_t index = 0;
  std::size_t digits = 0;
  for (; digits < entry.size() && std::isdigit(static_cast<unsigned char>(entry[digits])); ++digits) {
    index = index * 10 + static_cast<std::uint64_t>(entry[digits] - '0');
    if (index >= uuids.size()) return std::nullopt;
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
  std::string_view rest = *env;
  while (!rest.empty()) {
    const std::size_t comma = rest.find(',');
    const auto device = named_device(rest.substr(0, comma), uuids);
    if (!device || std::find(visible.begin(), visible.end(), *device) != visible.end()) break;
    visible.push_back(*device);
    if (comma == std::string_view::npos) break;
    rest.remove_prefix(comma + 1);
  }
  return visible;
}

}  // namespace gpuqos::simgpu
