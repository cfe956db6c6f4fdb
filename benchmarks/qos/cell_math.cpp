// The QoS benchmark's arithmetic (cell_math.h).
#include "cell_math.h"

#include <algorithm>
#include <numeric>
#include <stdexcept>

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

double violation_fraction(std::span<const double> latency_ms, double target_ms) {
  if (latency_ms.empty()) return 0.0;
  const auto over = std::count_if(latency_ms.begin(), latency_ms.end(), [&](double ms) { return ms > target_ms; });
  return static_cast<double>(over) / static_cast<double>(latency_ms.size());
}

double fraction_of_standalone(double measured, double standalone) {
  return standalone > 0 ? measured / standalone : 0.0;
}

double be_fraction_of_ideal(std::span<const double> fractions_of_standalone, double lc_busy_fraction) {
  const double leftover = 1.0 - lc_busy_fraction;
  if (fractions_of_standalone.empty() || leftover <= 0) return 0.0;
  const double mean = std::accumulate(fractions_of_standalone.begin(), fractions_of_standalone.end(), 0.0) /
                      static_cast<double>(fractions_of_standalone.size());
  return mean / leftover;
}

}  // namespace gpuqos::qos
