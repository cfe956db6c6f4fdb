// Kernel catalog: how long a simulated kernel takes, by name (ECMAScript regex, first match wins).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <random>
#include <regex>
#include <stdexcept>
#include <string>
#include <vector>

namespace gpuqos::simgpu {

struct KernelModel {
  enum class Kind : std::uint8_t { fixed, per_block, from_arg, unknown };
  Kind kind = Kind::unknown;
  double us = 0;            // fixed
  double base_us = 0;       // per_block
  double per_block_us = 0;  // per_block
  int arg = -1;             // from_arg: index of the kernel parameter holding the duration
  double arg_unit_ns = 1;   // from_arg: nanoseconds per unit of the argument ("ns", "us", "ms", "s")
};

struct CatalogError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

// Launch facts the duration depends on.
struct LaunchShape {
  std::uint64_t blocks = 1;                     // gridX*gridY*gridZ
  std::optional<std::uint64_t> duration_arg;    // value of the from_arg parameter, when read
};

class KernelCatalog {
 public:
  KernelCatalog();  // empty: every kernel takes default_us (10 us)

  // Appends the entries of one JSON catalog; later files' entries come after earlier ones.
  // The last file that sets default_us / noise_cv / seed wins. Errors name file, line, column.
  void add_file(const std::filesystem::path& path);
  void add_json(std::string_view json_text, const std::string& source_name);

  // The model of a kernel name: first matching entry, or Kind::unknown (caller warns once).
  KernelModel resolve(const std::string& kernel_name) const;

  // Duration in ns before time_scale, noise applied (multiplicative, mean 1, cv noise_cv,
  // never negative). Unknown kernels and from_arg without a value take default_us.
  std::int64_t duration_ns(const KernelModel& model, const LaunchShape& shape);

  double default_us() const { return default_us_; }
  double noise_cv() const { return noise_cv_; }

 private:
  struct Entry {
    std::string pattern;
    std::regex regex;
    KernelModel model;
  };
  std::vector<Entry> entries_;
  double default_us_ = 10.0;
  double noise_cv_ = 0.0;
  std::uint64_t seed_ = 1;
  std::mt19937_64 rng_;
};

}  // namespace gpuqos::simgpu
