// Reading a command's inputs and reporting what was read and skipped.
#include "load_inputs.h"

namespace gpuqos::predictor::detail {

bool load_inputs(const std::vector<std::string>& files, const ReadOptions& options, SampleSet& out, std::ostream& err) {
  bool ok = true;
  for (const std::string& file : files) {
    const ReadReport report = read_measurements(file, options, out);
    if (report.failed) {
      err << "error: " << (report.messages.empty() ? file + ": unreadable" : report.messages.front()) << "\n";
      ok = false;
      continue;
    }
    err << file << ": " << to_string(*report.format) << ", " << report.kernels << " kernels, " << report.copies
        << " copies and memsets";
    if (report.skipped > 0) err << ", " << report.skipped << " skipped";
    err << "\n";
    for (const std::string& message : report.messages) err << "  skipped: " << message << "\n";
    if (report.unlisted > 0) err << "  ... and " << report.unlisted << " more\n";
  }
  return ok;
}

}  // namespace gpuqos::predictor::detail
