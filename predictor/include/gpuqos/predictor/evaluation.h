// How well the predictor does on measurements it was not trained on: absolute percentage errors
// (|predicted - measured| / measured) summarised overall and per kernel name and copy class, for a
// train/test split, K-fold cross-validation, or an extrapolation split by work.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "gpuqos/predictor/config.h"
#include "gpuqos/predictor/measurements.h"
#include "gpuqos/predictor/predictor.h"

namespace gpuqos::predictor {

struct ErrorSummary {
  double median_ape = 0;  // fractions: 0.05 is 5 %
  double mape = 0;
  double p90_ape = 0;
  std::size_t count = 0;
};
ErrorSummary summarize_errors(std::vector<double> apes);

struct EvalResult {
  ErrorSummary kernels;
  ErrorSummary copies;
  std::map<std::string, ErrorSummary> per_kernel;      // by kernel name
  std::map<std::string, ErrorSummary> per_copy_class;  // "h2d/pinned", "d2d", "memset", ...
  std::map<std::string, std::size_t> answered_by;      // to_string(ModelUsed) -> predictions
  std::map<std::string, std::size_t> candidates;       // describe_candidate -> kernel predictions
};

struct EvalSettings {
  PredictorConfig config;
  std::uint64_t min_copy_bytes = 0;  // copies smaller than this are trained on but not scored
  std::uint64_t seed = 1;            // training order and fold assignment
};

// A store holds at most max_kernels names, and the predictor refuses a name past them, so which made
// it would depend on the training order (a review: silently). Keeps the kernel samples of the
// max_kernels most measured names (ties by name); what it left out, said, or nullopt.
std::optional<std::string> keep_most_measured_names(SampleSet& samples, std::size_t max_kernels);

// A predictor that observed every sample once, in a shuffled (seeded) order.
Predictor train_predictor(const SampleSet& samples, const PredictorConfig& config, std::uint64_t seed);

EvalResult evaluate(const SampleSet& train, const SampleSet& test, const EvalSettings& settings);

// Each sample is in one of `folds` (>= 2) folds: trained on the others, predicted once.
EvalResult cross_validate(const SampleSet& samples, int folds, const EvalSettings& settings);

// A kernel's work: the product of its numeric scalar args (B*M*N*K), or blocks * threads when it
// has none; a copy's is its bytes.
double work_of(const KernelSample& kernel);

// Extrapolation split: the `train_fraction` of kernels (and, separately, of copies) with the least
// work, and the rest (the most work). Ties keep input order.
std::pair<SampleSet, SampleSet> split_by_work(const SampleSet& samples, double train_fraction);

}  // namespace gpuqos::predictor
