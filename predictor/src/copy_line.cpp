// CopyLine: latency + bytes / bandwidth from running sums, corrected at recorded sizes.
#include "gpuqos/predictor/copy_line.h"

#include <Eigen/Core>
#include <algorithm>
#include <cmath>

#include "gpuqos/predictor/nnls.h"

namespace gpuqos::predictor {

namespace {

constexpr std::size_t kMinResiduals = 5;
constexpr std::uint64_t kMinScored = 5;
constexpr double kReach = 2.0;  // log2 bytes: a size's deviation from the line says nothing two doublings away

}  // namespace

std::optional<double> CopyLine::blend_log2(std::uint64_t bytes) const {
  const SizeMemory::Entry* below = sizes_.at_or_below(bytes);
  if (below && below->bytes == bytes) return below->median_log2_ns;
  const double log2_bytes = std::log2(double(std::max<std::uint64_t>(bytes, 1)));
  double correction = 0, weights = 0, nearest = kReach;
  for (const SizeMemory::Entry* e : {below, sizes_.above(bytes)}) {
    const double at = e ? line_ns(e->bytes) : 0;
    if (!e || !(at > 0)) continue;
    const double distance = std::fabs(log2_bytes - std::log2(double(std::max<std::uint64_t>(e->bytes, 1))));
    if (distance >= kReach) continue;
    const double w = 1.0 / (distance + 0.05);
    correction += w * (double(e->median_log2_ns) - std::log2(at));
    weights += w;
    nearest = std::min(nearest, distance);
  }
  const double line = line_ns(bytes);
  if (weights == 0 || !(line > 0)) return std::nullopt;
  return std::log2(line) + correction / weights * (1.0 - nearest / kReach);
}

std::optional<double> CopyLine::recorded_ns(std::uint64_t bytes) const {
  const SizeMemory::Entry* at = sizes_.at_or_below(bytes);
  if (!at || at->bytes != bytes || at->log2_ns.size() == 0) return std::nullopt;
  return std::exp2(double(at->median_log2_ns));
}

CopyLine::Answer CopyLine::predict(std::uint64_t bytes) const {
  const bool blend_wins = scores_[kBlend].count >= kMinScored &&
                          scores_[kBlend].mean_abs_log2_error < scores_[kLine].mean_abs_log2_error;
  if (blend_wins) {
    if (const auto log2_ns = blend_log2(bytes)) return {std::exp2(*log2_ns), true};
  }
  return {line_ns(bytes), false};
}

void CopyLine::observe(std::uint64_t bytes, double duration_ns, double decay, std::uint32_t score_window) {
  if (!(duration_ns > 0) || !std::isfinite(duration_ns)) return;
  const double measured = std::log2(duration_ns);
  if (fitted_) {
    const double line = line_ns(bytes);
    if (line > 0) scores_[kLine].add(std::fabs(std::log2(line) - measured), score_window);
    if (const auto blend = blend_log2(bytes)) scores_[kBlend].add(std::fabs(*blend - measured), score_window);
    const double predicted = predict(bytes).ns;
    if (predicted > 0) residuals_.push(float(measured - std::log2(predicted)));
  }
  if (decay < 1.0) {
    for (double* v : {&sums_.g00, &sums_.g01, &sums_.g11, &sums_.r0, &sums_.r1, &sums_.weight}) *v *= decay;
  }
  const double x0 = 1.0 / duration_ns;  // relative least squares: regress 1 on (1, bytes) / duration
  const double x1 = double(bytes) / duration_ns;
  sums_.g00 += x0 * x0;
  sums_.g01 += x0 * x1;
  sums_.g11 += x1 * x1;
  sums_.r0 += x0;
  sums_.r1 += x1;
  sums_.weight += 1;
  sizes_.record(bytes, float(measured));
  refit();
}

void CopyLine::refit() {
  Eigen::MatrixXd gram(2, 2);
  gram << sums_.g00, sums_.g01, sums_.g01, sums_.g11;
  Eigen::VectorXd rhs(2);
  rhs << sums_.r0, sums_.r1;
  const Eigen::VectorXd w = solve_nonnegative(gram, rhs);
  latency_ns_ = w[0];
  ns_per_byte_ = w[1];
  const auto& sizes = sizes_.entries();  // sorted by bytes
  const bool spread = sizes.size() >= 2 && sizes.back().bytes >= 2 * std::max<std::uint64_t>(sizes.front().bytes, 1);
  fitted_ = spread && sums_.weight > 0 && (latency_ns_ > 0 || ns_per_byte_ > 0);
  upper_ratio_ = residuals_.size() >= kMinResiduals ? std::exp2(std::max(0.0f, residuals_.quantile(0.9))) : 1.5;
}

CopyLine::State CopyLine::state() const {
  State s{sums_, residuals_.in_order(), scores_, {}, sizes_.clock()};
  for (const SizeMemory::Entry& e : sizes_.entries()) s.sizes.emplace_back(e.bytes, e.log2_ns.in_order());
  return s;
}

void CopyLine::restore(const State& state) {
  sums_ = state.sums;
  residuals_.restore(state.residuals);
  scores_ = state.scores;
  std::vector<SizeMemory::Entry> entries;
  for (const auto& [bytes, values] : state.sizes) {
    SizeMemory::Entry e{bytes};
    e.log2_ns.restore(values);
    entries.push_back(std::move(e));
  }
  sizes_.restore(std::move(entries), state.size_clock);
  refit();
}

}  // namespace gpuqos::predictor
