// KernelModel: test-then-train scoring of the candidates, prediction by the best one.
#include "gpuqos/predictor/kernel_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "gpuqos/predictor/candidates.h"

namespace gpuqos::predictor {

namespace {

constexpr float kMaxBlendCorrection = 4.0f;     // log2: a blend moves its regression by at most 16x
constexpr float kDefaultUpperLog2Ratio = 0.585f; // 1.5x until residuals are known
constexpr std::size_t kMinResiduals = 5;
// log2: how far past the proportional bound an answer may go. Real kernels step (another tile
// configuration, a wave more): 30 % steps are common, 2x is not.
constexpr float kEnvelopeSlackLog2 = 1.0f;

constexpr double kCloseScore = 0.95;            // a more complex candidate must beat a simpler one by 5 %

// Shepard weights: 1 / d^2, and a sample of the very same shape (d = 0) answers alone.
float weight_of(const Candidate& c, float distance, float nearest) {
  if (!c.inverse_distance) return 1.0f;
  if (nearest == 0.0f) return distance == 0.0f ? 1.0f : 0.0f;
  return 1.0f / (distance * distance);
}

// Whether `challenger` should replace `incumbent` (earlier in the table: simpler).
bool beats(const ModelScore& challenger, const ModelScore& incumbent) {
  return challenger.mean_abs_log2_error < incumbent.mean_abs_log2_error * kCloseScore - 1e-3;
}

}  // namespace

KernelModel::KernelModel(const PredictorConfig& config)
    : store_(config.max_samples_per_kernel, config.sm_count),
      scores_(candidates().size()),
      recent_log2_ns_(config.stats_window),
      residual_log2_(config.stats_window) {}

float KernelModel::within_envelope(float log2_ns, const SizePoint& size) const {
  if (sample_sizes_.empty()) return log2_ns;
  float longest = std::numeric_limits<float>::infinity(), shortest = -longest;
  for (std::uint32_t slot = 0; slot < sample_sizes_.size(); ++slot) {
    const SizePoint& at = sample_sizes_[slot];
    float above = 0, below = 0;
    for (int d = 0; d < kSizeDims; ++d) {
      const float delta = size[std::size_t(d)] - at[std::size_t(d)];
      above += std::max(0.0f, delta);
      below += std::max(0.0f, -delta);
    }
    const float measured = store_.sample(slot).log2_ns;
    longest = std::min(longest, measured + above);
    shortest = std::max(shortest, measured - below);
  }
  // Samples that contradict the rule (a larger shape measured faster, noise) leave the range between.
  if (shortest > longest) std::swap(shortest, longest);
  return std::clamp(log2_ns, shortest - kEnvelopeSlackLog2, longest + kEnvelopeSlackLog2);
}

void KernelModel::find_neighbors(const LaunchShape& shape, int k, bool exact_suffices, Query& q) const {
  if (exact_suffices) {  // a recurring launch: its own sample is the nearest, at distance 0, and answers alone
    if (const auto slot = store_.find(shape)) {
      q.neighbors.count = 1;
      q.neighbors.slot[0] = *slot;
      q.neighbors.distance[0] = 0;
      return;
    }
  }
  q.point = knn_point(shape);
  q.neighbors = store_.nearest(q.point, k);
}

std::optional<float> KernelModel::evaluate(int index, const Query& q) const {
  const Candidate& c = candidates()[std::size_t(index)];
  if (c.kind == CandidateKind::name_stats) return recent_log2_ns_.size() ? std::optional(median_log2_ns_) : std::nullopt;
  if (c.kind == CandidateKind::knn) {
    const int n = std::min(c.k, q.neighbors.count);
    if (n == 0) return std::nullopt;
    float sum = 0, weights = 0;
    for (int j = 0; j < n; ++j) {
      const float w = weight_of(c, q.neighbors.distance[std::size_t(j)], q.neighbors.distance[0]);
      sum += w * store_.sample(q.neighbors.slot[std::size_t(j)]).log2_ns;
      weights += w;
    }
    return sum / weights;
  }
  const std::optional<double> regression = regressions_.predict_log2(c.feature_set, q.bank, q.log_bank);
  if (!regression) return std::nullopt;
  const auto log2_regression = float(*regression);
  if (c.kind == CandidateKind::regression) return within_envelope(log2_regression, q.size);
  float correction = 0, weights = 0;  // blend: the neighbours' mean log2(measured / regression)
  for (int j = 0; j < std::min(c.k, q.neighbors.count); ++j) {
    const float w = weight_of(c, q.neighbors.distance[std::size_t(j)], q.neighbors.distance[0]);
    const std::optional<float> residual = w > 0.0f ? residual_at(c.feature_set, q.neighbors.slot[std::size_t(j)]) : std::nullopt;
    if (!residual) continue;
    correction += w * *residual;
    weights += w;
  }
  if (weights == 0) return std::nullopt;
  return within_envelope(log2_regression + std::clamp(correction / weights, -kMaxBlendCorrection, kMaxBlendCorrection),
                         q.size);
}

std::optional<float> KernelModel::residual_at(FeatureSet set, std::uint32_t slot) const {
  if (int(set) == residual_set_) return sample_residuals_[slot];
  const auto at_sample = regressions_.predict_log2(set, store_.bank(slot), store_.log_bank(slot));
  return at_sample ? std::optional(store_.sample(slot).log2_ns - float(*at_sample)) : std::nullopt;
}

// Recomputes sample_residuals_ for the feature set of the blend most likely to answer.
void KernelModel::refresh_residuals() {
  residual_set_ = -1;
  int blend = -1;
  for (int c : {best_, best_far_})
    if (blend < 0 && c >= 0 && candidates()[std::size_t(c)].kind == CandidateKind::blend) blend = c;
  if (blend < 0) return;
  const FeatureSet set = candidates()[std::size_t(blend)].feature_set;
  sample_residuals_.resize(store_.size());
  for (std::uint32_t slot = 0; slot < store_.size(); ++slot) {
    const auto at_sample = regressions_.predict_log2(set, store_.bank(slot), store_.log_bank(slot));
    if (!at_sample) return;  // no usable fit: residuals are computed on demand
    sample_residuals_[slot] = store_.sample(slot).log2_ns - float(*at_sample);
  }
  residual_set_ = int(set);
}

int KernelModel::choose(const Query& q, const PredictorConfig& config) const {
  if (best_ < 0) return -1;
  const bool knn = candidates()[std::size_t(best_)].kind == CandidateKind::knn;
  const bool far = q.neighbors.count == 0 || q.neighbors.distance[0] > float(config.knn_max_distance);
  return knn && far && best_far_ >= 0 ? best_far_ : best_;
}

Prediction KernelModel::predict(const LaunchShape& shape, const PredictorConfig& config) const {
  const Prediction fallback{median_ns_, std::max(p90_ns_, median_ns_), ModelUsed::name_stats, 0};
  if (best_ < 0) return fallback;
  const CandidateKind kind = candidates()[std::size_t(best_)].kind;
  if (kind == CandidateKind::name_stats) return fallback;
  Query q;
  if (kind != CandidateKind::regression) {  // only as many neighbours as the answer may need
    const Candidate& best = candidates()[std::size_t(best_)];
    const int fallback_k = best_far_ >= 0 ? candidates()[std::size_t(best_far_)].k : 1;
    const bool exact_suffices = best.inverse_distance || best.k == 1;
    find_neighbors(shape, std::max({1, best.k, kind == CandidateKind::knn ? fallback_k : 1}), exact_suffices, q);
  }
  const int chosen = choose(q, config);
  const Candidate& answering = candidates()[std::size_t(chosen)];
  if (answering.kind != CandidateKind::knn) {
    q.size = size_point(shape, config.sm_count);
    if (answering.feature_set == FeatureSet::power_law) {
      q.log_bank = log_bank(shape);
    } else {
      q.bank = linear_bank(shape, config.sm_count);
    }
  }
  if (answering.kind == CandidateKind::regression) {  // no detour through log2
    double ns = regressions_.predict(answering.feature_set, q.bank, q.log_bank);
    if (!(ns > 0) || !std::isfinite(ns)) return fallback;
    const auto log2_ns = float(std::log2(ns));
    if (const float held = within_envelope(log2_ns, q.size); held != log2_ns) ns = std::exp2(double(held));
    return Prediction{ns, ns * upper_ratio_, ModelUsed::regression, std::int8_t(chosen)};
  }
  const std::optional<float> log2_ns = evaluate(chosen, q);
  if (!log2_ns) return fallback;
  const double ns = std::exp2(double(*log2_ns));
  return {ns, ns * upper_ratio_, answering.kind == CandidateKind::knn ? ModelUsed::knn : ModelUsed::blend, std::int8_t(chosen)};
}

void KernelModel::observe(const LaunchShape& shape, double duration_ns, const PredictorConfig& config) {
  if (!(duration_ns > 0) || !std::isfinite(duration_ns)) return;
  const auto measured = float(std::log2(duration_ns));
  Query q;
  find_neighbors(shape, SampleStore::kMaxNeighbors, false, q);
  q.bank = linear_bank(shape, config.sm_count);
  q.log_bank = log_bank(shape);
  q.size = size_point(shape, config.sm_count);
  for (std::size_t i = 0; i < scores_.size(); ++i) {
    const std::optional<float> predicted = evaluate(int(i), q);
    if (!predicted) continue;
    scores_[i].add(std::fabs(double(*predicted - measured)), config.score_window);
  }
  if (const int chosen = choose(q, config); chosen >= 0) {
    if (const std::optional<float> predicted = evaluate(chosen, q)) residual_log2_.push(measured - *predicted);
  }
  regressions_.add(q.bank, q.log_bank, duration_ns, config.regression_decay);
  const std::uint32_t slot = store_.record(shape, measured);
  if (slot >= sample_sizes_.size()) sample_sizes_.resize(std::size_t(slot) + 1);
  sample_sizes_[slot] = q.size;
  recent_log2_ns_.push(measured);
  ++observations_;
  const bool refit = observations_ <= 64 || observations_ % std::max<std::uint32_t>(config.refit_every, 1) == 0;
  if (refit) regressions_.refit();
  const int previous_best = best_, previous_far = best_far_;
  update_summaries(config);
  if (refit || best_ != previous_best || best_far_ != previous_far) {
    refresh_residuals();
  } else if (residual_set_ >= 0) {  // only this sample changed
    const auto at_sample = regressions_.predict_log2(FeatureSet(residual_set_), store_.bank(slot), store_.log_bank(slot));
    sample_residuals_.resize(store_.size());
    if (at_sample) {
      sample_residuals_[slot] = store_.sample(slot).log2_ns - float(*at_sample);
    } else {
      residual_set_ = -1;
    }
  }
}

void KernelModel::update_summaries(const PredictorConfig& config) {
  median_log2_ns_ = recent_log2_ns_.quantile(0.5);
  median_ns_ = std::exp2(double(median_log2_ns_));
  p90_ns_ = std::exp2(double(recent_log2_ns_.quantile(0.9)));
  const float upper_log2_ratio = residual_log2_.size() >= kMinResiduals ? residual_log2_.quantile(0.9) : kDefaultUpperLog2Ratio;
  upper_ratio_ = std::exp2(double(std::max(upper_log2_ratio, 0.0f)));
  best_ = best_far_ = -1;
  for (std::size_t i = 0; i < scores_.size(); ++i) {
    const ModelScore& s = scores_[i];
    if (s.count < config.min_scored) continue;
    if (best_ < 0 || beats(s, scores_[std::size_t(best_)])) best_ = int(i);
    const CandidateKind kind = candidates()[i].kind;
    if ((kind == CandidateKind::regression || kind == CandidateKind::blend) && (best_far_ < 0 || beats(s, scores_[std::size_t(best_far_)])))
      best_far_ = int(i);
  }
}

KernelModel::State KernelModel::state() const {
  return {observations_, store_.samples(), store_.next_replacement(), regressions_.sums(), scores_,
          recent_log2_ns_.in_order(), residual_log2_.in_order()};
}

void KernelModel::restore(const State& state, const PredictorConfig& config) {
  *this = KernelModel(config);
  observations_ = state.observations;
  store_.restore(state.samples, state.next_replacement);
  regressions_.restore(state.sums);
  for (std::size_t i = 0; i < scores_.size() && i < state.scores.size(); ++i) scores_[i] = state.scores[i];
  recent_log2_ns_.restore(state.recent_log2_ns);
  residual_log2_.restore(state.residual_log2);
  for (const SampleStore::Sample& sample : store_.samples()) sample_sizes_.push_back(size_point(sample.shape, config.sm_count));
  update_summaries(config);
  refresh_residuals();
}

}  // namespace gpuqos::predictor
