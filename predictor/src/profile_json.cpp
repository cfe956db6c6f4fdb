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

// A count of the config, at least `min`. get<uint32_t> would wrap -1 to 4294967295; 2^20 keeps a
// count sane, and the memory bounds (max_kernels, max_samples_per_kernel, stats_window) are then
// cut to the loader's own (decode_profile).
std::uint32_t count(const json& j, const char* key, std::uint32_t min) {
  constexpr std::uint64_t kMaxCount = std::uint64_t{1} << 20;
  return std::uint32_t(integer(j.at(key), std::string("config.") + key, min, kMaxCount));
}

PredictorConfig config_from_json(const json& j) {
  PredictorConfig c;
  c.sm_count = count(j, "sm_count", 1);
  c.max_samples_per_kernel = count(j, "max_samples_per_kernel", 1);
  // 0 would drop every kernel of the store and learn none: nothing a trained store can hold.
  c.max_kernels = count(j, "max_kernels", 1);
  c.stats_window = count(j, "stats_window", 1);
  c.score_window = count(j, "score_window", 0);
  c.min_scored = count(j, "min_scored", 0);
  c.refit_every = count(j, "refit_every", 0);
  c.knn_max_distance = finite(j.at("knn_max_distance"), "config.knn_max_distance");
  c.regression_decay = finite(j.at("regression_decay"), "config.regression_decay");
  c.default_kernel_ns = finite(j.at("default_kernel_ns"), "config.default_kernel_ns");
  c.default_copy_latency_ns = finite(j.at("default_copy_latency_ns"), "config.default_copy_latency_ns");
  // What an op never seen is predicted to take: 0 or less made every such op look free.
  for (const auto& [key, value] : {std::pair{"default_kernel_ns", c.default_kernel_ns},
                                   std::pair{"default_copy_latency_ns", c.default_copy_latency_ns}}) {
    if (!(value > 0)) throw ProfileError(std::string("config.") + key + ": " + j.at(key).dump() + " is not a duration (> 0 ns)");
  }
  const json& bytes_per_ns = j.at("default_copy_bytes_per_ns");
  if (!bytes_per_ns.is_array() || bytes_per_ns.size() != kCopyDirectionCount)
    throw ProfileError("config.default_copy_bytes_per_ns: expected " + std::to_string(kCopyDirectionCount) + " numbers");
  for (std::size_t i = 0; i < kCopyDirectionCount; ++i)
    c.default_copy_bytes_per_ns[i] = finite(bytes_per_ns[i], "config.default_copy_bytes_per_ns", int(i));
  if (!(c.regression_decay > 0 && c.regression_decay <= 1)) throw ProfileError("config.regression_decay: not in (0, 1]");
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
  if (!sums.is_array() || sums.size() != 6) throw ProfileError("sums: expected 6 numbers");
  s.sums = {finite(sums[0], "sums", 0), finite(sums[1], "sums", 1), finite(sums[2], "sums", 2),
            finite(sums[3], "sums", 3), finite(sums[4], "sums", 4), finite(sums[5], "sums", 5)};
  s.residuals = log2_durations(j.at("residuals"), "residuals");
  const json& scores = j.at("scores");
  if (!scores.is_array() || scores.size() != 2) throw ProfileError("scores: expected 2 scores");
  s.scores = {score_from_json(scores[0]), score_from_json(scores[1])};
  const json& sizes = array(j.at("sizes"), "sizes");
  for (std::size_t i = 0; i < sizes.size(); ++i) {
    const std::string where = "sizes[" + std::to_string(i) + "]";
    const json& size = sizes[i];
    if (!size.is_array() || size.size() != 2) throw ProfileError(where + ": expected [bytes, [log2 durations]]");
    s.sizes.emplace_back(integer(size[0], where, 0, UINT64_MAX, 0), log2_durations(size[1], where + "[1]"));
  }
  s.size_clock = integer(j.at("size_clock"), "size_clock", 0, UINT64_MAX);
  return s;
}

// Reads `read(value)`, naming `where` in front of what it refuses.
template <typename Read>
auto within(const std::string& where, const json& value, Read read) {
  try {
    return read(value);
  } catch (...) {
    rethrow_within(where);
  }
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
  const json& kernels = array(body.at("kernels"), "kernels");
  state.kernels.reserve(kernels.size());
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    const json& k = kernels[i];
    const auto name = k.is_object() ? k.find("name") : k.end();
    const std::string where = "kernels[" + std::to_string(i) + "]" + (name != k.end() && name->is_string() ? " " + name->dump() : "");
    state.kernels.push_back(within(where, k, kernel_from_json));
  }
  const json& classes = body.at("copies").at("classes");
  const json& directions = body.at("copies").at("directions");
  if (!classes.is_array() || !directions.is_array() || classes.size() != CopyModel::kClassCount ||
      directions.size() != kCopyDirectionCount)
    throw ProfileError("copies: expected " + std::to_string(CopyModel::kClassCount) + " class lines and " +
                       std::to_string(kCopyDirectionCount) + " direction lines");
  for (std::size_t i = 0; i < classes.size(); ++i)
    state.copies.classes[i] = within("copies.classes[" + std::to_string(i) + "]", classes[i], line_from_json);
  for (std::size_t i = 0; i < directions.size(); ++i)
    state.copies.directions[i] = within("copies.directions[" + std::to_string(i) + "]", directions[i], line_from_json);
  const json& global = body.at("global_log2_ns");
  if (!global.is_array() || global.size() != 3) throw ProfileError("global_log2_ns: expected [count, mean, mean_square]");
  // LogMoments::add divides by min(count + 1, window): a count of -1 divides by 0.
  const double count = finite(global[0], "global_log2_ns", 0);
  if (!(count >= 0 && count == std::floor(count))) throw ProfileError("global_log2_ns[0]: " + global[0].dump() + " is not a count");
  state.global_log2_ns = {count, log2_ns(global[1], "global_log2_ns", 1), finite(global[2], "global_log2_ns", 2)};
  return state;
}

}  // namespace gpuqos::predictor::detail
