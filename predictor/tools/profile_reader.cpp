// gpuqos profile records (JSON Lines), as the shim's CUPTI collector writes them:
//   line 1: {"format":"gpuqos-profile","version":1, ...}
//   {"kind":"kernel","name":N,"device":0,"grid":[x,y,z],"block":[x,y,z],"shared_bytes":B,"args":[u64...],"start_ns":S,"end_ns":E}
//   {"kind":"copy","direction":"h2d"|"d2h"|"d2d","host_memory":"pinned"|"pageable"|"none","bytes":N,"start_ns":S,"end_ns":E}
//   {"kind":"memset","bytes":N,"start_ns":S,"end_ns":E}
// duration = end_ns - start_ns; unknown keys are ignored.
#include <nlohmann/json.hpp>

#include "read_util.h"
#include "gpuqos/replay/json_text.h"

namespace gpuqos::predictor {

namespace {

using nlohmann::json;
constexpr int kProfileVersion = 1;

struct LineError {
  std::string what;
};
// An op whose end is its start (below the clock's resolution): nothing to learn, and not a fault of
// the file, so counted in one line rather than said line by line.
struct ZeroDuration {};

const json& field(const json& record, const char* key) {
  const auto it = record.find(key);
  if (it == record.end()) throw LineError{std::string("no \"") + key + "\""};
  return *it;
}

std::uint64_t count_field(const json& record, const char* key, std::uint64_t max) {
  const json& v = field(record, key);
  if (!v.is_number_unsigned() || v.get<std::uint64_t>() > max)
    throw LineError{std::string("\"") + key + "\" must be an integer in [0, " + std::to_string(max) + "], got " + replay::json_text(v)};
  return v.get<std::uint64_t>();
}

std::array<std::uint32_t, 3> dims_field(const json& record, const char* key) {
  const json& v = field(record, key);
  std::array<std::uint32_t, 3> dims{1, 1, 1};
  if (!v.is_array() || v.empty() || v.size() > 3) throw LineError{std::string("\"") + key + "\" must be an array of 1 to 3 positive integers"};
  for (std::size_t i = 0; i < v.size(); ++i) {
    if (!v[i].is_number_unsigned() || v[i].get<std::uint64_t>() == 0 || v[i].get<std::uint64_t>() > 0xffffffffULL)
      throw LineError{std::string("\"") + key + "\"[" + std::to_string(i) + "] must be a positive 32-bit integer, got " + replay::json_text(v[i])};
    dims[i] = v[i].get<std::uint32_t>();
  }
  return dims;
}

double duration_of(const json& record) {
  const json& start = field(record, "start_ns");
  const json& end = field(record, "end_ns");
  // Nanosecond timestamps, unsigned as CUPTI's are: read as 64-bit unsigned (one of 2^63 or more
  // was read as a negative number), a negative one refused.
  const auto negative = [](const json& v) { return v.is_number_integer() && !v.is_number_unsigned(); };
  if (!start.is_number_integer() || !end.is_number_integer() || negative(start) || negative(end))
    throw LineError{"\"start_ns\" and \"end_ns\" must be integers of at least 0"};
  const auto s = start.get<std::uint64_t>();
  const auto e = end.get<std::uint64_t>();
  if (e == s) throw ZeroDuration{};
  if (e < s) throw LineError{"end_ns (" + std::to_string(e) + ") is not after start_ns (" + std::to_string(s) + ")"};
  if (double(e - s) > detail::kMaxDurationNs)
    throw LineError{"end_ns - start_ns (" + std::to_string(e - s) + " ns) is " + detail::kTooLong};
  return double(e - s);
}

KernelSample kernel_of(const json& r) {
  KernelSample k;
  const json& name = field(r, "name");
  if (!name.is_string() || name.get_ref<const std::string&>().empty()) throw LineError{"\"name\" must be a non-empty string"};
  k.name = name.get<std::string>();
  k.shape.grid = dims_field(r, "grid");
  k.shape.block = dims_field(r, "block");
  if (r.contains("shared_bytes")) k.shape.shared_bytes = std::uint32_t(count_field(r, "shared_bytes", 0xffffffffULL));
  if (r.contains("args")) {
    const json& args = r["args"];
    if (!args.is_array() || args.size() > kMaxArgs) throw LineError{"\"args\" must be an array of at most 8 unsigned integers"};
    for (std::size_t i = 0; i < args.size(); ++i) {
      if (!args[i].is_number_unsigned()) throw LineError{"\"args\"[" + std::to_string(i) + "] must be an unsigned integer, got " + replay::json_text(args[i])};
      k.shape.args[i] = args[i].get<std::uint64_t>();
    }
    k.shape.arg_count = std::uint8_t(args.size());
  }
  k.duration_ns = duration_of(r);
  return k;
}

template <typename Enum, std::size_t N>
Enum enum_field(const json& r, const char* key, const std::array<const char*, N>& names, std::optional<Enum> absent) {
  const auto it = r.find(key);
  if (it == r.end() && absent) return *absent;
  const json& v = field(r, key);
  for (std::size_t i = 0; i < N; ++i)
    if (v.is_string() && v.get_ref<const std::string&>() == names[i]) return Enum(i);
  std::string expected;
  for (const char* n : names) expected += std::string(expected.empty() ? "" : "|") + "\"" + n + "\"";
  throw LineError{std::string("\"") + key + "\" must be " + expected + ", got " + replay::json_text(v)};
}

CopySample copy_of(const json& r, bool memset) {
  CopySample c;
  c.copy.bytes = count_field(r, "bytes", ~std::uint64_t{0});
  if (memset) {
    c.copy.direction = CopyDirection::memset;
  } else {
    c.copy.direction = enum_field<CopyDirection>(r, "direction", std::array{"h2d", "d2h", "d2d"}, std::nullopt);
    c.copy.host_memory = enum_field<HostMemory>(r, "host_memory", std::array{"none", "pinned", "pageable"}, HostMemory::none);
    if (c.copy.direction == CopyDirection::d2d) c.copy.host_memory = HostMemory::none;
  }
  c.duration_ns = duration_of(r);
  return c;
}

void read_record(const json& r, SampleSet& out, ReadReport& report) {
  if (!r.is_object()) throw LineError{"not a JSON object"};
  const json& kind = field(r, "kind");
  if (kind == "kernel") {
    out.kernels.push_back(kernel_of(r));
    ++report.kernels;
  } else if (kind == "copy" || kind == "memset") {
    out.copies.push_back(copy_of(r, kind == "memset"));
    ++report.copies;
  } else {
    throw LineError{"unknown \"kind\" " + replay::json_text(kind) + " (expected \"kernel\", \"copy\" or \"memset\")"};
  }
}

// "kernel: " and the like, to prefix a record's message; "" when its kind is not a string.
std::string kind_label(const json& record) {
  const auto kind = record.is_object() ? record.find("kind") : record.end();
  return kind != record.end() && kind->is_string() ? kind->get<std::string>() + ": " : "";
}

std::string check_header(const std::string& line, const std::string& source) {
  const json header = json::parse(line, nullptr, false);
  if (!header.is_object() || header.value("format", json()) != "gpuqos-profile")
    return source + ":1: not a gpuqos profile: the first line must be {\"format\":\"gpuqos-profile\",\"version\":1}";
  const json version = header.value("version", json());
  if (version != kProfileVersion)
    return source + ":1: unsupported gpuqos-profile version " + replay::json_text(version) + " (this build reads version 1)";
  return "";
}

}  // namespace

ReadReport read_profile_text(const std::string& text, const std::string& source, const ReadOptions& options, SampleSet& out) {
  ReadReport report{source, InputFormat::profile};
  std::size_t line_number = 0;
  std::size_t zero_duration = 0;
  for (std::size_t begin = 0; begin < text.size();) {
    const std::size_t end = std::min(text.find('\n', begin), text.size());
    const std::string line(detail::trim(std::string_view(text).substr(begin, end - begin)));
    begin = end + 1;
    if (++line_number == 1) {
      if (const std::string error = check_header(line, source); !error.empty()) return detail::fail(report, error);
      continue;
    }
    if (line.empty()) continue;
    const std::string where = source + ":" + std::to_string(line_number) + ": ";
    const json record = json::parse(line, nullptr, false);
    if (record.is_discarded()) {
      detail::reject(report, options, where + "not valid JSON");
      continue;
    }
    try {
      read_record(record, out, report);
    } catch (const ZeroDuration&) {
      ++zero_duration;
    } catch (const LineError& e) {
      detail::reject(report, options, where + kind_label(record) + e.what);
    } catch (const json::exception& e) {
      detail::reject(report, options, where + e.what());
    }
  }
  if (line_number == 0) return detail::fail(report, source + ": empty file (no gpuqos-profile header line)");
  if (zero_duration > 0) {  // first, so that a file's many bad lines do not push it out of the list
    report.skipped += zero_duration;
    report.messages.insert(report.messages.begin(), source + ": " + std::to_string(zero_duration) +
                                                        " ops with a zero duration (below the clock's resolution) skipped");
  }
  return report;
}

}  // namespace gpuqos::predictor
