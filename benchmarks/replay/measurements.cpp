// Percentile summaries and the Poisson arrival process of the replayer's open-loop mode.
#include "gpuqos/replay/measurements.h"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <stdexcept>

namespace gpuqos::replay {

namespace {

double nearest_rank(const std::vector<double>& sorted, double p) {
  const auto rank = static_cast<std::size_t>(std::ceil(p * static_cast<double>(sorted.size())));
  return sorted[std::clamp<std::size_t>(rank, 1, sorted.size()) - 1];
}

}  // namespace

LatencySummary summarize(std::vector<double> values) {
  LatencySummary s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  s.count = values.size();
  s.mean_ms = std::accumulate(values.begin(), values.end(), 0.0) / static_cast<double>(values.size());
  s.p50_ms = nearest_rank(values, 0.50);
  s.p90_ms = nearest_rank(values, 0.90);
  s.p99_ms = nearest_rank(values, 0.99);
  s.min_ms = values.front();
  s.max_ms = values.back();
  return s;
}

PoissonArrivals::PoissonArrivals(double rate_per_s, std::uint64_t seed) : rate_per_s_(rate_per_s), state_(seed) {
  if (!(rate_per_s > 0) || !std::isfinite(rate_per_s)) throw std::invalid_argument("arrival rate must be positive");
}

double PoissonArrivals::next_gap_s() {
  // splitmix64: tiny, well mixed, and the same everywhere.
  std::uint64_t z = (state_ += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  z ^= z >> 31;
  const double uniform = static_cast<double>(z >> 11) * 0x1.0p-53;  // [0, 1)
  return -std::log1p(-uniform) / rate_per_s_;
}

}  // namespace gpuqos::replay
