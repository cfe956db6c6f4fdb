// Reads the input files of a command, printing each file's report to `err`.
#pragma once

#include <ostream>
#include <string>
#include <vector>

#include "gpuqos/predictor/measurements.h"

namespace gpuqos::predictor::detail {

// False when a file could not be read at all (its reason is printed); bad rows are only reported.
bool load_inputs(const std::vector<std::string>& files, const ReadOptions& options, SampleSet& out, std::ostream& err);

}  // namespace gpuqos::predictor::detail
