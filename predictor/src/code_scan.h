// The kNN inner loop: squared distances from a query to samples stored as 16-bit fixed-point
// coordinates (kCodeScale codes per log2 unit), folded into a running top-k. With SSE2 four
// samples take a handful of integer instructions (no float conversion); elsewhere a scalar loop.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace gpuqos::predictor::detail {

inline constexpr float kCodeScale = 256.0f;
// Coordinates are log2(1 + x) of 32-bit dims and of sizes below 2^40: at most 40. Clamping to this
// keeps every squared difference summed over 16 coordinates below 2^31.
inline constexpr float kMaxCoordinate = 40.9f;

std::int16_t encode(float coordinate);

struct TopK {
  int k = 1;                                 // <= 8
  std::array<std::int32_t, 8> d2;            // ascending; INT32_MAX while unfilled
  std::array<std::uint32_t, 8> slot{};
  explicit TopK(int k_) : k(k_) { d2.fill(INT32_MAX); }

  void offer(std::int32_t d, std::uint32_t s) {
    if (d >= d2[std::size_t(k - 1)]) return;
    std::size_t at = std::size_t(k - 1);
    for (; at > 0 && d2[at - 1] > d; --at) {
      d2[at] = d2[at - 1];
      slot[at] = slot[at - 1];
    }
    d2[at] = d;
    slot[at] = s;
  }
};

// Samples 0..count-1 at codes + slot * stride (stride 8 or 16 int16s, zero-padded; the array holds
// whole groups of 4 samples); query: stride int16s.
void scan_codes(const std::int16_t* codes, std::size_t stride, std::size_t count, const std::int16_t* query, TopK& top);

}  // namespace gpuqos::predictor::detail
