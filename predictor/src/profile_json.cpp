// Predictor::State as JSON: config, kernels (kernel_json.cpp), copy lines, global moments.
#include "profile_json.h"

#include <cmath>

#include "kernel_json.h"

namespace gpuqos::predictor::detail {

using nlohmann::json;

namespace {

json config_to_json(const PredictorConfig& c) {
  return {{"sm_count", c.sm_count},
          {"max_samples_per_kernel", c.max_samples_per_kernel},
          {"max_kernels", c.max_kernels},
          {"stats_window", c.stats_window},
          {"score_window", c.score_window},
          {"min_scored", c.min_scored},
          {"refit_every", c.refit_every},
          {"knn_max_distance", c.knn_max_distance},
          {"regression_decay", c.regression_decay},
          {"default_kernel_ns", c.default_kernel_ns},
          {"default_copy_latency_ns", c.default_copy_latency_ns},
          {"default_copy_bytes_per_ns", c.default_copy_bytes_per_ns}};
}

// A count of the config: get<uint32_t> would wrap -1 to 4294967295 (and a window that size
// reserves 16 GiB), so it is read signed and bounded.
std::uint32_t count(const json& j, const char* key) {
  constexpr std::int64_t kMaxCount = std::int64_t{1} << 20;
  const json& value = j.at(key);
  if (!value.is_number_integer() || value.get<std::int64_t>() < 0 || value.get<std::int64_t>() > kMaxCount) {
    throw ProfileError(std::string("config.") + key + " = " + (value.is_structured() ? std::string(value.is_array() ? "an array" : "an object") : value.dump()) + " is not a count in 0.." +
                       std::to_string(kMaxCount));
  }
  return static_cast<std::uint32_t>(value.get<std::int64_t>());
}

PredictorConfig config_from_json(const json& j) {
  PredictorConfig c;
  c.sm_count = count(j, "sm_count");
  c.max_samples_per_kernel = count(j, "max_samples_per_kernel");
  c.max_kernels = count(j, "max_kernels");
  c.stats_window = count(j, "stats_window");
  c.score_window = count(j, "score_window");
  c.min_scored = count(j, "min_scored");
  c.refit_every = count(j, "refit_every");
  c.knn_max_distance = finite(j.at("knn_max_distance"), "config.knn_max_distance");
  c.regression_decay = finite(j.at("regression_decay"), "config.regression_decay");
  c.default_kernel_ns = finite(j.at("default_kernel_ns"), "config.default_kernel_ns");
  c.default_copy_latency_ns = finite(j.at("default_copy_latency_ns"), "config.default_copy_latency_ns");
  c.default_copy_bytes_per_ns = j.at("default_copy_bytes_per_ns").get<std::array<double, kCopyDirectionCount>>();
  if (c.sm_count == 0 || c.max_samples_per_kernel == 0 || c.stats_window == 0 || !(c.regression_decay > 0 && c.regression_decay <= 1))
    throw ProfileError("config: sm_count, max_samples_per_kernel and stats_window must be positive, regression_decay in (0, 1]");
  return c;
}

json line_to_json(const CopyLine::State& s) {
  json sizes = json::array();
  for (const auto& [bytes, values] : s.sizes) sizes.push_back({bytes, values});
  return {{"sums", {s.sums.g00, s.sums.g01, s.sums.g11, s.sums.r0, s.sums.r1, s.sums.weight}},
          {"residuals", s.residuals},
          {"scores", {score_to_json(s.scores[0]), score_to_json(s.scores[1])}},
          {"sizes", sizes},
          {"size_clock", s.size_clock}};
}

CopyLine::State line_from_json(const json& j) {
  CopyLine::State s;
  const json& sums = j.at("sums");
  if (!sums.is_array() || sums.size() != 6) throw ProfileError("copy line: \"sums\" must hold 6 numbers");
  s.sums = {finite(sums[0], "g00"), finite(sums[1], "g01"), finite(sums[2], "g11"),
            finite(sums[3], "r0"), finite(sums[4], "r1"), finite(sums[5], "weight")};
  s.residuals = floats(j.at("residuals"), "copy line residuals");
  const json& scores = j.at("scores");
  if (!scores.is_array() || scores.size() != 2) throw ProfileError("copy line: \"scores\" must hold 2 scores");
  s.scores = {score_from_json(scores[0]), score_from_json(scores[1])};
  for (const json& size : j.at("sizes")) s.sizes.emplace_back(size.at(0).get<std::uint64_t>(), floats(size.at(1), "copy size durations"));
  s.size_clock = j.at("size_clock").get<std::uint64_t>();
  return s;
}

}  // namespace

json state_to_json(const Predictor::State& state) {
  json kernels = json::array();
  for (const auto& [name, k] : state.kernels) kernels.push_back(kernel_to_json(name, k));
  json classes = json::array(), directions = json::array();
  for (const auto& line : state.copies.classes) classes.push_back(line_to_json(line));
  for (const auto& line : state.copies.directions) directions.push_back(line_to_json(line));
  return {{"config", config_to_json(state.config)},
          {"kernels", kernels},
          {"copies", {{"classes", classes}, {"directions", directions}}},
          {"global_log2_ns", {state.global_log2_ns.count, state.global_log2_ns.mean, state.global_log2_ns.mean_square}}};
}

Predictor::State state_from_json(const json& body) {
  if (!body.is_object()) throw ProfileError("the body is not a JSON object");
  Predictor::State state;
  state.config = config_from_json(body.at("config"));
  for (const json& k : body.at("kernels")) state.kernels.push_back(kernel_from_json(k));
  const json& classes = body.at("copies").at("classes");
  const json& directions = body.at("copies").at("directions");
  if (classes.size() != CopyModel::kClassCount || directions.size() != kCopyDirectionCount)
    throw ProfileError("copies: expected " + std::to_string(CopyModel::kClassCount) + " class lines and " +
                       std::to_string(kCopyDirectionCount) + " direction lines");
  for (std::size_t i = 0; i < classes.size(); ++i) state.copies.classes[i] = line_from_json(classes[i]);
  for (std::size_t i = 0; i < directions.size(); ++i) state.copies.directions[i] = line_from_json(directions[i]);
  const json& global = body.at("global_log2_ns");
  if (!global.is_array() || global.size() != 3) throw ProfileError("global_log2_ns: expected [count, mean, mean_square]");
  state.global_log2_ns = {finite(global[0], "global_log2_ns"), finite(global[1], "global_log2_ns"), finite(global[2], "global_log2_ns")};
  return state;
}

}  // namespace gpuqos::predictor::detail
