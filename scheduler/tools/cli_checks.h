// Command-line checks the gpuqos tools share.
#pragma once

#include <CLI/CLI.hpp>
#include <cmath>
#include <string>

namespace gpuqos::tools {

// A finite number in [low, high]. CLI11's Range lets "nan" through (every comparison with it is
// false), and a NaN duration cast to an integer is undefined.
inline CLI::Validator finite_in(double low, double high) {
  const std::string range = "[" + CLI::detail::to_string(low) + ", " + CLI::detail::to_string(high) + "]";
  return CLI::Validator(
      [low, high, range](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value) || !std::isfinite(value) || value < low || value > high) {
          return "must be a finite number in " + range + " (got " + text + ")";
        }
        return {};
      },
      "NUMBER in " + range);
}

// A finite number > 0 (CLI::PositiveNumber says its range for a double as 300 digits).
inline CLI::Validator positive_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        double value = 0;
        if (!CLI::detail::lexical_cast(text, value) || !std::isfinite(value) || value <= 0) {
          return "must be a positive number (got " + text + ")";
        }
        return {};
      },
      "POSITIVE");
}

}  // namespace gpuqos::tools
