// The distinct sizes one copy class has moved and the median of each one's recent durations:
// copies recur with the same sizes (every training step moves the same tensors), and a given size
// can sit well off the latency + bandwidth line (strided or chunked copies, cache effects).
// Bounded: at most `capacity` sizes (the least recently seen one goes), `window` durations each.
#pragma once

#include <cstdint>
#include <vector>

#include "gpuqos/predictor/recent_window.h"

namespace gpuqos::predictor {

class SizeMemory {
 public:
  struct Entry {
    std::uint64_t bytes = 0;
    RecentWindow log2_ns{8};
    float median_log2_ns = 0;
    std::uint64_t last_seen = 0;  // observation counter
  };

  explicit SizeMemory(std::uint32_t capacity = 64, std::uint32_t window = 8) : capacity_(capacity), window_(window) {}

  void record(std::uint64_t bytes, float log2_ns);

  // The recorded sizes nearest below-or-equal and above `bytes` (either may be null). O(log n).
  const Entry* at_or_below(std::uint64_t bytes) const;
  const Entry* above(std::uint64_t bytes) const;

  const std::vector<Entry>& entries() const { return entries_; }  // sorted by bytes
  std::uint64_t clock() const { return clock_; }
  void restore(std::vector<Entry> entries, std::uint64_t clock);

 private:
  std::uint32_t capacity_;
  std::uint32_t window_;
  std::uint64_t clock_ = 0;
  std::vector<Entry> entries_;
};

}  // namespace gpuqos::predictor
