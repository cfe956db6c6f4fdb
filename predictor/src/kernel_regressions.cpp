// KernelRegressions: running sums, NNLS per feature set, ridge for the power law.
#include "gpuqos/predictor/kernel_regressions.h"

#include <cmath>
#include <vector>

#include "gpuqos/predictor/nnls.h"

namespace gpuqos::predictor {

namespace {

std::vector<int> columns_of(FeatureSet set) {
  switch (set) {
    case FeatureSet::launch: return {kOne, kBlocks};
    case FeatureSet::waves: return {kOne, kWaves, kWaveThreadsPerBlock};
    case FeatureSet::work: return {kOne, kWork};
    case FeatureSet::work_surface: return {kOne, kWork, kSurface};
    case FeatureSet::wave_work: return {kOne, kWaves, kWaveWork};
    case FeatureSet::wave_args: {
      std::vector<int> c{kOne, kWaves};
      for (int i = 0; i < int(kMaxArgs); ++i) c.push_back(kWaveArg0 + i);
      return c;
    }
    case FeatureSet::power_law: break;
  }
  return {};
}

}  // namespace

const char* to_string(FeatureSet set) {
  switch (set) {
    case FeatureSet::launch: return "launch";
    case FeatureSet::waves: return "waves";
    case FeatureSet::work: return "work";
    case FeatureSet::work_surface: return "work_surface";
    case FeatureSet::wave_work: return "wave_work";
    case FeatureSet::wave_args: return "wave_args";
    case FeatureSet::power_law: return "power_law";
  }
  return "?";
}

void KernelRegressions::add(const Bank& bank, const LogBank& log_bank, double duration_ns, double decay) {
  if (!(duration_ns > 0) || !std::isfinite(duration_ns)) return;
  if (decay < 1.0) {
    sums_.gram *= decay;
    sums_.rhs *= decay;
    sums_.log_gram *= decay;
    sums_.log_rhs *= decay;
    sums_.weight *= decay;
  }
  // Relative least squares: minimise sum ((x.w - y) / y)^2, i.e. regress 1 on x / y.
  const Eigen::Matrix<double, kBankSize, 1> x = Eigen::Map<const Eigen::Matrix<double, kBankSize, 1>>(bank.data()) / duration_ns;
  sums_.gram.selfadjointView<Eigen::Upper>().rankUpdate(x);
  sums_.rhs += x;
  const Eigen::Map<const Eigen::Matrix<double, kLogBankSize, 1>> l(log_bank.data());
  sums_.log_gram.selfadjointView<Eigen::Upper>().rankUpdate(l);
  sums_.log_rhs += l * std::log2(duration_ns);
  sums_.weight += 1;
}

void KernelRegressions::refit() {
  const Eigen::MatrixXd gram = sums_.gram.selfadjointView<Eigen::Upper>();
  const Eigen::VectorXd rhs = sums_.rhs;
  for (int s = 0; s + 1 < kFeatureSetCount; ++s) {
    const std::vector<int> columns = columns_of(FeatureSet(s));
    linear_weights_[std::size_t(s)].setZero();
    fitted_[std::size_t(s)] = false;
    if (sums_.weight < double(columns.size()) + 1) continue;
    const Eigen::VectorXd w = solve_nonnegative(gram(columns, columns), rhs(columns));
    for (std::size_t i = 0; i < columns.size(); ++i) linear_weights_[std::size_t(s)][columns[i]] = w[Eigen::Index(i)];
    fitted_[std::size_t(s)] = w.maxCoeff() > 0;
  }
  const auto p = std::size_t(FeatureSet::power_law);
  fitted_[p] = sums_.weight >= 4;
  if (fitted_[p]) {
    const Eigen::MatrixXd log_gram = sums_.log_gram.selfadjointView<Eigen::Upper>();
    power_weights_ = solve_ridge(log_gram, sums_.log_rhs);
  }
}

double KernelRegressions::predict(FeatureSet set, const Bank& bank, const LogBank& log_bank) const {
  const auto s = std::size_t(set);
  if (!fitted_[s]) return 0;
  if (set == FeatureSet::power_law)
    return std::exp2(power_weights_.dot(Eigen::Map<const Eigen::Matrix<double, kLogBankSize, 1>>(log_bank.data())));
  return linear_weights_[s].dot(Eigen::Map<const Eigen::Matrix<double, kBankSize, 1>>(bank.data()));
}

std::optional<double> KernelRegressions::predict_log2(FeatureSet set, const Bank& bank, const LogBank& log_bank) const {
  const auto s = std::size_t(set);
  if (!fitted_[s]) return std::nullopt;
  if (set == FeatureSet::power_law) return power_weights_.dot(Eigen::Map<const Eigen::Matrix<double, kLogBankSize, 1>>(log_bank.data()));
  const double ns = linear_weights_[s].dot(Eigen::Map<const Eigen::Matrix<double, kBankSize, 1>>(bank.data()));
  return ns > 0 ? std::optional(std::log2(ns)) : std::nullopt;
}

void KernelRegressions::restore(const RegressionSums& sums) {
  sums_ = sums;
  refit();
}

}  // namespace gpuqos::predictor
