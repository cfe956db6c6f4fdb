// The QoS benchmark's arithmetic (cell_math.h).
#include "cell_math.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>
#include <vector>

#include <boost/math/distributions/binomial.hpp>

namespace gpuqos::qos {

DeviceSample parse_device_sample(const nlohmann::json& stat) {
  try {
    const nlohmann::json& devices = stat.at("devices");
    if (!devices.is_array() || devices.empty()) throw std::runtime_error("simgpu-stat reported no device");
    return {stat.at("now_ns").get<std::uint64_t>(), devices.at(0).at("compute_busy_ns").get<std::uint64_t>()};
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(std::string("unexpected simgpu-stat answer: ") + e.what());
  }
}

double compute_busy_fraction(const DeviceSample& before, const DeviceSample& after) {
  if (after.now_ns <= before.now_ns || after.compute_busy_ns < before.compute_busy_ns) return 0.0;
  const double busy = static_cast<double>(after.compute_busy_ns - before.compute_busy_ns);
  return std::clamp(busy / static_cast<double>(after.now_ns - before.now_ns), 0.0, 1.0);
}

double arrival_rate_per_s(double lc_load, double mean_latency_ms) {
  if (lc_load <= 0 || mean_latency_ms <= 0) throw std::invalid_argument("load and mean latency must be positive");
  return lc_load * 1000.0 / mean_latency_ms;
}

double lc_load_of(double rate_per_s, double mean_latency_ms) { return rate_per_s * mean_latency_ms / 1000.0; }

double target_ms(double target_factor, double standalone_p99_ms) { return target_factor * standalone_p99_ms; }

double lc_run_duration_s(double duration_s, double rate_per_s, std::uint32_t min_queries) {
  if (min_queries == 0 || !(rate_per_s > 0)) return duration_s;
  return std::max(duration_s, static_cast<double>(min_queries) / rate_per_s);
}

double violation_fraction(std::span<const double> latency_ms, double target_ms) {
  if (latency_ms.empty()) return 0.0;
  const auto over = std::count_if(latency_ms.begin(), latency_ms.end(), [&](double ms) { return ms > target_ms; });
  return static_cast<double>(over) / static_cast<double>(latency_ms.size());
}

QuantileInterval quantile_interval(std::span<const double> values, double q, double confidence) {
  if (values.empty() || !(q > 0 && q < 1) || !(confidence > 0 && confidence < 1))
    throw std::invalid_argument("quantile_interval: values, 0 < q < 1 and 0 < confidence < 1 needed");
  std::vector<double> sorted(values.begin(), values.end());
  std::sort(sorted.begin(), sorted.end());
  const auto n = sorted.size();
  const boost::math::binomial_distribution<double> under(static_cast<double>(n), q);  // draws under the quantile
  const double tail = (1.0 - confidence) / 2.0;
  QuantileInterval interval;
  // x_(j) (1-based) is above the quantile when at most j - 1 draws are under it: the largest j with
  // P(B <= j - 1) <= tail.
  for (std::size_t j = n; j >= 1; --j) {
    if (boost::math::cdf(under, static_cast<double>(j - 1)) <= tail) {
      interval.low = sorted[j - 1];
      break;
    }
  }
  // x_(k) is under it when at least k draws are: the smallest k with P(B >= k) <= tail.
  for (std::size_t k = 1; k <= n; ++k) {
    if (boost::math::cdf(boost::math::complement(under, static_cast<double>(k - 1))) <= tail) {
      interval.high = sorted[k - 1];
      break;
    }
  }
  return interval;
}

std::optional<double> fraction_of_standalone(double measured, double standalone) {
  if (!(standalone > 0)) return std::nullopt;
  return measured / standalone;
}

std::optional<double> be_fraction_of_ideal(std::span<const double> fractions_of_standalone, double lc_busy_fraction) {
  const double leftover = 1.0 - lc_busy_fraction;
  if (fractions_of_standalone.empty() || !(leftover > 0)) return std::nullopt;
  const double mean = std::accumulate(fractions_of_standalone.begin(), fractions_of_standalone.end(), 0.0) /
                      static_cast<double>(fractions_of_standalone.size());
  return mean / leftover;
}

}  // namespace gpuqos::qos
