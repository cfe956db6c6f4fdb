// Reading a command's inputs and reporting what was read and skipped.
#include "load_inputs.h"

#include <sys/stat.h>

namespace gpuqos::predictor::detail {

std::optional<std::string> same_file_among(const std::string& file, const std::vector<std::string>& others) {
  struct stat info{};
  if (::stat(file.c_str(), &info) != 0) return std::nullopt;
  for (const std::string& other : others) {
    struct stat seen{};
    if (::stat(other.c_str(), &seen) == 0 && seen.st_dev == info.st_dev && seen.st_ino == info.st_ino) return other;
  }
  return std::nullopt;
}

bool load_inputs(const std::vector<std::string>& files, const ReadOptions& options, SampleSet& out, std::ostream& err) {
  bool ok = true;
  std::vector<std::string> read;
  for (const std::string& file : files) {
    // Given twice (or a link to one given): its measurements would count twice.
    if (const auto same = same_file_among(file, read)) {
      err << "warning: " << file << " is the same file as " << *same << ": read once\n";
      continue;
    }
    read.push_back(file);
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
