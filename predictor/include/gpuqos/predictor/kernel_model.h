// Everything the predictor knows about one kernel name: its distinct shapes (kNN memory), its
// regressions, the validation score of each candidate model, and robust recent statistics.
//
// Model choice is online cross-validation (test-then-train): each observation is first predicted
// by every candidate, which is scored on its error |log2(predicted / measured)| averaged over the
// last ~score_window observations, and only then learned. The candidate with the lowest score
// answers; kNN is overruled by the best regression or blend when the query is farther than
// knn_max_distance from every stored shape (kNN cannot extrapolate).
//
// A regression or blend answer is held to what the samples allow if a kernel is at most
// proportionally slower for more work of any kind: for every stored sample, no longer than its time
// times the factor each size (shape_features.h, size_point) of the query exceeds the sample's by,
// and no shorter than its time divided by the factor each is below, with 2x of slack either way
// (a step to another tile configuration is not proportional). A power law fitted to a few
// noisy samples at small shapes otherwise extrapolates to seconds or more, and a daemon learning
// from nothing held a training job's 50-us kernels as long ops for the whole run.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "gpuqos/predictor/config.h"
#include "gpuqos/predictor/kernel_regressions.h"
#include "gpuqos/predictor/model_score.h"
#include "gpuqos/predictor/prediction.h"
#include "gpuqos/predictor/recent_window.h"
#include "gpuqos/predictor/sample_store.h"

namespace gpuqos::predictor {

class KernelModel {
 public:
  explicit KernelModel(const PredictorConfig& config);

  // Never fails: a kernel with at least one observation always has its name's median.
  Prediction predict(const LaunchShape& shape, const PredictorConfig& config) const;
  // Scores every candidate on this measurement, then learns it. duration_ns must be > 0.
  void observe(const LaunchShape& shape, double duration_ns, const PredictorConfig& config);

  std::uint64_t observations() const { return observations_; }
  const SampleStore& store() const { return store_; }
  int best_candidate() const { return best_; }
  const std::vector<ModelScore>& scores() const { return scores_; }

  // Persistence: what cannot be recomputed (the rest is rebuilt by restore()).
  struct State {
    std::uint64_t observations = 0;
    std::vector<SampleStore::Sample> samples;
    std::uint32_t next_replacement = 0;
    RegressionSums sums;
    std::vector<ModelScore> scores;  // one per candidates() entry
    std::vector<float> recent_log2_ns;   // oldest first
    std::vector<float> residual_log2;    // oldest first
  };
  State state() const;
  void restore(const State& state, const PredictorConfig& config);

 private:
  // What candidates look at; predict() fills only what the answering candidate needs.
  struct Query {
    Point point{};
    Bank bank{};
    LogBank log_bank{};
    SizePoint size{};
    SampleStore::Neighbors neighbors;
  };
  float within_envelope(float log2_ns, const SizePoint& size) const;
  void find_neighbors(const LaunchShape& shape, int k, bool exact_suffices, Query& q) const;
  std::optional<float> evaluate(int candidate, const Query& query) const;  // log2 ns
  int choose(const Query& query, const PredictorConfig& config) const;
  void update_summaries(const PredictorConfig& config);
  std::optional<float> residual_at(FeatureSet set, std::uint32_t slot) const;
  void refresh_residuals();

  // What predict() reads first, together; then the bulk.
  int best_ = -1;      // lowest score among candidates scored >= min_scored times (simpler first)
  int best_far_ = -1;  // same among regressions and blends
  float median_log2_ns_ = 0;
  double median_ns_ = 0;
  double p90_ns_ = 0;
  double upper_ratio_ = 1;  // p90 of measured / predicted (>= 1)
  KernelRegressions regressions_;
  SampleStore store_;
  std::vector<ModelScore> scores_;
  RecentWindow recent_log2_ns_;
  RecentWindow residual_log2_;  // log2(measured / predicted) of the answering candidate
  // log2(sample / regression) at every stored sample for one feature set (the preferred blend's),
  // kept current so that a blend's prediction reads 4 floats instead of 4 samples' feature banks.
  std::vector<float> sample_residuals_;
  int residual_set_ = -1;
  std::uint64_t observations_ = 0;
  std::vector<SizePoint> sample_sizes_;  // by slot, as the store's samples
};

}  // namespace gpuqos::predictor
