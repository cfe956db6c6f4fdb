// Kernel predictions: each model and fallback on synthetic kernels with known answers, online
// updates and bounded memory.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <utility>
#include <vector>

#include "gpuqos/predictor/predictor.h"
#include "gpuqos/predictor/store.h"

namespace gpuqos::predictor {
namespace {

LaunchShape gemm(std::uint64_t m, std::uint64_t n, std::uint64_t k) {
  LaunchShape s;
  s.grid = {std::uint32_t((m + 63) / 64), std::uint32_t((n + 63) / 64), 1};
  s.block = {128, 1, 1};
  s.arg_count = 3;
  s.args = {m, n, k};
  return s;
}

// A kernel whose time is launch overhead plus work at a fixed rate: what a regression must recover.
double linear_time(const LaunchShape& s) { return 4000.0 + 0.002 * double(s.args[0] * s.args[1] * s.args[2]); }

// Deterministic pseudo-random numbers in [0, 1).
double noise(std::uint64_t i) {
  i = (i ^ (i >> 33)) * 0xff51afd7ed558ccdULL;
  i = (i ^ (i >> 33)) * 0xc4ceb9fe1a85ec53ULL;
  return double((i ^ (i >> 33)) >> 11) / double(1ULL << 53);
}

TEST(KernelPrediction, UnknownNameGetsTheGlobalDefault) {
  PredictorConfig config;
  config.default_kernel_ns = 12345;
  Predictor p(config);
  Prediction r = p.predict(KernelFeatures{"never_seen", gemm(64, 64, 64)});
  EXPECT_EQ(r.model, ModelUsed::global_default);
  EXPECT_EQ(r.duration_ns, 12345);
  for (double ns : {1000.0, 2000.0, 4000.0}) p.observe(KernelFeatures{"other", gemm(64, 64, 64)}, ns);
  r = p.predict(KernelFeatures{"never_seen", gemm(64, 64, 64)});
  EXPECT_EQ(r.model, ModelUsed::global_default);
  EXPECT_NEAR(r.duration_ns, 2000, 1);  // median of every kernel seen
  EXPECT_GE(r.upper_ns, r.duration_ns);
}

TEST(KernelPrediction, FewObservationsGiveTheNamesMedian) {
  Predictor p;
  for (double ns : {3000.0, 1000.0, 2000.0}) p.observe(KernelFeatures{"k", gemm(64, 64, 64)}, ns);
  const Prediction r = p.predict(KernelFeatures{"k", gemm(4096, 4096, 4096)});
  EXPECT_EQ(r.model, ModelUsed::name_stats);
  EXPECT_NEAR(r.duration_ns, 2000, 1);
  EXPECT_NEAR(r.upper_ns, 3000, 1);
}

TEST(KernelPrediction, KnnIsExactOnALatticeOfIrregularTimes) {
  Predictor p;
  // Times with no structure a regression could capture: only memory answers them.
  auto time_at = [](std::uint64_t i, std::uint64_t j) { return 1000.0 + 50000.0 * noise(i * 16 + j); };
  for (int pass = 0; pass < 3; ++pass)
    for (std::uint64_t i = 0; i < 8; ++i)
      for (std::uint64_t j = 0; j < 8; ++j) p.observe(KernelFeatures{"irregular", gemm(64u << i, 64u << j, 64)}, time_at(i, j));
  for (std::uint64_t i = 0; i < 8; ++i) {
    for (std::uint64_t j = 0; j < 8; ++j) {
      const Prediction r = p.predict(KernelFeatures{"irregular", gemm(64u << i, 64u << j, 64)});
      EXPECT_EQ(r.model, ModelUsed::knn);
      EXPECT_NEAR(r.duration_ns / time_at(i, j), 1.0, 1e-4) << i << "," << j << " " << describe_candidate(r.candidate);
    }
  }
}

TEST(KernelPrediction, RegressionRecoversLinearWorkAndExtrapolates) {
  Predictor p;
  for (std::uint64_t i = 0; i < 400; ++i) {
    const LaunchShape s = gemm(64 + std::uint64_t(noise(3 * i) * 960), 64 + std::uint64_t(noise(3 * i + 1) * 960),
                               64 + std::uint64_t(noise(3 * i + 2) * 960));
    p.observe(KernelFeatures{"gemm", s}, linear_time(s));
  }
  // 8x to 64x beyond anything seen: kNN would answer with the largest time it knows.
  for (std::uint64_t m : {8192u, 16384u}) {
    const LaunchShape far = gemm(m, 4096, 4096);
    const Prediction r = p.predict(KernelFeatures{"gemm", far});
    EXPECT_TRUE(r.model == ModelUsed::regression || r.model == ModelUsed::blend) << to_string(r.model);
    EXPECT_NEAR(r.duration_ns / linear_time(far), 1.0, 0.01) << describe_candidate(r.candidate);
  }
  const LaunchShape small = gemm(100, 200, 300);
  EXPECT_NEAR(p.predict(KernelFeatures{"gemm", small}).duration_ns / linear_time(small), 1.0, 0.01);
}

TEST(KernelPrediction, BlendCorrectsARegressionByItsNeighbours) {
  Predictor p;
  // Linear in work, except that large-m shapes run 30 % slower (another tile configuration, say):
  // a step no feature set has, which the neighbours' residuals show.
  auto time = [](const LaunchShape& s) { return linear_time(s) * (s.args[0] >= 640 ? 1.3 : 1.0); };
  for (int pass = 0; pass < 3; ++pass)
    for (std::uint64_t i = 0; i < 100; ++i) {
      const LaunchShape s = gemm(256 + 64 * (i % 10), 256 + 64 * (i / 10), 512);
      p.observe(KernelFeatures{"stepped", s}, time(s));
    }
  const LaunchShape unseen = gemm(704, 896, 512);  // n beyond the training range, inside the slow region
  const Prediction r = p.predict(KernelFeatures{"stepped", unseen});
  EXPECT_EQ(r.model, ModelUsed::blend) << describe_candidate(r.candidate);
  EXPECT_NEAR(r.duration_ns / time(unseen), 1.0, 0.03) << describe_candidate(r.candidate);
}

LaunchShape elementwise(std::uint32_t blocks) {
  LaunchShape s;
  s.grid = {blocks, 1, 1};
  s.block = {64, 1, 1};
  return s;
}

// What a daemon learning from nothing had learned of an elementwise kernel after 99 launches in a
// run on simgpu (data/online-elementwise.gqp, its store cut to that kernel; arg 0 is the element
// count): spans timed by a completion poll, 40 to 380 us whatever the launch's size. The power law
// fitted to them answered a launch of its largest grid without a count with 6,871 s: a kernel so
// priced is held as a long op for the rest of a run. No answer may leave the samples'
// proportional growth (plus the 2x slack): at or below the samples' sizes, twice the longest.
TEST(KernelPrediction, AnswersStayWithinProportionalGrowthOfTheSamples) {
  PredictorConfig config;
  config.sm_count = 132;
  const LoadedProfile loaded = load_profile(GPUQOS_SOURCE_DIR "/tests/predictor/data/online-elementwise.gqp", config);
  ASSERT_FALSE(loaded.warning) << *loaded.warning;
  const auto launch = [](std::uint32_t blocks, std::uint64_t count) {
    LaunchShape s = elementwise(blocks);
    s.arg_count = 1;
    s.args[0] = count;
    return s;
  };
  const double longest = std::exp2(17.86);  // its stored samples' longest
  for (const auto& [blocks, count] : std::vector<std::pair<std::uint32_t, std::uint64_t>>{
           {100352, 251000}, {50176, 126000}, {25088, 65000}, {12544, 33000}, {6272, 11000}, {3136, 5000}}) {
    const Prediction r = loaded.predictor.predict(KernelFeatures{"elementwise", launch(blocks, count)});
    EXPECT_LE(r.duration_ns, 2.0 * longest) << blocks << " " << describe_candidate(r.candidate);
    EXPECT_GE(r.duration_ns, 1'000) << blocks << " " << describe_candidate(r.candidate);
  }
  // Unlike any sample: the same grids over a count of 1 (or a pointer, which counts as none).
  for (std::uint32_t blocks : {100352u, 12544u, 3136u}) {
    for (std::uint64_t count : {std::uint64_t{1}, std::uint64_t{1} << 50}) {
      const Prediction r = loaded.predictor.predict(KernelFeatures{"elementwise", launch(blocks, count)});
      EXPECT_LE(r.duration_ns, 2.0 * longest) << blocks << " " << count << " " << describe_candidate(r.candidate);
    }
  }
  for (std::uint32_t times : {2u, 8u}) {  // beyond the largest: grown with the waves and the count
    const Prediction r = loaded.predictor.predict(KernelFeatures{"elementwise", launch(100352 * times, 251000ull * times)});
    EXPECT_LE(r.duration_ns, 2.0 * longest * times * times) << times << " " << describe_candidate(r.candidate);
  }
}

TEST(KernelPrediction, OnlineUpdatesMoveThePrediction) {
  Predictor p;
  const KernelFeatures k{"drifting", gemm(512, 512, 512)};
  for (int i = 0; i < 20; ++i) p.observe(k, 10'000);
  EXPECT_NEAR(p.predict(k).duration_ns, 10'000, 100);
  for (int i = 0; i < 40; ++i) p.observe(k, 20'000);  // the GPU got slower (clocks, contention)
  EXPECT_NEAR(p.predict(k).duration_ns, 20'000, 1000);
}

TEST(KernelPrediction, UpperEstimateCoversTheNoise) {
  Predictor p;
  const KernelFeatures k{"noisy", gemm(512, 512, 512)};
  for (std::uint64_t i = 0; i < 200; ++i) p.observe(k, 10'000 * (1.0 + 0.2 * noise(i)));
  const Prediction r = p.predict(k);
  EXPECT_GT(r.upper_ns, r.duration_ns * 1.05);
  EXPECT_LT(r.upper_ns, 12'500);
}

TEST(KernelPrediction, MemoryPerNameAndNamesAreBounded) {
  PredictorConfig config;
  config.max_samples_per_kernel = 64;
  config.max_kernels = 3;
  Predictor p(config);
  for (std::uint64_t i = 0; i < 5000; ++i) p.observe(KernelFeatures{"k", gemm(64 + i, 64, 64)}, 1000.0 + double(i));
  EXPECT_EQ(p.kernel("k")->store().size(), 64u);
  EXPECT_EQ(p.kernel("k")->observations(), 5000u);
  EXPECT_TRUE(p.observe(KernelFeatures{"b", gemm(64, 64, 64)}, 1000));
  EXPECT_TRUE(p.observe(KernelFeatures{"c", gemm(64, 64, 64)}, 1000));
  EXPECT_FALSE(p.observe(KernelFeatures{"d", gemm(64, 64, 64)}, 1000)) << "full, and no name idle";
  EXPECT_EQ(p.kernel_count(), 3u);
  EXPECT_EQ(p.stored_samples(), 66u);

  // "k" goes unobserved while "b" and "c" are: once it has been idle for kIdleEpochs, a new name
  // takes its place; "b" and "c", still in use, stay. However many observations pass meanwhile.
  p.advance_epochs(1);
  for (int i = 0; i < 10'000; ++i) p.observe(KernelFeatures{i % 2 ? "b" : "c", gemm(64, 64, 64)}, 1000);
  p.advance_epochs(Predictor::kIdleEpochs - 2);
  p.observe(KernelFeatures{"b", gemm(64, 64, 64)}, 1000);
  p.observe(KernelFeatures{"c", gemm(64, 64, 64)}, 1000);
  EXPECT_FALSE(p.observe(KernelFeatures{"d", gemm(64, 64, 64)}, 1000)) << "k idle for 59 epochs, not 60";
  p.advance_epochs(1);
  EXPECT_TRUE(p.observe(KernelFeatures{"d", gemm(64, 64, 64)}, 1000));
  EXPECT_EQ(p.kernel("k"), nullptr);
  EXPECT_NE(p.kernel("b"), nullptr);
  EXPECT_NE(p.kernel("c"), nullptr);
  EXPECT_EQ(p.kernel_count(), 3u);
  EXPECT_FALSE(p.observe(KernelFeatures{"e", gemm(64, 64, 64)}, 1000)) << "b, c and d were all used within the hour";
  p.advance_epochs(Predictor::kIdleEpochs - 2);
  EXPECT_FALSE(p.observe(KernelFeatures{"e", gemm(64, 64, 64)}, 1000)) << "b and c idle for 59";
  p.advance_epochs(1);
  EXPECT_TRUE(p.observe(KernelFeatures{"e", gemm(64, 64, 64)}, 1000)) << "one of b and c, idle for 60, gives way";
  EXPECT_NE(p.kernel("d"), nullptr) << "d was used an epoch later";
}

TEST(KernelPrediction, BadDurationsAreRejected) {
  Predictor p;
  const KernelFeatures k{"k", gemm(64, 64, 64)};
  EXPECT_FALSE(p.observe(k, 0));
  EXPECT_FALSE(p.observe(k, -5));
  EXPECT_FALSE(p.observe(k, std::nan("")));
  EXPECT_FALSE(p.observe(k, INFINITY));
  EXPECT_EQ(p.kernel_count(), 0u);
  EXPECT_FALSE(p.observe(OpFeatures{}, 1000));  // unsupported op
  EXPECT_EQ(p.predict(OpFeatures{}).model, ModelUsed::none);
}

}  // namespace
}  // namespace gpuqos::predictor
