// Least squares on normal equations: exact recovery, the non-negativity constraint, degenerate input.
#include <gtest/gtest.h>

#include "gpuqos/predictor/nnls.h"

namespace gpuqos::predictor {
namespace {

// Gram and right side of X w = y for rows x_i, y_i.
std::pair<Eigen::MatrixXd, Eigen::VectorXd> normal_equations(const Eigen::MatrixXd& x, const Eigen::VectorXd& y) {
  return {x.transpose() * x, x.transpose() * y};
}

TEST(Nnls, RecoversAnExactNonNegativeSolutionAcrossScales) {
  Eigen::MatrixXd x(5, 3);
  x << 1, 1e3, 1e9, 1, 2e3, 3e9, 1, 5e3, 1e10, 1, 7e3, 2e9, 1, 1e4, 5e10;
  const Eigen::Vector3d truth(2000, 0.5, 3e-6);
  const auto [g, r] = normal_equations(x, x * truth);
  const Eigen::VectorXd w = solve_nonnegative(g, r);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(w[i] / truth[i], 1.0, 1e-6) << i;
}

TEST(Nnls, ClampsNegativeCoefficientsToZero) {
  Eigen::MatrixXd x(4, 2);
  x << 1, 1, 1, 2, 1, 3, 1, 4;
  Eigen::VectorXd y(4);
  y << 10, 8, 6, 4;  // slope -2: best non-negative fit is the constant mean
  const auto [g, r] = normal_equations(x, y);
  const Eigen::VectorXd w = solve_nonnegative(g, r);
  EXPECT_NEAR(w[0], 7.0, 1e-6);
  EXPECT_EQ(w[1], 0.0);
}

TEST(Nnls, NeverSeenFeatureStaysZeroAndZeroGramGivesZero) {
  Eigen::MatrixXd x(3, 2);
  x << 1, 0, 1, 0, 1, 0;
  const auto [g, r] = normal_equations(x, Eigen::Vector3d(4, 4, 4));
  const Eigen::VectorXd w = solve_nonnegative(g, r);
  EXPECT_NEAR(w[0], 4.0, 1e-6);
  EXPECT_EQ(w[1], 0.0);
  EXPECT_TRUE(solve_nonnegative(Eigen::MatrixXd::Zero(2, 2), Eigen::VectorXd::Zero(2)).isZero());
}

TEST(Ridge, RecoversUnconstrainedSolution) {
  Eigen::MatrixXd x(4, 2);
  x << 1, 1, 1, 2, 1, 3, 1, 4;
  Eigen::VectorXd y(4);
  y << 10, 8, 6, 4;
  const auto [g, r] = normal_equations(x, y);
  const Eigen::VectorXd w = solve_ridge(g, r, 1e-12);
  EXPECT_NEAR(w[0], 12.0, 1e-6);
  EXPECT_NEAR(w[1], -2.0, 1e-6);
}

}  // namespace
}  // namespace gpuqos::predictor
