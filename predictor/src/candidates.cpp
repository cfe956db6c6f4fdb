// The candidate table and names.
#include "gpuqos/predictor/candidates.h"

#include <array>
#include <string>

#include "gpuqos/predictor/prediction.h"

namespace gpuqos::predictor {

namespace {

constexpr int kBlendNeighbors = 4;

constexpr auto make_table() {
  std::array<Candidate, 8 + 2 * kFeatureSetCount + 1> table{};
  std::size_t n = 0;
  table[n++] = {CandidateKind::name_stats, 0, false, FeatureSet::launch};
  for (int k : {1, 2, 4, 8}) {
    table[n++] = {CandidateKind::knn, k, false, FeatureSet::launch};
    table[n++] = {CandidateKind::knn, k, true, FeatureSet::launch};
  }
  for (int s = 0; s < kFeatureSetCount; ++s) table[n++] = {CandidateKind::regression, 0, false, FeatureSet(s)};
  for (int s = 0; s < kFeatureSetCount; ++s) table[n++] = {CandidateKind::blend, kBlendNeighbors, true, FeatureSet(s)};
  return table;
}

constexpr auto kTable = make_table();

}  // namespace

std::span<const Candidate> candidates() { return kTable; }

std::string describe_candidate(int candidate) {
  if (candidate < 0 || std::size_t(candidate) >= kTable.size()) return "";
  const Candidate& c = kTable[std::size_t(candidate)];
  switch (c.kind) {
    case CandidateKind::knn: return "knn(k=" + std::to_string(c.k) + (c.inverse_distance ? ",idw)" : ",uniform)");
    case CandidateKind::regression: return std::string("regression(") + to_string(c.feature_set) + ")";
    case CandidateKind::blend: return std::string("blend(") + to_string(c.feature_set) + ",k=" + std::to_string(c.k) + ")";
    case CandidateKind::name_stats: return "name_stats";
  }
  return "";
}

const char* to_string(ModelUsed model) {
  switch (model) {
    case ModelUsed::none: return "none";
    case ModelUsed::knn: return "knn";
    case ModelUsed::regression: return "regression";
    case ModelUsed::blend: return "blend";
    case ModelUsed::name_stats: return "name_stats";
    case ModelUsed::global_default: return "global_default";
    case ModelUsed::copy_linear: return "copy_linear";
    case ModelUsed::copy_blend: return "copy_blend";
    case ModelUsed::copy_direction: return "copy_direction";
    case ModelUsed::copy_default: return "copy_default";
  }
  return "?";
}

}  // namespace gpuqos::predictor
