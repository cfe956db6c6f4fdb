// Percentiles of pooled samples (launch call times, iteration wall times).
#pragma once

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <vector>

#include <nlohmann/json.hpp>

namespace gpuqos::overhead {

struct Summary {
  std::size_t count = 0;
  double p50 = 0, p99 = 0, mean = 0, min = 0, max = 0;  // in the samples' unit
};

// Nearest-rank percentiles; all zero for no samples.
inline Summary summarize(std::vector<double> samples) {
  Summary s;
  if (samples.empty()) return s;
  std::sort(samples.begin(), samples.end());
  const auto at = [&](double q) {
    return samples[static_cast<std::size_t>(q * static_cast<double>(samples.size() - 1) + 0.5)];
  };
  s.count = samples.size();
  s.p50 = at(0.50);
  s.p99 = at(0.99);
  s.mean = std::accumulate(samples.begin(), samples.end(), 0.0) / static_cast<double>(samples.size());
  s.min = samples.front();
  s.max = samples.back();
  return s;
}

inline nlohmann::json to_json(const Summary& s, const char* unit) {
  const std::string u = unit;
  return {{"count", s.count},     {"p50_" + u, s.p50}, {"p99_" + u, s.p99},
          {"mean_" + u, s.mean}, {"min_" + u, s.min}, {"max_" + u, s.max}};
}

}  // namespace gpuqos::overhead
