// Small helpers for reading what a process wrote (its log, its output).
#pragma once

#include <cstddef>
#include <string_view>

namespace gpuqos::testing {

// How many times `what` (not empty) occurs in `text`, occurrences not overlapping.
inline std::size_t occurrences(std::string_view text, std::string_view what) {
  std::size_t count = 0;
  for (auto at = text.find(what); at != std::string_view::npos; at = text.find(what, at + what.size())) ++count;
  return count;
}

}  // namespace gpuqos::testing
