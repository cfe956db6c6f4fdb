// Format detection and the one entry point over every reader.
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>

#include "gpuqos/replay/text_file.h"
#include "read_util.h"

namespace gpuqos::predictor {

void SampleSet::append(SampleSet&& other) {
  kernels.insert(kernels.end(), std::make_move_iterator(other.kernels.begin()), std::make_move_iterator(other.kernels.end()));
  copies.insert(copies.end(), other.copies.begin(), other.copies.end());
}

const char* to_string(InputFormat format) {
  switch (format) {
    case InputFormat::profile: return "gpuqos profile";
    case InputFormat::kineto: return "Kineto trace";
    case InputFormat::csv: return "CSV table";
  }
  return "?";
}

namespace {

// `path` ends in .csv, in any case.
bool named_csv(const std::filesystem::path& path) {
  std::string extension = path.extension().string();
  std::transform(extension.begin(), extension.end(), extension.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  return extension == ".csv";
}

}  // namespace

std::optional<InputFormat> detect_format(const std::string& text, const std::filesystem::path& path) {
  const std::string_view first_line = detail::trim(std::string_view(text).substr(0, text.find('\n')));
  if (first_line.find("\"gpuqos-profile\"") != std::string_view::npos) return InputFormat::profile;
  const auto first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && (text[first] == '{' || text[first] == '[')) return InputFormat::kineto;
  if (named_csv(path) || first_line.find(',') != std::string_view::npos) return InputFormat::csv;
  return std::nullopt;
}

ReadReport read_measurements(const std::filesystem::path& path, const ReadOptions& options, SampleSet& out) {
  ReadReport report{path.string()};
  std::string text;
  try {
    text = replay::read_text_file(path);  // gunzips gzip data whatever the extension
  } catch (const std::exception& e) {
    return detail::fail(report, e.what());
  }
  // A store (`gpuqos train`'s output) given as measurements: said so, not parsed as a CSV table.
  if (text.starts_with("GPUQOSPF"))
    return detail::fail(report, path.string() + ": a gpuqos predictor store (what gpuqos train writes), not measurements: "
                                                "give the profiles, traces or tables it was trained from");
  if (text.find_first_not_of(" \t\r\n") == std::string::npos)
    return detail::fail(report, path.string() + ": empty: no measurements in it");
  // Binary data with a comma in its first line would otherwise read as a CSV table without columns.
  const std::string_view head = std::string_view(text).substr(0, 4096);
  const auto control = std::count_if(head.begin(), head.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return byte < 0x20 && byte != '\t' && byte != '\n' && byte != '\r';
  });
  if (head.find('\0') != std::string_view::npos || control * 20 > static_cast<std::ptrdiff_t>(head.size()))
    return detail::fail(report, path.string() + ": binary data: not a gpuqos profile (JSON Lines), a Kineto trace (JSON) or a CSV table");
  // JSON Lines whose first line is not the gpuqos-profile header (it was cut off, or another tool's
  // records): said as such, rather than as a JSON parser's error at line 2.
  if (const auto end_of_first = text.find('\n'); end_of_first != std::string::npos) {
    const std::string_view first_line = detail::trim(std::string_view(text).substr(0, end_of_first));
    const std::string_view rest = detail::trim(std::string_view(text).substr(end_of_first + 1));
    if (first_line.starts_with('{') && rest.starts_with('{') &&
        first_line.find("\"gpuqos-profile\"") == std::string_view::npos && nlohmann::json::accept(first_line)) {
      return detail::fail(report, path.string() + ":1: JSON Lines, but line 1 is not a gpuqos profile's header "
                                                  "({\"format\":\"gpuqos-profile\",\"version\":1,...}): "
                                                  "the file's start is missing, or it is another tool's records");
    }
  }
  const auto format = detect_format(text, path);
  if (!format)
    return detail::fail(report, path.string() + ": unknown format: not a gpuqos profile (JSON Lines), a Kineto trace (JSON) or a CSV table");
  switch (*format) {
    case InputFormat::profile: return read_profile_text(text, path.string(), options, out);
    case InputFormat::kineto: return read_kineto_text(text, path.string(), options, out);
    case InputFormat::csv: {
      ReadReport csv = read_csv_text(text, path.string(), options, out);
      if (csv.failed && !csv.messages.empty() && !named_csv(path)) {  // a config, notes: say why it was a table
        csv.messages.front() += " (read as a CSV table because its first line has a comma; it is not a gpuqos profile "
                                "or a Kineto trace either)";
      }
      return csv;
    }
  }
  return report;
}

}  // namespace gpuqos::predictor
