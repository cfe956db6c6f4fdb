// predictor-bench: the duration predictor's cost per call with 100,000 stored samples across 500
// kernel names (200 distinct shapes each, under the default cap of 256). Each call is timed alone
// with steady_clock; p50/p99 (ns) are counters, next to the cost of the clock reading itself
// (clock_overhead) so that figures are compared within one run.
//
// predict_kernel/<fixture>/<pattern>:
//   fixture 0: durations follow wave-quantised work (regressions answer);
//           1: each shape also has a factor of 0.5-1.5 no feature explains (kNN and blends answer);
//   pattern 0: every query picks one of the 500 names at random (their data mostly out of cache);
//           1: queries cycle through a working set of 50 names, as one training iteration would.
// Half of the queries are shapes seen in training (recurring launches), half are new.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "gpuqos/predictor/predictor.h"

namespace {

using gpuqos::predictor::CopyDirection;
using gpuqos::predictor::CopyFeatures;
using gpuqos::predictor::HostMemory;
using gpuqos::predictor::KernelFeatures;
using gpuqos::predictor::LaunchShape;
using gpuqos::predictor::ModelUsed;
using gpuqos::predictor::Predictor;

constexpr int kKernels = 500;
constexpr int kShapesPerKernel = 200;
constexpr int kWorkingSet = 50;

double uniform(std::mt19937_64& rng) { return double(rng() >> 11) / double(1ULL << 53); }

// A GEMM-like launch: B, M, N, K log-uniform, 128x128 tiles.
LaunchShape random_shape(std::mt19937_64& rng) {
  LaunchShape s;
  const auto dim = [&](double lo, double hi) { return std::uint64_t(std::exp2(lo + (hi - lo) * uniform(rng))); };
  s.args = {dim(0, 4), dim(6, 13), dim(6, 13), dim(6, 13)};
  s.arg_count = 4;
  s.grid = {std::uint32_t((s.args[1] + 127) / 128), std::uint32_t((s.args[2] + 127) / 128), std::uint32_t(s.args[0])};
  s.block = {256, 1, 1};
  return s;
}

double duration_ns(const LaunchShape& s, int kernel, bool irregular, std::mt19937_64& rng) {
  const double waves = std::ceil(double(s.grid[0]) * s.grid[1] * s.grid[2] / 108);
  const double per_block = 128.0 * 128.0 * double(s.args[3]) / (1e3 * (1 + kernel % 7));
  std::mt19937_64 shape_rng(s.args[0] * 1'000'003 + s.args[1] * 10'007 + s.args[2] * 101 + s.args[3]);
  const double shape_factor = irregular ? 0.5 + uniform(shape_rng) : 1.0;
  return (4000 + waves * per_block) * shape_factor * (0.95 + 0.1 * uniform(rng));
}

struct Query {
  int kernel;
  LaunchShape shape;
};

struct Fixture {
  Predictor predictor;
  std::vector<std::string> names;
  std::vector<Query> queries;        // shuffled; half trained shapes, half new
  std::vector<Query> observations;   // new shapes, with their durations
  std::vector<double> observed_ns;
};

Fixture build_fixture(bool irregular) {
  Fixture f;
  std::mt19937_64 rng(42);
  for (int k = 0; k < kKernels; ++k) f.names.push_back("ampere_sgemm_128x128_nn_variant_" + std::to_string(k));
  for (int i = 0; i < kShapesPerKernel; ++i) {
    for (int k = 0; k < kKernels; ++k) {
      const LaunchShape s = random_shape(rng);
      f.predictor.observe(KernelFeatures{f.names[std::size_t(k)], s}, duration_ns(s, k, irregular, rng));
      if (i % 2 == 0) f.queries.push_back({k, s});
    }
  }
  for (int i = 0; i < kShapesPerKernel / 2; ++i) {
    for (int k = 0; k < kKernels; ++k) {
      const LaunchShape s = random_shape(rng);
      f.queries.push_back({k, s});
      f.observations.push_back({k, s});
      f.observed_ns.push_back(duration_ns(s, k, irregular, rng));
    }
  }
  std::shuffle(f.queries.begin(), f.queries.end(), rng);
  return f;
}

const Fixture& fixture(bool irregular) {
  static const Fixture regular = build_fixture(false);
  static const Fixture shaped = build_fixture(true);
  return irregular ? shaped : regular;
}

// The queries of a pattern: all of them, or those of the first kWorkingSet names in cyclic order.
std::vector<KernelFeatures> query_stream(const Fixture& f, bool working_set) {
  std::vector<std::vector<const Query*>> by_kernel(kKernels);
  for (const Query& q : f.queries) by_kernel[std::size_t(q.kernel)].push_back(&q);
  std::vector<KernelFeatures> out;
  if (!working_set) {
    for (const Query& q : f.queries) out.push_back({f.names[std::size_t(q.kernel)], q.shape});
    return out;
  }
  for (std::size_t i = 0; i < by_kernel[0].size(); ++i)
    for (int k = 0; k < kWorkingSet; ++k) out.push_back({f.names[std::size_t(k)], by_kernel[std::size_t(k)][i]->shape});
  return out;
}

void report(benchmark::State& state, std::vector<double>& ns) {
  std::sort(ns.begin(), ns.end());
  const auto at = [&](double q) { return ns.empty() ? 0.0 : ns[std::min(ns.size() - 1, std::size_t(q * double(ns.size())))]; };
  state.counters["p50_ns"] = at(0.50);
  state.counters["p99_ns"] = at(0.99);
}

template <typename Call>
std::vector<double> timed(benchmark::State& state, Call&& call) {
  std::vector<double> ns;
  ns.reserve(std::size_t(state.max_iterations));
  std::size_t i = 0;
  for (auto _ : state) {
    const auto start = std::chrono::steady_clock::now();
    call(i++);
    const auto end = std::chrono::steady_clock::now();
    ns.push_back(double(std::chrono::duration_cast<std::chrono::nanoseconds>(end - start).count()));
  }
  return ns;
}

void clock_overhead(benchmark::State& state) {
  auto ns = timed(state, [](std::size_t) {});
  report(state, ns);
}

void predict_kernel(benchmark::State& state) {
  const Fixture& f = fixture(state.range(0) != 0);
  const std::vector<KernelFeatures> queries = query_stream(f, state.range(1) != 0);
  std::array<std::size_t, 16> by_model{};
  auto ns = timed(state, [&](std::size_t i) {
    const auto p = f.predictor.predict(queries[i % queries.size()]);
    benchmark::DoNotOptimize(p);
    ++by_model[std::size_t(p.model)];
  });
  report(state, ns);
  state.counters["stored_samples"] = double(f.predictor.stored_samples());
  for (ModelUsed m : {ModelUsed::knn, ModelUsed::regression, ModelUsed::blend})
    state.counters[std::string("share_") + to_string(m)] = double(by_model[std::size_t(m)]) / double(std::max<std::size_t>(ns.size(), 1));
}

void predict_copy(benchmark::State& state) {
  static const Predictor copies = [] {
    Predictor p;
    for (std::uint64_t i = 1; i <= 1000; ++i) p.observe(CopyFeatures{CopyDirection::h2d, HostMemory::pinned, i * 4096}, 5000.0 + double(i) * 160);
    return p;
  }();
  auto ns = timed(state, [&](std::size_t i) {
    benchmark::DoNotOptimize(copies.predict(CopyFeatures{CopyDirection::h2d, HostMemory::pinned, (i % 2000 + 1) * 4096}));
  });
  report(state, ns);
}

// observe() on a copy of the trained predictor: every candidate scored, the sample stored.
void observe_kernel(benchmark::State& state) {
  const Fixture& f = fixture(state.range(0) != 0);
  Predictor learner = f.predictor;
  auto ns = timed(state, [&](std::size_t i) {
    const std::size_t j = i % f.observations.size();
    learner.observe(KernelFeatures{f.names[std::size_t(f.observations[j].kernel)], f.observations[j].shape}, f.observed_ns[j]);
  });
  report(state, ns);
}

}  // namespace

BENCHMARK(clock_overhead)->Iterations(200'000);
BENCHMARK(predict_kernel)->ArgsProduct({{0, 1}, {0, 1}})->Iterations(200'000);
BENCHMARK(predict_copy)->Iterations(200'000);
BENCHMARK(observe_kernel)->Arg(0)->Arg(1)->Iterations(20'000);
BENCHMARK_MAIN();
