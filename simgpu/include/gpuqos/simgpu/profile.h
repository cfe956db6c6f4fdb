// Device profile of a simulated GPU: what simgpud models and reports, loaded from TOML.
#pragma once

#include <cstdint>
#include <filesystem>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpuqos::simgpu {

enum class ComputeMode : std::uint8_t {
  fifo,       // one non-preemptive queue for all contexts, one kernel at a time (Baymax premise)
  timeslice,  // contexts with ready work take turns in quanta; streams of the owner run concurrently
  mps,        // kernels of all contexts run at once and share the SMs
};

const char* to_string(ComputeMode mode);

// One simulated GPU. Defaults model an NVIDIA H100 80GB HBM3 (SXM).
struct DeviceProfile {
  std::string name = "NVIDIA H100 80GB HBM3 (simgpu)";
  int sms = 132;
  double memory_gib = 80.0;
  ComputeMode compute_mode = ComputeMode::timeslice;
  double timeslice_us = 2000.0;
  double h2d_gbps = 25.0;          // pinned host-to-device bandwidth, GB/s (1e9 bytes/s)
  double d2h_gbps = 25.0;          // pinned device-to-host bandwidth
  double d2d_gbps = 1500.0;        // device-local copies and memsets
  double pageable_factor = 0.5;    // bandwidth multiplier for pageable host memory
  double copy_latency_us = 2.0;    // fixed cost of every copy and memset
  double time_scale = 1.0;         // multiplies every duration
  int cc_major = 9;
  int cc_minor = 0;
  int clock_khz = 1980000;
  int memory_clock_khz = 2619000;
  int memory_bus_width_bits = 5120;
  int l2_cache_bytes = 50 * 1024 * 1024;

  std::uint64_t memory_bytes() const {
    return static_cast<std::uint64_t>(memory_gib * 1024.0 * 1024.0 * 1024.0);
  }
};

// A bad profile: the message names file, line, column and key.
struct ProfileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Top-level keys are defaults for every [[device]] table; with no [[device]] table the file
// describes one device. Unknown keys and out-of-range values are errors.
std::vector<DeviceProfile> load_profile_file(const std::filesystem::path& path);
std::vector<DeviceProfile> parse_profile(std::string_view toml_text, const std::string& source_name);

// The built-in default: one H100.
std::vector<DeviceProfile> default_profile();

}  // namespace gpuqos::simgpu
