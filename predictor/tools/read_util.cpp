// Strict number parsing for the readers.
#include "read_util.h"

#include <charconv>
#include <cmath>

namespace gpuqos::predictor::detail {

std::string_view trim(std::string_view text) {
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first == std::string_view::npos) return {};
  const auto last = text.find_last_not_of(" \t\r\n");
  return text.substr(first, last - first + 1);
}

std::optional<double> parse_double(std::string_view text) {
  text = trim(text);
  if (!text.empty() && text.front() == '+') text.remove_prefix(1);
  double value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

std::optional<std::uint64_t> parse_count(std::string_view text) {
  const std::string_view trimmed = trim(text);
  std::uint64_t exact = 0;
  const auto [end, error] = std::from_chars(trimmed.data(), trimmed.data() + trimmed.size(), exact);
  if (!trimmed.empty() && error == std::errc() && end == trimmed.data() + trimmed.size()) return exact;
  const auto value = parse_double(text);
  if (!value || !std::isfinite(*value) || *value < 0 || *value >= 1.8e19 || std::floor(*value) != *value) return std::nullopt;
  return static_cast<std::uint64_t>(*value);
}

}  // namespace gpuqos::predictor::detail
