// Predictor::State <-> JSON, the body of a profile file (store.h).
#pragma once

#include <nlohmann/json.hpp>
#include <stdexcept>

#include "gpuqos/predictor/predictor.h"

namespace gpuqos::predictor::detail {

// Invalid content; the message says which field.
struct ProfileError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

nlohmann::json state_to_json(const Predictor::State& state);
// Validates every field; throws ProfileError (or nlohmann::json::exception) on invalid content.
Predictor::State state_from_json(const nlohmann::json& body);

}  // namespace gpuqos::predictor::detail
