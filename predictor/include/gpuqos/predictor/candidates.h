// The candidate models a kernel's predictor chooses among, by validation error.
#pragma once

#include <cstdint>
#include <span>

#include "gpuqos/predictor/kernel_regressions.h"

namespace gpuqos::predictor {

enum class CandidateKind : std::uint8_t { knn, regression, blend, name_stats };

struct Candidate {
  CandidateKind kind = CandidateKind::knn;
  int k = 0;                       // knn, blend: neighbours used
  bool inverse_distance = false;   // knn, blend: weigh neighbours by 1 / distance^2 (an equal shape alone)
  FeatureSet feature_set = FeatureSet::launch;  // regression, blend
};

// In order of complexity (model choice prefers the earlier of two close scores): the name's
// median; kNN with k in {1, 2, 4, 8}, uniform or inverse-distance weights; each feature set's
// regression; each feature set's regression times the weighted mean residual ratio of its 4
// nearest samples (blend). Scores persist by describe_candidate() name, not by index.
std::span<const Candidate> candidates();

}  // namespace gpuqos::predictor
