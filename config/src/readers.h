// Typed reads with range checks on top of Section: each leaves `out` (the default) unchanged when
// the key is absent or its value is bad, and reports a bad value as "must be ... (got ...)".
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "section.h"
#include "values.h"

namespace gpuqos::config::detail {

// The highest device ordinal a config may name: ipc::kMaxDevices - 1, a device the protocol can name.
inline constexpr std::int64_t kMaxDeviceOrdinal = 63;

enum class Bound { at_least, above };  // value >= minimum, value > minimum

// A number (integer or float) that is >= or > `minimum`.
void read_number(Section& section, std::string_view key, Bound bound, double minimum, double& out);

// The longest duration an `_ms` key may give: an hour, far past any latency target or GPU time
// slice, and well inside the daemon's int64 nanoseconds.
inline constexpr double kMaxMs = 3'600'000;
// The shortest a positive `_ms` key may give, 1 us: shorter ones would truncate to (almost) no
// nanoseconds in the daemon, and nothing scheduled on a GPU is that fine.
inline constexpr double kMinPositiveMs = 0.001;
// The smallest job weight: the policy divides by it, and clamps anything smaller to it.
inline constexpr double kMinWeight = 0.001;
// The largest: a weight of 1e308 passed, and the policy's share cost divided by it was 0, so that
// job never fell behind its share and always went first.
inline constexpr double kMaxWeight = 1'000'000;

// read_number, and at most `maximum`: "must be <= <maximum><note> (got ...)", `note` like " (an hour)".
void read_number_up_to(Section& section, std::string_view key, Bound bound, double minimum, double maximum,
                       double& out, std::string_view note = "");

// A duration in ms: read_number, and at most kMaxMs.
inline void read_ms(Section& section, std::string_view key, Bound bound, double minimum, double& out) {
  read_number_up_to(section, key, bound, minimum, kMaxMs, out, " (an hour)");
}

void read_bool(Section& section, std::string_view key, bool& out);
void read_string(Section& section, std::string_view key, std::string& out);

// "must be >= 0 (got -1)" or "must be <= 255 (got 300)" unless minimum <= value <= maximum.
bool check_integer_range(Section& section, std::string_view key, std::int64_t value, std::int64_t minimum,
                         std::int64_t maximum);

template <class T>
void read_integer(Section& section, std::string_view key, std::int64_t minimum, std::int64_t maximum, T& out) {
  const auto value = section.integer(key);
  if (value && check_integer_range(section, key, *value, minimum, maximum)) out = static_cast<T>(*value);
}

// An array of distinct integers in [minimum, maximum]; each bad or repeated element is reported
// as "<key>[i]" and left out. Returns whether the key was present (even if some elements were bad).
bool read_integer_list(Section& section, std::string_view key, std::int64_t minimum, std::int64_t maximum,
                       std::vector<std::int64_t>& out);

// "must be one of ..." with a "did you mean" hint unless the string is one of `names`.
bool check_choice(Section& section, std::string_view key, const std::string& value,
                  std::span<const std::string_view> names, std::size_t& index);

// One of `names` (listed in the enum's order) into `out`.
template <class Enum, std::size_t N>
void read_choice(Section& section, std::string_view key, const std::array<std::string_view, N>& names, Enum& out) {
  std::size_t index = 0;
  const auto value = section.string(key);
  if (value && check_choice(section, key, *value, names, index)) out = static_cast<Enum>(index);
}

}  // namespace gpuqos::config::detail
