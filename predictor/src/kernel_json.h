// KernelModel::State and the small pieces every part of a profile body uses, as JSON.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "gpuqos/predictor/kernel_model.h"
#include "gpuqos/predictor/model_score.h"

namespace gpuqos::predictor::detail {

// Readers of one value of a body. Each throws ProfileError naming the value (`what`, or
// `what[index]` for an element of an array), and the readers of the parts it is in add theirs
// (rethrow_within), so a message says where in the file: `kernels[0] "gemm" samples[3] grid[0]:
// "a" is not an integer in 1..4294967295`. They refuse what would change on conversion rather
// than convert it: -1 read as unsigned is 4294967295, and 1e20 as uint32_t is undefined.
double finite(const nlohmann::json& value, std::string_view what, int index = -1);
// log2 of a duration in ns (or of a ratio of durations), most stored as floats: within the log2 of
// a positive finite double, as that of every duration observe() accepts is, so that neither the
// float (1e39 is a finite double and an infinite float) nor exp2() of it (a prediction) is inf:
// a model that predicts inf saves null, which the next load refuses.
double log2_ns(const nlohmann::json& value, std::string_view what, int index = -1);
std::uint64_t integer(const nlohmann::json& value, std::string_view what, std::uint64_t min, std::uint64_t max,
                      int index = -1);
// `value` when it is an array: iterating a number or an object would read what is not there.
const nlohmann::json& array(const nlohmann::json& value, std::string_view what);
std::vector<float> log2_durations(const nlohmann::json& array, std::string_view what);
// In a catch block: throws what was caught (ProfileError or a JSON library error) as a
// ProfileError with `where` in front; anything else (std::bad_alloc) as it is.
[[noreturn]] void rethrow_within(const std::string& where);

nlohmann::json score_to_json(const ModelScore& score);
ModelScore score_from_json(const nlohmann::json& value);

nlohmann::json kernel_to_json(const std::string& name, const KernelModel::State& state);
std::pair<std::string, KernelModel::State> kernel_from_json(const nlohmann::json& value);

}  // namespace gpuqos::predictor::detail
