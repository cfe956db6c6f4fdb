// Reading a command's inputs and reporting what was read and skipped.
#include "load_inputs.h"

#include <sys/stat.h>

#include <algorithm>
#include <cctype>
#include <filesystem>

#include "gpuqos/predictor/commands.h"

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

bool load_inputs(const std::vector<std::string>& files, const ReadOptions& options, SampleSet& out, std::ostream& err,
                 const std::string& command) {
  bool ok = true;
  std::vector<std::string> read;
  for (const std::string& file : files) {  // a killed process's records, not given: said, not read unasked
    for (const std::string& left : unfinished_profiles(file)) {
      if (!same_file_among(left, files)) {
        err << "note: " << left << " holds the records of a process of " << file
            << "'s job that was killed before it could add them; give it to --from as well to use them\n";
      }
    }
  }
  for (const std::string& file : files) {
    // Given twice (or a link to one given): its measurements would count twice.
    if (const auto same = same_file_among(file, read)) {
      err << command << ": warning: " << file << " is the same file as " << *same << ": read once\n";
      continue;
    }
    read.push_back(file);
    const ReadReport report = read_measurements(file, options, out);
    if (report.failed) {
      err << command << ": " << (report.messages.empty() ? file + ": unreadable" : report.messages.front()) << "\n";
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

namespace gpuqos::predictor {

std::vector<std::string> unfinished_profiles(const std::string& profile) {
  const std::filesystem::path path(profile);
  if (!path.has_filename()) return {};
  const std::string prefix = path.filename().string() + ".tmp.";
  const std::filesystem::path directory = path.has_parent_path() ? path.parent_path() : std::filesystem::path(".");
  std::vector<std::string> found;
  std::error_code error;
  for (std::filesystem::directory_iterator it(directory, error), end; !error && it != end; it.increment(error)) {
    const std::string name = it->path().filename().string();
    const bool numbered = name.size() > prefix.size() && name.starts_with(prefix) &&
                          std::isdigit(static_cast<unsigned char>(name[prefix.size()]));
    if (numbered && it->is_regular_file(error)) found.push_back((path.parent_path() / name).string());
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace gpuqos::predictor
