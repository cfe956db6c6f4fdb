// Printing an EvalResult: a text table or one JSON object.
#pragma once

#include <ostream>
#include <string>

#include "gpuqos/predictor/evaluation.h"

namespace gpuqos::predictor::detail {

// {"mode": ..., "kernels": {"median_ape", "mape", "p90_ape", "count"}, "copies": {...},
//  "per_kernel": {name: {...}}, "per_copy_class": {...}, "answered_by": {...}, "candidates": {...}}
std::string eval_json(const EvalResult& result, const std::string& mode);
void print_eval_text(const EvalResult& result, const std::string& mode, bool per_kernel, std::ostream& out);

}  // namespace gpuqos::predictor::detail
