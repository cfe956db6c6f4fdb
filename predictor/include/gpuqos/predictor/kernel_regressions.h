// One kernel's regressions, kept as running normal-equation sums so that every observation is an
// O(features^2) update and a refit never needs the samples: non-negative linear models of the
// duration on physical feature sets (fitted on relative error, so a 10 us op counts as much as a
// 10 ms one, and with an intercept for the launch overhead), and a power law fitted in log space.
#pragma once

#include <Eigen/Core>
#include <array>
#include <cstdint>
#include <optional>

#include "gpuqos/predictor/shape_features.h"

namespace gpuqos::predictor {

enum class FeatureSet : std::uint8_t {
  launch,        // 1, blocks
  waves,         // 1, waves, waves * threads per block
  work,          // 1, work (B*M*N*K)
  work_surface,  // 1, work, operand surface
  wave_work,     // 1, waves, waves * work per block
  wave_args,     // 1, waves, waves * arg_i
  power_law,     // log2 d = w . (1, log2 blocks, log2 threads/block, log2 shared, log2 arg_i)
};
inline constexpr int kFeatureSetCount = 7;
const char* to_string(FeatureSet set);

// The sums themselves (what the profile store persists).
struct RegressionSums {
  Eigen::Matrix<double, kBankSize, kBankSize> gram = Eigen::Matrix<double, kBankSize, kBankSize>::Zero();
  Eigen::Matrix<double, kBankSize, 1> rhs = Eigen::Matrix<double, kBankSize, 1>::Zero();
  Eigen::Matrix<double, kLogBankSize, kLogBankSize> log_gram = Eigen::Matrix<double, kLogBankSize, kLogBankSize>::Zero();
  Eigen::Matrix<double, kLogBankSize, 1> log_rhs = Eigen::Matrix<double, kLogBankSize, 1>::Zero();
  double weight = 0;  // observations, decayed like the sums
};

class KernelRegressions {
 public:
  // Adds one measurement; every older one is first weighted down by `decay` (<= 1).
  void add(const Bank& bank, const LogBank& log_bank, double duration_ns, double decay);
  // Solves every feature set from the sums: O(features^3), no allocation proportional to samples.
  void refit();
  // Predicted duration in ns; 0 when the set has no usable fit yet.
  double predict(FeatureSet set, const Bank& bank, const LogBank& log_bank) const;
  // log2 of the same; nullopt when there is no usable fit or it is not positive here.
  std::optional<double> predict_log2(FeatureSet set, const Bank& bank, const LogBank& log_bank) const;

  const RegressionSums& sums() const { return sums_; }
  void restore(const RegressionSums& sums);

 private:
  std::array<bool, kFeatureSetCount> fitted_{};  // the fits first: predict() reads only these
  std::array<Eigen::Matrix<double, kBankSize, 1>, kFeatureSetCount - 1> linear_weights_{};
  Eigen::Matrix<double, kLogBankSize, 1> power_weights_ = Eigen::Matrix<double, kLogBankSize, 1>::Zero();
  RegressionSums sums_;
};

}  // namespace gpuqos::predictor
