// Everything the predictor knows about one kernel name: its distinct shapes (kNN memory), its
// regressions, the validation score of each candidate model, and robust recent statistics.
//
// Model choice is online cross-validation (test-then-train): each observation is first predicted
// by every candidate, which is scored on its error |log2(predicted / measured)| averaged over the
// last ~score_window observations, and only then learned. The candidate with the lowest score
// answers; kNN is overruled by the best regression or blend when the query is farther than
// knn_max_distance from every stored shape (kNN cannot extrapolate).
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
    SampleStore::Neighbors neighbors;
  };
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
};

}  // namespace gpuqos::predictor
