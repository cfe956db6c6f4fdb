// Small least-squares solvers on normal equations (Gram matrix G = X'X, right side r = X'y), so
// that models can keep running sums and refit without the samples.
#pragma once

#include <Eigen/Core>

namespace gpuqos::predictor {

// argmin over w >= 0 of w'Gw - 2r'w (Lawson-Hanson active set). Columns are scaled to a unit
// diagonal first; a column with a zero diagonal (a feature never seen non-zero) stays at 0.
// `ridge` is added to the scaled diagonal. Never throws; a degenerate G gives a zero vector.
Eigen::VectorXd solve_nonnegative(const Eigen::MatrixXd& gram, const Eigen::VectorXd& rhs, double ridge = 1e-9);

// argmin over w of w'Gw - 2r'w + ridge * |Dw|^2 (D: the unit-diagonal scaling), unconstrained.
Eigen::VectorXd solve_ridge(const Eigen::MatrixXd& gram, const Eigen::VectorXd& rhs, double ridge = 1e-6);

}  // namespace gpuqos::predictor
