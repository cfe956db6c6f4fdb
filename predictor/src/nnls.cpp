// Non-negative and ridge least squares on normal equations, for models that keep running sums.
#include "gpuqos/predictor/nnls.h"

#include <Eigen/Cholesky>
#include <algorithm>
#include <cmath>
#include <vector>

namespace gpuqos::predictor {

namespace {

// Unit-diagonal (Jacobi) scaling: features that differ by twelve decades share one solve.
Eigen::VectorXd column_scale(const Eigen::MatrixXd& gram) {
  Eigen::VectorXd scale(gram.rows());
  for (Eigen::Index j = 0; j < gram.rows(); ++j) {
    const double d = gram(j, j);
    scale[j] = d > 0 && std::isfinite(d) ? 1.0 / std::sqrt(d) : 0.0;
  }
  return scale;
}

// Solves G_PP z = r_P over the passive set P; z is zero elsewhere.
Eigen::VectorXd solve_on(const Eigen::MatrixXd& g, const Eigen::VectorXd& r, const std::vector<int>& passive) {
  Eigen::VectorXd z = Eigen::VectorXd::Zero(g.rows());
  if (passive.empty()) return z;
  const Eigen::MatrixXd sub = g(passive, passive);
  const Eigen::VectorXd rhs = r(passive);
  const Eigen::VectorXd sol = sub.ldlt().solve(rhs);
  for (std::size_t i = 0; i < passive.size(); ++i) z[passive[i]] = std::isfinite(sol[Eigen::Index(i)]) ? sol[Eigen::Index(i)] : 0.0;
  return z;
}

}  // namespace

Eigen::VectorXd solve_nonnegative(const Eigen::MatrixXd& gram, const Eigen::VectorXd& rhs, double ridge) {
  const Eigen::Index d = gram.rows();
  const Eigen::VectorXd scale = column_scale(gram);
  Eigen::MatrixXd g = scale.asDiagonal() * gram * scale.asDiagonal();
  for (Eigen::Index j = 0; j < d; ++j) g(j, j) += scale[j] > 0 ? ridge : 1.0;
  const Eigen::VectorXd r = scale.cwiseProduct(rhs);
  Eigen::VectorXd w = Eigen::VectorXd::Zero(d);
  std::vector<bool> is_passive(std::size_t(d), false);
  const double tolerance = 1e-12 * std::max(1.0, r.cwiseAbs().maxCoeff());
  for (Eigen::Index outer = 0; outer < 3 * d; ++outer) {
    const Eigen::VectorXd gradient = r - g * w;
    Eigen::Index entering = -1;
    double steepest = tolerance;
    for (Eigen::Index j = 0; j < d; ++j) {
      if (!is_passive[std::size_t(j)] && scale[j] > 0 && gradient[j] > steepest) {
        steepest = gradient[j];
        entering = j;
      }
    }
    if (entering < 0) break;
    is_passive[std::size_t(entering)] = true;
    for (Eigen::Index inner = 0; inner < 3 * d; ++inner) {
      std::vector<int> passive;
      for (Eigen::Index j = 0; j < d; ++j)
        if (is_passive[std::size_t(j)]) passive.push_back(int(j));
      const Eigen::VectorXd z = solve_on(g, r, passive);
      double step = 1.0;
      for (int j : passive)
        if (z[j] <= 0) step = std::min(step, w[j] / (w[j] - z[j]));
      if (step >= 1.0) {
        w = z;
        break;
      }
      w += step * (z - w);
      for (int j : passive) {
        if (w[j] <= 1e-15) {
          w[j] = 0;
          is_passive[std::size_t(j)] = false;
        }
      }
    }
  }
  Eigen::VectorXd out = scale.cwiseProduct(w);
  return out.allFinite() ? out : Eigen::VectorXd::Zero(d);
}

Eigen::VectorXd solve_ridge(const Eigen::MatrixXd& gram, const Eigen::VectorXd& rhs, double ridge) {
  const Eigen::VectorXd scale = column_scale(gram);
  Eigen::MatrixXd g = scale.asDiagonal() * gram * scale.asDiagonal();
  for (Eigen::Index j = 0; j < g.rows(); ++j) g(j, j) += scale[j] > 0 ? ridge : 1.0;
  const Eigen::VectorXd w = g.ldlt().solve(scale.cwiseProduct(rhs));
  Eigen::VectorXd out = scale.cwiseProduct(w);
  return out.allFinite() ? out : Eigen::VectorXd::Zero(gram.rows());
}

}  // namespace gpuqos::predictor
