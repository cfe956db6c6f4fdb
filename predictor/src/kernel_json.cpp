// KernelModel::State as JSON: samples, regression sums (upper triangles), scores by candidate name.
#include "kernel_json.h"

#include <cmath>
#include <cstdint>

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
    for (Eigen::Index c = r; c < m.cols(); ++c, ++i) m(r, c) = finite(j[i], what, int(i));
}

template <typename Vector>
json vector_to_json(const Vector& v) {
  return std::vector<double>(v.data(), v.data() + v.size());
}

template <typename Vector>
void vector_from_json(const json& j, Vector& v, const char* what) {
  if (!j.is_array() || j.size() != std::size_t(v.size())) throw ProfileError(std::string(what) + ": wrong size");
  for (Eigen::Index i = 0; i < v.size(); ++i) v[i] = finite(j[std::size_t(i)], what, int(i));
}

json sample_to_json(const SampleStore::Sample& s) {
  const LaunchShape& h = s.shape;
  const std::vector<std::uint64_t> args(h.args.begin(), h.args.begin() + h.arg_count);
  return {h.grid, h.block, h.shared_bytes, args, s.log2_ns, s.count};
}

// A launch dimension is 1..2^32-1 in each of x, y, z.
std::array<std::uint32_t, 3> dimensions(const json& j, const char* what) {
  if (!j.is_array() || j.size() != 3) throw ProfileError(std::string(what) + ": not 3 dimensions");
  std::array<std::uint32_t, 3> out{};
  for (std::size_t d = 0; d < 3; ++d) out[d] = std::uint32_t(integer(j[d], what, 1, UINT32_MAX, int(d)));
  return out;
}

SampleStore::Sample sample_from_json(const json& j) {
  if (!j.is_array() || j.size() != 6) throw ProfileError("expected [grid, block, shared, args, log2_ns, count]");
  SampleStore::Sample s;
  s.shape.grid = dimensions(j[0], "grid");
  s.shape.block = dimensions(j[1], "block");
  s.shape.shared_bytes = std::uint32_t(integer(j[2], "shared", 0, UINT32_MAX));
  const json& args = array(j[3], "args");
  if (args.size() > kMaxArgs) throw ProfileError("args: more than " + std::to_string(kMaxArgs));
  for (std::size_t i = 0; i < args.size(); ++i) s.shape.args[i] = integer(args[i], "args", 0, UINT64_MAX, int(i));
  s.shape.arg_count = std::uint8_t(args.size());
  s.log2_ns = float(log2_ns(j[4], "log2_ns"));
  s.count = std::uint32_t(integer(j[5], "count", 0, UINT32_MAX));
  return s;
}

// A value as a message shows it: a number or a string as written, not a whole array or object.
std::string shown(const json& value) {
  if (value.is_array()) return "an array";
  if (value.is_object()) return "an object";
  return value.dump();
}

[[noreturn]] void refuse(const json& value, std::string_view what, int index, const std::string& wanted) {
  std::string place(what);
  if (index >= 0) place += "[" + std::to_string(index) + "]";
  throw ProfileError(place + ": " + shown(value) + " is not " + wanted);
}

}  // namespace

double finite(const json& value, std::string_view what, int index) {
  if (!value.is_number() || !std::isfinite(value.get<double>())) refuse(value, what, index, "a finite number");
  return value.get<double>();
}

double log2_ns(const json& value, std::string_view what, int index) {
  // log2 of the smallest positive double, and 1 below that of the largest: a float rounds 1023.99
  // to 1024, and 2^1024 is inf.
  const double number = finite(value, what, index);
  if (!(number >= -1074 && number <= 1023)) refuse(value, what, index, "the log2 of a duration (-1074..1023)");
  return number;
}

std::uint64_t integer(const json& value, std::string_view what, std::uint64_t min, std::uint64_t max, int index) {
  // A JSON integer is read unsigned when it has no minus sign, signed when it has one; a float
  // (1e20, 1.5) is not an integer here, even when it is one in value.
  const bool is_integer = value.is_number_unsigned() || (value.is_number_integer() && value.get<std::int64_t>() >= 0);
  if (!is_integer || value.get<std::uint64_t>() < min || value.get<std::uint64_t>() > max) {
    refuse(value, what, index, "an integer in " + std::to_string(min) + ".." + std::to_string(max));
  }
  return value.get<std::uint64_t>();
}

const json& array(const json& value, std::string_view what) {
  if (!value.is_array()) throw ProfileError(std::string(what) + ": " + shown(value) + " is not an array");
  return value;
}

std::vector<float> log2_durations(const json& values, std::string_view what) {
  array(values, what);
  std::vector<float> out;
  out.reserve(values.size());
  for (std::size_t i = 0; i < values.size(); ++i) out.push_back(float(log2_ns(values[i], what, int(i))));
  return out;
}

void rethrow_within(const std::string& where) {
  try {
    throw;
  } catch (const ProfileError& e) {
    throw ProfileError(where + " " + e.what());
  } catch (const json::exception& e) {
    // "[json.exception.type_error.302] type must be number, but is string": the id says nothing
    // to the reader of the message.
    const std::string_view message = e.what();
    const auto id_end = message.find("] ");
    throw ProfileError(where + ": " + std::string(id_end == std::string_view::npos ? message : message.substr(id_end + 2)));
  }
}

json score_to_json(const ModelScore& score) { return {score.mean_abs_log2_error, score.count}; }

ModelScore score_from_json(const json& value) {
  if (!value.is_array() || value.size() != 2) throw ProfileError("score: expected [mean_abs_log2_error, count]");
  const double mean = finite(value[0], "score", 0);
  // A mean error below 0 would make its candidate the best for good.
  if (mean < 0) throw ProfileError("score[0]: " + value[0].dump() + " is not a mean error (>= 0)");
  return {mean, integer(value[1], "score", 0, UINT64_MAX, 1)};
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
  s.observations = integer(j.at("observations"), "observations", 0, UINT64_MAX);
  const json& samples = array(j.at("samples"), "samples");
  s.samples.reserve(samples.size());
  for (std::size_t i = 0; i < samples.size(); ++i) {
    try {
      s.samples.push_back(sample_from_json(samples[i]));
    } catch (...) {
      rethrow_within("samples[" + std::to_string(i) + "]");
    }
  }
  s.next_replacement = std::uint32_t(integer(j.at("next_replacement"), "next_replacement", 0, UINT32_MAX));
  const json& sums = j.at("sums");
  upper_from_json(sums.at("gram"), s.sums.gram, "sums.gram");
  vector_from_json(sums.at("rhs"), s.sums.rhs, "sums.rhs");
  upper_from_json(sums.at("log_gram"), s.sums.log_gram, "sums.log_gram");
  vector_from_json(sums.at("log_rhs"), s.sums.log_rhs, "sums.log_rhs");
  s.sums.weight = finite(sums.at("weight"), "sums.weight");
  s.scores.resize(candidates().size());
  const json& scores = j.at("scores");
  for (std::size_t i = 0; i < s.scores.size(); ++i) {
    const std::string candidate = describe_candidate(int(i));
    if (const auto it = scores.find(candidate); it != scores.end()) {
      try {
        s.scores[i] = score_from_json(*it);
      } catch (...) {
        rethrow_within("scores \"" + candidate + "\"");
      }
    }
  }
  s.recent_log2_ns = log2_durations(j.at("recent_log2_ns"), "recent_log2_ns");
  s.residual_log2 = log2_durations(j.at("residual_log2"), "residual_log2");
  return {name, std::move(s)};
}

}  // namespace gpuqos::predictor::detail
