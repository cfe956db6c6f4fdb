// Launch shape -> kNN coordinates and regression feature banks.
#include "gpuqos/predictor/shape_features.h"

#include <algorithm>
#include <cmath>
#include <cstring>

namespace gpuqos::predictor {

namespace {

double blocks_of(const LaunchShape& s) { return double(s.grid[0]) * double(s.grid[1]) * double(s.grid[2]); }
double threads_per_block(const LaunchShape& s) { return double(s.block[0]) * double(s.block[1]) * double(s.block[2]); }
// log2(1 + x) to within 2e-3, several times cheaper than std::log2: the exponent bits plus a
// polynomial for the mantissa. Monotonic, and the same function places samples and queries, so
// it only has to be a faithful scale, not exact.
float log2p1(double x) {
  const double v = 1.0 + x;
  std::uint64_t bits;
  std::memcpy(&bits, &v, sizeof bits);
  const auto exponent = double(int((bits >> 52) & 0x7ff) - 1023);
  bits = (bits & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL;  // mantissa in [1, 2)
  double m;
  std::memcpy(&m, &bits, sizeof m);
  const double t = m - 1.0;  // log2(1 + t), t in [0, 1): degree-5 fit, exact at both ends
  const double p = t * (1.4425449 + t * (-0.7181452 + t * (0.4575485 + t * (-0.2779042 + t * 0.0959560))));
  return static_cast<float>(exponent + p);
}

// One multiply per field (the fields are few and fixed), a full avalanche at the end.
std::uint64_t mix(std::uint64_t h, std::uint64_t v) { return (h ^ v) * 0x100000001b3ULL + 0x9e3779b97f4a7c15ULL; }

std::uint64_t finish(std::uint64_t h) {  // splitmix64's finaliser
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ULL;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebULL;
  return h ^ (h >> 31);
}

}  // namespace

Point knn_point(const LaunchShape& s) {
  Point p{};
  for (int d = 0; d < 3; ++d) {
    p[d] = log2p1(s.grid[d]);
    p[3 + d] = log2p1(s.block[d]);
  }
  p[6] = log2p1(s.shared_bytes);
  for (std::size_t i = 0; i < kMaxArgs; ++i) p[7 + i] = numeric_arg(s, i) ? log2p1(double(s.args[i])) : 0.0f;
  return p;
}

SizePoint size_point(const LaunchShape& s, std::uint32_t sm_count) {
  SizePoint p{};
  p[0] = float(std::log2(std::max(1.0, std::ceil(blocks_of(s) / double(sm_count == 0 ? 1 : sm_count)))));
  p[1] = float(std::log2(std::max(1.0, threads_per_block(s))));
  for (std::size_t i = 0; i < kMaxArgs; ++i) p[2 + i] = numeric_arg(s, i) ? log2p1(double(s.args[i])) : 0.0f;
  return p;
}

Bank linear_bank(const LaunchShape& s, std::uint32_t sm_count) {
  Bank b{};
  const double blocks = blocks_of(s);
  const double waves = std::ceil(blocks / double(sm_count == 0 ? 1 : sm_count));
  const double threads = blocks * threads_per_block(s);
  // Numeric args (1 where an arg is absent or a pointer), and the surface sum_i prod_{j != i} a_j
  // from prefix and suffix products, without divisions.
  std::array<double, kMaxArgs> a;
  int numeric = 0;
  for (std::size_t i = 0; i < kMaxArgs; ++i) {
    const bool is_size = numeric_arg(s, i);
    a[i] = is_size ? std::max(1.0, double(s.args[i])) : 1.0;
    b[kWaveArg0 + i] = is_size ? waves * a[i] : 0.0;
    numeric += is_size;
  }
  std::array<double, kMaxArgs + 1> suffix;
  suffix[kMaxArgs] = 1;
  for (std::size_t i = kMaxArgs; i-- > 0;) suffix[i] = suffix[i + 1] * a[i];
  double prefix = 1, surface = 0;
  for (std::size_t i = 0; i < kMaxArgs; ++i) {
    if (numeric_arg(s, i)) surface += prefix * suffix[i + 1];
    prefix *= a[i];
  }
  const double work = numeric == 0 ? threads : suffix[0];
  b[kOne] = 1;
  b[kBlocks] = blocks;
  b[kWaves] = waves;
  b[kThreads] = threads;
  b[kWork] = work;
  b[kWaveWork] = waves * work / blocks;
  b[kSurface] = numeric >= 2 ? surface : 0.0;
  b[kWaveThreadsPerBlock] = waves * threads_per_block(s);
  return b;
}

LogBank log_bank(const LaunchShape& s) {
  LogBank b{};
  b[kLogOne] = 1;
  b[kLogBlocks] = std::log2(blocks_of(s));
  b[kLogThreadsPerBlock] = std::log2(threads_per_block(s));
  b[kLogShared] = std::log2(1.0 + s.shared_bytes);
  for (std::size_t i = 0; i < kMaxArgs; ++i)
    b[kLogArg0 + i] = numeric_arg(s, i) ? std::log2(1.0 + double(s.args[i])) : 0.0;
  return b;
}

std::uint64_t shape_hash(const LaunchShape& s) {
  std::uint64_t h = mix(0, s.arg_count);
  for (int d = 0; d < 3; ++d) h = mix(mix(h, s.grid[d]), s.block[d]);
  h = mix(h, s.shared_bytes);
  for (std::size_t i = 0; i < s.arg_count && i < kMaxArgs; ++i) h = mix(h, s.args[i]);
  return finish(h);
}

}  // namespace gpuqos::predictor
