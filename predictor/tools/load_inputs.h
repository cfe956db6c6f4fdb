// Reads the input files of a command, printing each file's report to `err`.
#pragma once

#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "gpuqos/predictor/measurements.h"

namespace gpuqos::predictor::detail {

// The file of `others` that is the same file as `file` (by device and inode: also a link or another
// spelling of it), if any.
std::optional<std::string> same_file_among(const std::string& file, const std::vector<std::string>& others);

// False when a file could not be read at all (its reason is printed); bad rows are only reported.
// A file given twice is read once (a warning says so).
bool load_inputs(const std::vector<std::string>& files, const ReadOptions& options, SampleSet& out, std::ostream& err,
                 const std::string& command);

}  // namespace gpuqos::predictor::detail
