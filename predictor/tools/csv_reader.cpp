// Tables of measured kernels (NeuSight-style CSV): one row per op with its kernel's name, grid,
// block and latency in milliseconds; --csv-args names the columns that are its scalar args.
#include <algorithm>
#include <cctype>
#include <cmath>
#include <map>

#include "gpuqos/ipc/registration.h"
#include "read_util.h"

namespace gpuqos::predictor {

namespace {

struct Record {
  std::size_t line = 0;  // where the record starts (1-based)
  std::vector<std::string> fields;
};

// RFC 4180 records: quoted fields may hold commas, quotes ("") and newlines; CRLF or LF ends a row.
std::vector<Record> split_records(const std::string& text, std::optional<std::size_t>& unterminated_at) {
  std::vector<Record> records;
  Record current{1, {std::string()}};
  std::size_t line = 1;
  bool quoted = false;
  for (std::size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (quoted) {
      if (c == '"' && i + 1 < text.size() && text[i + 1] == '"') {
        current.fields.back() += '"';
        ++i;
      } else if (c == '"') {
        quoted = false;
      } else {
        if (c == '\n') ++line;
        current.fields.back() += c;
      }
    } else if (c == '"') {
      quoted = true;
    } else if (c == ',') {
      current.fields.emplace_back();
    } else if (c == '\n' || c == '\r') {
      if (c == '\r' && i + 1 < text.size() && text[i + 1] == '\n') ++i;
      ++line;
      if (current.fields.size() > 1 || !detail::trim(current.fields[0]).empty()) records.push_back(std::move(current));
      current = Record{line, {std::string()}};
    } else {
      current.fields.back() += c;
    }
  }
  if (quoted) unterminated_at = current.line;
  if (current.fields.size() > 1 || !detail::trim(current.fields[0]).empty()) records.push_back(std::move(current));
  return records;
}

std::string lower(std::string_view text) {
  std::string out(detail::trim(text));
  for (char& c : out) c = char(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

struct Columns {
  std::size_t name = 0, latency = 0;
  std::array<std::size_t, 3> grid{}, block{};
  std::optional<std::size_t> shared;
  std::vector<std::size_t> args;
};

// Column indices by (case-insensitive) header name; the error names every missing column.
std::optional<Columns> find_columns(const Record& header, const ReadOptions& options, std::string& error) {
  std::map<std::string, std::size_t> index;
  for (std::size_t i = 0; i < header.fields.size(); ++i) index.emplace(lower(header.fields[i]), i);
  std::vector<std::string> missing;
  auto need = [&](const std::string& name) {
    const auto it = index.find(lower(name));
    if (it == index.end()) missing.push_back("'" + name + "'");
    return it == index.end() ? 0 : it->second;
  };
  Columns c;
  c.name = need("Kernel Name");
  c.latency = need("Latency");
  for (std::size_t d = 0; d < 3; ++d) c.grid[d] = need(std::string("Grid ") + "xyz"[d]);
  for (std::size_t d = 0; d < 3; ++d) c.block[d] = need(std::string("Block ") + "xyz"[d]);
  if (const auto it = index.find("shared memory"); it != index.end()) c.shared = it->second;
  for (const std::string& arg : options.csv_args) c.args.push_back(need(arg));
  if (options.csv_args.size() > kMaxArgs) missing.push_back("(at most 8 --csv-args)");
  if (missing.empty()) return c;
  error = "missing column";
  for (const auto& m : missing) error += (&m == &missing.front() ? " " : ", ") + m;
  return std::nullopt;
}

// One row -> sample, or the reason it is rejected.
std::optional<KernelSample> parse_row(const Record& r, const Columns& c, const ReadOptions& options, std::string& error) {
  const auto bad = [&error](std::string message) {
    error = std::move(message);
    return std::nullopt;
  };
  KernelSample s;
  // As the shim names kernels to gpuqosd (bytes outside printable ASCII escaped), so what is
  // trained from another tool's CSV is found by the name gpuqosd sees; nor can a byte that is not
  // UTF-8 (a Latin-1 export) reach the JSON of the store or of eval --json.
  s.name = ipc::wire_kernel_name(detail::trim(r.fields[c.name]));
  if (s.name.empty()) return bad("column 'Kernel Name' is empty");
  const auto latency = detail::parse_double(r.fields[c.latency]);
  if (!latency) return bad("column 'Latency': '" + r.fields[c.latency] + "' is not a number");
  if (!std::isfinite(*latency) || *latency <= 0)
    return bad("column 'Latency': duration must be a positive finite number of ms, got '" + r.fields[c.latency] + "'");
  s.duration_ns = *latency * 1e6;
  // Below a nanosecond is no measurement, and its reciprocal overflowed the regressions' sums
  // (a review's 1e-300 ms: the store written held nulls that no load accepts).
  if (s.duration_ns < detail::kMinDurationNs)
    return bad("column 'Latency': " + r.fields[c.latency] + " ms is shorter than a nanosecond: not a measurement");
  if (!(s.duration_ns <= detail::kMaxDurationNs))
    return bad("column 'Latency': " + r.fields[c.latency] + " ms is " + detail::kTooLong);
  for (std::size_t d = 0; d < 6; ++d) {
    const std::size_t col = d < 3 ? c.grid[d] : c.block[d - 3];
    const auto v = detail::parse_count(r.fields[col]);
    if (!v || *v == 0 || *v > 0xffffffffULL)
      return bad(std::string("column '") + (d < 3 ? "Grid " : "Block ") + "xyz"[d % 3] + "': '" + r.fields[col] +
                     "' is not a positive integer");
    (d < 3 ? s.shape.grid[d] : s.shape.block[d - 3]) = std::uint32_t(*v);
  }
  if (c.shared) {
    const auto v = detail::parse_count(r.fields[*c.shared]);
    if (!v || *v > 0xffffffffULL) return bad("column 'Shared Memory': '" + r.fields[*c.shared] + "' is not a byte count");
    s.shape.shared_bytes = std::uint32_t(*v);
  }
  for (std::size_t i = 0; i < c.args.size(); ++i) {
    const auto v = detail::parse_count(r.fields[c.args[i]]);
    if (!v) return bad("column '" + options.csv_args[i] + "': '" + r.fields[c.args[i]] + "' is not a non-negative integer");
    s.shape.args[i] = *v;
  }
  s.shape.arg_count = std::uint8_t(c.args.size());
  return s;
}

}  // namespace

ReadReport read_csv_text(const std::string& text, const std::string& source, const ReadOptions& options, SampleSet& out) {
  ReadReport report{source, InputFormat::csv};
  std::optional<std::size_t> unterminated_at;
  const std::vector<Record> records = split_records(text, unterminated_at);
  if (records.empty()) return detail::fail(report, source + ": empty CSV file (no header line)");
  std::string error;
  const auto columns = find_columns(records[0], options, error);
  if (!columns) return detail::fail(report, source + ":" + std::to_string(records[0].line) + ": " + error);
  for (std::size_t i = 1; i < records.size(); ++i) {
    const Record& r = records[i];
    const std::string where = source + ":" + std::to_string(r.line) + ": ";
    if (unterminated_at && r.line == *unterminated_at) {
      detail::reject(report, options, where + "unterminated quoted field");
      continue;
    }
    if (r.fields.size() != records[0].fields.size()) {
      detail::reject(report, options, where + "expected " + std::to_string(records[0].fields.size()) + " fields, found " +
                                          std::to_string(r.fields.size()));
      continue;
    }
    if (auto sample = parse_row(r, *columns, options, error)) {
      out.kernels.push_back(std::move(*sample));
      ++report.kernels;
    } else {
      detail::reject(report, options, where + error);
    }
  }
  return report;
}

}  // namespace gpuqos::predictor
