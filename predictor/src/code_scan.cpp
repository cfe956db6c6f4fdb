// The kNN inner loop, SSE2 where available.
#include "code_scan.h"

#include <algorithm>
#include <cmath>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

namespace gpuqos::predictor::detail {

std::int16_t encode(float coordinate) {
  return std::int16_t(std::lround(std::clamp(coordinate, 0.0f, kMaxCoordinate) * kCodeScale));
}

namespace {

#if defined(__SSE2__)
// Sum of squared differences of one sample (kStride codes) as 4 int32 partial sums.
template <std::size_t kStride>
inline __m128i partial_distance(const std::int16_t* sample, __m128i q0, __m128i q1) {
  const __m128i d0 = _mm_sub_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sample)), q0);
  __m128i sum = _mm_madd_epi16(d0, d0);  // pairs of squares
  if constexpr (kStride == 16) {
    const __m128i d1 = _mm_sub_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(sample + 8)), q1);
    sum = _mm_add_epi32(sum, _mm_madd_epi16(d1, d1));
  }
  return sum;
}

template <std::size_t kStride>
void scan_sse2(const std::int16_t* codes, std::size_t count, const std::int16_t* query, TopK& top) {
  const __m128i q0 = _mm_loadu_si128(reinterpret_cast<const __m128i*>(query));
  const __m128i q1 = kStride == 16 ? _mm_loadu_si128(reinterpret_cast<const __m128i*>(query + 8)) : _mm_setzero_si128();
  alignas(16) std::array<std::int32_t, 4> d;
  for (std::size_t first = 0; first < count; first += 4) {
    const std::int16_t* group = codes + first * kStride;
    const __m128i p0 = partial_distance<kStride>(group, q0, q1);
    const __m128i p1 = partial_distance<kStride>(group + kStride, q0, q1);
    const __m128i p2 = partial_distance<kStride>(group + 2 * kStride, q0, q1);
    const __m128i p3 = partial_distance<kStride>(group + 3 * kStride, q0, q1);
    // Transpose-and-add: lane i of `sums` is the total of p<i>'s four lanes.
    const __m128i a = _mm_add_epi32(_mm_unpacklo_epi32(p0, p1), _mm_unpackhi_epi32(p0, p1));
    const __m128i b = _mm_add_epi32(_mm_unpacklo_epi32(p2, p3), _mm_unpackhi_epi32(p2, p3));
    const __m128i sums = _mm_add_epi32(_mm_unpacklo_epi64(a, b), _mm_unpackhi_epi64(a, b));
    const __m128i beats = _mm_cmplt_epi32(sums, _mm_set1_epi32(top.d2[std::size_t(top.k - 1)]));
    int lanes = _mm_movemask_ps(_mm_castsi128_ps(beats));  // bit i: sample first + i beats the k-th
    if (lanes == 0) continue;  // the common case once the top-k has filled
    _mm_store_si128(reinterpret_cast<__m128i*>(d.data()), sums);
    for (; lanes != 0; lanes &= lanes - 1) {
      const auto i = std::size_t(__builtin_ctz(unsigned(lanes)));
      if (first + i < count) top.offer(d[i], std::uint32_t(first + i));
    }
  }
}
#endif

}  // namespace

void scan_codes(const std::int16_t* codes, std::size_t stride, std::size_t count, const std::int16_t* query, TopK& top) {
#if defined(__SSE2__)
  if (stride == 8) return scan_sse2<8>(codes, count, query, top);
  return scan_sse2<16>(codes, count, query, top);
#else
  for (std::size_t s = 0; s < count; ++s) {
    std::int32_t sum = 0;
    for (std::size_t j = 0; j < stride; ++j) {
      const std::int32_t diff = std::int32_t(codes[s * stride + j]) - query[j];
      sum += diff * diff;
    }
    top.offer(sum, std::uint32_t(s));
  }
#endif
}

}  // namespace gpuqos::predictor::detail
