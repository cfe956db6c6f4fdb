// DeviceInfo from a device profile, with a deterministic uuid.
#include "device_info.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace gpuqos::simgpu::server {
namespace {

std::uint64_t fnv1a(const std::string& text, std::uint64_t hash) {
  for (unsigned char c : text) {
    hash ^= c;
    hash *= 0x100000001b3ull;
  }
  return hash;
}

void fill_uuid(int index, const std::string& name, std::uint8_t (&uuid)[16]) {
  std::string key = "simgpu/" + std::to_string(index) + "/" + name;
  std::uint64_t halves[2] = {fnv1a(key, 0xcbf29ce484222325ull), fnv1a(key, 0x84222325cbf29ce4ull)};
  std::memcpy(uuid, halves, sizeof uuid);
  uuid[6] = static_cast<std::uint8_t>((uuid[6] & 0x0f) | 0x80);  // RFC 9562 version 8: custom
  uuid[8] = static_cast<std::uint8_t>((uuid[8] & 0x3f) | 0x80);  // RFC variant
}

}  // namespace

wire::DeviceInfo make_device_info(int index, const DeviceProfile& profile) {
  wire::DeviceInfo info{};
  std::size_t name_bytes = std::min(profile.name.size(), sizeof info.name - 1);
  std::memcpy(info.name, profile.name.data(), name_bytes);
  fill_uuid(index, profile.name, info.uuid);
  info.memory_bytes = profile.memory_bytes();
  info.sms = static_cast<std::uint32_t>(profile.sms);
  info.compute_mode = static_cast<std::uint32_t>(profile.compute_mode);
  info.cc_major = profile.cc_major;
  info.cc_minor = profile.cc_minor;
  info.clock_khz = profile.clock_khz;
  info.memory_clock_khz = profile.memory_clock_khz;
  info.memory_bus_width_bits = profile.memory_bus_width_bits;
  info.l2_cache_bytes = profile.l2_cache_bytes;
  return info;
}

}  // namespace gpuqos::simgpu::server
