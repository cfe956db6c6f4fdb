// Helpers the measurement readers share: bounded message lists and strict number parsing.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "gpuqos/predictor/measurements.h"

namespace gpuqos::predictor::detail {

// Counts a rejected row and keeps its message while fewer than max_messages are kept.
inline void reject(ReadReport& report, const ReadOptions& options, const std::string& message) {
  ++report.skipped;
  if (report.messages.size() < options.max_messages) {
    report.messages.push_back(message);
  } else {
    ++report.unlisted;
  }
}

inline ReadReport fail(ReadReport report, const std::string& message) {
  report.failed = true;
  report.messages.insert(report.messages.begin(), message);
  return report;
}

// The longest op a measurement may give: an hour. A longer one is a unit mistake or a broken
// clock, and it would swamp every model it trained (a CSV latency of 1e308 ms was read as infinity,
// trained, and made eval's errors NaN).
inline constexpr double kMaxDurationNs = 3.6e12;
inline constexpr double kMinDurationNs = 1.0;
inline constexpr const char* kTooLong = "longer than an hour: not a measurement of one op";

std::string_view trim(std::string_view text);
// A whole-string decimal number (leading/trailing blanks allowed); nullopt otherwise. "nan" and
// "inf" parse (callers check finiteness and say so).
std::optional<double> parse_double(std::string_view text);
// A non-negative integer (an integral decimal such as "1024.0" is accepted).
std::optional<std::uint64_t> parse_count(std::string_view text);

}  // namespace gpuqos::predictor::detail
