// The QoS benchmark's arithmetic: load and arrival rate, targets, violations, busy fractions from
// simgpu-stat answers and the best-effort share of the ideal. Pure, so unit tests pin every figure
// the table shows (tests/benchmarks/qos_cell_math_test.cpp).
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include <nlohmann/json.hpp>

namespace gpuqos::qos {

// Device 0 of one simgpu-stat answer: simgpud's clock and the compute engine's busy time so far.
struct DeviceSample {
  std::uint64_t now_ns = 0;
  std::uint64_t compute_busy_ns = 0;
};

// Reads simgpu-stat's JSON ({"now_ns":..., "devices":[{"compute_busy_ns":...}, ...]}); throws
// std::runtime_error when it has no device or a field is missing.
DeviceSample parse_device_sample(const nlohmann::json& stat);

// Share of the window [before, after] the compute engine was busy, clamped to [0, 1]; 0 for an
// empty or backwards window.
double compute_busy_fraction(const DeviceSample& before, const DeviceSample& after);

// lc_load is arrival rate x standalone mean query latency: the share of time a query is in flight
// when the latency-critical job runs alone. These two convert between the load and the rate.
double arrival_rate_per_s(double lc_load, double mean_latency_ms);
double lc_load_of(double rate_per_s, double mean_latency_ms);

// A cell's latency target: target_factor x the standalone p99 at the same load and device mode.
double target_ms(double target_factor, double standalone_p99_ms);

// How long a run with the LC at rate_per_s lasts: duration_s, or long enough for min_queries arrivals
// on average when that is longer (0: duration_s). A p99's 95 % interval has an upper end from 368
// queries (quantile_interval below); Poisson arrivals scatter around their mean by sqrt(mean).
double lc_run_duration_s(double duration_s, double rate_per_s, std::uint32_t min_queries);

// Share of the latencies strictly above target_ms; 0 when there are none.
double violation_fraction(std::span<const double> latency_ms, double target_ms);

// A distribution-free confidence interval for the q-quantile of the distribution the values were
// drawn from (independent draws): order statistics x_(j) <= quantile <= x_(k), since the number of
// draws under the quantile is Binomial(n, q). Each end misses with probability at most
// (1 - confidence) / 2. An end is none when n is too small to give it: for a p99 at 95 % there is
// no upper end below 368 values (0.99^n must fall to 2.5 %): of 118 (a 10-s run at load 0.2 with
// --min-queries 0, whose p99 is then the second-largest) only the lower end exists, the fifth-largest.
struct QuantileInterval {
  std::optional<double> low, high;
};
QuantileInterval quantile_interval(std::span<const double> values, double q, double confidence);

// measured / standalone; none when the standalone figure is not positive (a missing or failed
// reference): a ratio to nothing is no figure, not 0.
std::optional<double> fraction_of_standalone(double measured, double standalone);

// How much of the GPU time the latency-critical job leaves idle the best-effort jobs got: the mean
// over the BE jobs of their fraction of standalone throughput, divided by the ideal leftover
// (1 - the LC's standalone GPU busy fraction). 1.0: all of it; none when no BE job or no leftover.
std::optional<double> be_fraction_of_ideal(std::span<const double> fractions_of_standalone, double lc_busy_fraction);

}  // namespace gpuqos::qos
