// KernelModel::State as JSON: samples, regression sums (upper triangles), scores by candidate name.
#include "kernel_json.h"

#include <cmath>

#include "gpuqos/predictor/candidates.h"
#include "gpuqos/predictor/prediction.h"
#include "profile_json.h"

namespace gpuqos::predictor::detail {

using nlohmann::json;

namespace {

template <typename Matrix>
json upper_to_json(const Matrix& m) {
  json out = json::array();
  for (Eigen::Index r = 0; r < m.rows(); ++r)
    for (Eigen::Index c = r; c < m.cols(); ++c) out.push_back(m(r, c));
  return out;
}

template <typename Matrix>
void upper_from_json(const json& j, Matrix& m, const char* what) {
  const auto n = std::size_t(m.rows());
  if (!j.is_array() || j.size() != n * (n + 1) / 2) throw ProfileError(std::string(what) + ": wrong size");
  std::size_t i = 0;
  m.setZero();
  for (Eigen::Index r = 0; r < m.rows(); ++r)
    for (Eigen::Index c = r; c < m.cols(); ++c) m(r, c) = finite(j[i++], what);
}

template <typename Vector>
json vector_to_json(const Vector& v) {
  return std::vector<double>(v.data(), v.data() + v.size());
}

template <typename Vector>
void vector_from_json(const json& j, Vector& v, const char* what) {
  if (!j.is_array() || j.size() != std::size_t(v.size())) throw ProfileError(std::string(what) + ": wrong size");
  for (Eigen::Index i = 0; i < v.size(); ++i) v[i] = finite(j[std::size_t(i)], what);
}

json sample_to_json(const SampleStore::Sample& s) {
  const LaunchShape& h = s.shape;
  const std::vector<std::uint64_t> args(h.args.begin(), h.args.begin() + h.arg_count);
  return {h.grid, h.block, h.shared_bytes, args, s.log2_ns, s.count};
}

SampleStore::Sample sample_from_json(const json& j) {
  if (!j.is_array() || j.size() != 6) throw ProfileError("kernel sample: expected [grid, block, shared, args, log2_ns, count]");
  SampleStore::Sample s;
  s.shape.grid = j[0].get<std::array<std::uint32_t, 3>>();
  s.shape.block = j[1].get<std::array<std::uint32_t, 3>>();
  for (std::size_t d = 0; d < 3; ++d)
    if (s.shape.grid[d] == 0 || s.shape.block[d] == 0) throw ProfileError("kernel sample: zero grid or block dimension");
  s.shape.shared_bytes = j[2].get<std::uint32_t>();
  const auto args = j[3].get<std::vector<std::uint64_t>>();
  if (args.size() > kMaxArgs) throw ProfileError("kernel sample: more than 8 args");
  std::copy(args.begin(), args.end(), s.shape.args.begin());
  s.shape.arg_count = std::uint8_t(args.size());
  s.log2_ns = float(finite(j[4], "kernel sample log2_ns"));
  s.count = j[5].get<std::uint32_t>();
  return s;
}

}  // namespace

double finite(const json& value, const char* what) {
  if (!value.is_number() || !std::isfinite(value.get<double>())) throw ProfileError(std::string(what) + ": not a finite number");
  return value.get<double>();
}

std::vector<float> floats(const json& array, const char* what) {
  if (!array.is_array()) throw ProfileError(std::string(what) + ": not an array");
  std::vector<float> out;
  out.reserve(array.size());
  for (const json& v : array) out.push_back(float(finite(v, what)));
  return out;
}

json score_to_json(const ModelScore& score) { return {score.mean_abs_log2_error, score.count}; }

ModelScore score_from_json(const json& value) {
  if (!value.is_array() || value.size() != 2) throw ProfileError("score: expected [mean_abs_log2_error, count]");
  return {finite(value[0], "score"), value[1].get<std::uint64_t>()};
}

json kernel_to_json(const std::string& name, const KernelModel::State& s) {
  json samples = json::array(), scores = json::object();
  for (const auto& sample : s.samples) samples.push_back(sample_to_json(sample));
  for (std::size_t i = 0; i < s.scores.size(); ++i) scores[describe_candidate(int(i))] = score_to_json(s.scores[i]);
  return {{"name", name},
          {"observations", s.observations},
          {"samples", samples},
          {"next_replacement", s.next_replacement},
          {"sums", {{"gram", upper_to_json(s.sums.gram)}, {"rhs", vector_to_json(s.sums.rhs)}, {"log_gram", upper_to_json(s.sums.log_gram)},
                    {"log_rhs", vector_to_json(s.sums.log_rhs)}, {"weight", s.sums.weight}}},
          {"scores", scores},
          {"recent_log2_ns", s.recent_log2_ns},
          {"residual_log2", s.residual_log2}};
}

std::pair<std::string, KernelModel::State> kernel_from_json(const json& j) {
  const auto name = j.at("name").get<std::string>();
  if (name.empty()) throw ProfileError("kernel with an empty name");
  KernelModel::State s;
  s.observations = j.at("observations").get<std::uint64_t>();
  for (const json& sample : j.at("samples")) s.samples.push_back(sample_from_json(sample));
  s.next_replacement = j.at("next_replacement").get<std::uint32_t>();
  const json& sums = j.at("sums");
  upper_from_json(sums.at("gram"), s.sums.gram, "gram");
  vector_from_json(sums.at("rhs"), s.sums.rhs, "rhs");
  upper_from_json(sums.at("log_gram"), s.sums.log_gram, "log_gram");
  vector_from_json(sums.at("log_rhs"), s.sums.log_rhs, "log_rhs");
  s.sums.weight = finite(sums.at("weight"), "weight");
  s.scores.resize(candidates().size());
  const json& scores = j.at("scores");
  for (std::size_t i = 0; i < s.scores.size(); ++i) {
    if (const auto it = scores.find(describe_candidate(int(i))); it != scores.end()) s.scores[i] = score_from_json(*it);
  }
  s.recent_log2_ns = floats(j.at("recent_log2_ns"), "recent_log2_ns");
  s.residual_log2 = floats(j.at("residual_log2"), "residual_log2");
  return {name, std::move(s)};
}

}  // namespace gpuqos::predictor::detail
