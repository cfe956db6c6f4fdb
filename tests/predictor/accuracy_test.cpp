// Accuracy on real measurements (../shared/traces, SOURCES.md): NeuSight A100 `linear` and `bmm`
// tables (scalar args B, M, N, K) under 5-fold cross-validation and extrapolation (trained on the
// 80 % of rows with the least work B*M*N*K, tested on the 20 % with the most), and the copies of a
// real A100 training trace (5-fold cross-validation over its copies, copies >= 64 KiB scored).
#include <gtest/gtest.h>

#include <filesystem>
#include <iomanip>
#include <iostream>
#include <optional>

#include "gpuqos/predictor/evaluation.h"

namespace gpuqos::predictor {
namespace {

const std::filesystem::path kTraces = std::filesystem::path(GPUQOS_SOURCE_DIR) / ".." / "shared" / "traces";

// The samples of a trace file, or nullopt when the file is not there (the test then skips).
std::optional<SampleSet> load(const char* name, std::vector<std::string> csv_args = {}) {
  const auto path = kTraces / name;
  if (!std::filesystem::exists(path)) return std::nullopt;
  SampleSet samples;
  const ReadReport report = read_measurements(path, ReadOptions{std::move(csv_args)}, samples);
  EXPECT_FALSE(report.failed) << (report.messages.empty() ? "" : report.messages[0]);
  EXPECT_EQ(report.skipped, 0u);
  return samples;
}

// The figures, in the test's output (ctest --verbose) for the record.
void print(const char* what, const ErrorSummary& s) {
  std::cout << std::fixed << std::setprecision(2) << what << ": median APE " << s.median_ape * 100 << "%, MAPE " << s.mape * 100
            << "%, p90 APE " << s.p90_ape * 100 << "%, n=" << s.count << "\n";
}

TEST(Accuracy, NeuSightLinear) {
  const auto samples = load("neusight_linear_a100pcie40gb_train.csv", {"B", "M", "N", "K"});
  if (!samples) GTEST_SKIP() << "no " << (kTraces / "neusight_linear_a100pcie40gb_train.csv");
  ASSERT_EQ(samples->kernels.size(), 6460u);
  const EvalResult cv = cross_validate(*samples, 5, EvalSettings{});
  print("linear, 5-fold CV", cv.kernels);
  EXPECT_LE(cv.kernels.median_ape, 0.05);
  EXPECT_LE(cv.kernels.mape, 0.10);
  EXPECT_EQ(cv.kernels.count, 6460u);
  const auto [low, high] = split_by_work(*samples, 0.8);
  const EvalResult extrapolated = evaluate(low, high, EvalSettings{});
  print("linear, extrapolation to the 20% most work", extrapolated.kernels);
  EXPECT_LE(extrapolated.kernels.median_ape, 0.05);
}

TEST(Accuracy, NeuSightBmm) {
  const auto samples = load("neusight_bmm_a100pcie40gb_train.csv", {"B", "M", "N", "K"});
  if (!samples) GTEST_SKIP() << "no " << (kTraces / "neusight_bmm_a100pcie40gb_train.csv");
  ASSERT_EQ(samples->kernels.size(), 16661u);
  const EvalResult cv = cross_validate(*samples, 5, EvalSettings{});
  print("bmm, 5-fold CV", cv.kernels);
  EXPECT_LE(cv.kernels.median_ape, 0.05);
  EXPECT_LE(cv.kernels.mape, 0.10);
  const auto [low, high] = split_by_work(*samples, 0.8);
  const EvalResult extrapolated = evaluate(low, high, EvalSettings{});
  print("bmm, extrapolation to the 20% most work", extrapolated.kernels);
  EXPECT_LE(extrapolated.kernels.median_ape, 0.10);
}

TEST(Accuracy, RecsysCopies) {
  const auto samples = load("hta_a100_recsys_train_rank0.json.gz");
  if (!samples) GTEST_SKIP() << "no " << (kTraces / "hta_a100_recsys_train_rank0.json.gz");
  SampleSet copies;
  copies.copies = samples->copies;  // the copies alone: kernels are not what this measures
  EvalSettings settings;
  settings.min_copy_bytes = 64 * 1024;
  const EvalResult cv = cross_validate(copies, 5, settings);
  print("recsys copies >= 64 KiB, 5-fold CV", cv.copies);
  EXPECT_GE(cv.copies.count, 500u);
  EXPECT_LE(cv.copies.mape, 0.10);
}

}  // namespace
}  // namespace gpuqos::predictor
