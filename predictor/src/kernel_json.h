// KernelModel::State and the small pieces every part of a profile body uses, as JSON.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "gpuqos/predictor/kernel_model.h"
#include "gpuqos/predictor/model_score.h"

namespace gpuqos::predictor::detail {

// A finite number, or ProfileError naming `what`.
double finite(const nlohmann::json& value, const char* what);
std::vector<float> floats(const nlohmann::json& array, const char* what);
nlohmann::json score_to_json(const ModelScore& score);
ModelScore score_from_json(const nlohmann::json& value);

nlohmann::json kernel_to_json(const std::string& name, const KernelModel::State& state);
std::pair<std::string, KernelModel::State> kernel_from_json(const nlohmann::json& value);

}  // namespace gpuqos::predictor::detail
