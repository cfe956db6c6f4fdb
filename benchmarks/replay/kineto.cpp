// Kineto chrome trace -> Workload: event selection, validation, iteration assignment.
#include "gpuqos/replay/kineto.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>
#include <unordered_map>

#include "gpuqos/replay/json_text.h"
#include "gpuqos/replay/kernel_names.h"
#include "gpuqos/replay/text_file.h"

namespace gpuqos::replay {

using nlohmann::json;

namespace {

std::optional<OpKind> gpu_op_kind(const json& cat) {
  if (!cat.is_string()) return std::nullopt;
  const auto& c = cat.get_ref<const std::string&>();
  if (c == "Kernel" || c == "kernel") return OpKind::kernel;
  if (c == "Memcpy" || c == "gpu_memcpy") return OpKind::memcpy;
  if (c == "Memset" || c == "gpu_memset") return OpKind::memset;
  return std::nullopt;
}

bool is_step(const json& event) {
  const auto name = event.find("name");
  return name != event.end() && name->is_string() && name->get_ref<const std::string&>().rfind("ProfilerStep#", 0) == 0;
}

const json* correlation_of(const json& event) {
  const auto args = event.find("args");
  if (args == event.end() || !args->is_object()) return nullptr;
  const auto corr = args->find("correlation");
  return corr == args->end() ? nullptr : &*corr;
}

// Parse-time filter: the traces are tens of MB of CPU events we never read. Uninteresting
// events become null (so traceEvents indices stay right for error messages), launches shrink
// to their timestamp and correlation id.
bool trim_event(int depth, json::parse_event_t event, json& parsed) {
  if (event != json::parse_event_t::object_end || depth > 2 || !parsed.is_object()) return true;
  const auto ph = parsed.find("ph");
  if (ph == parsed.end()) return true;
  if (*ph != "X") {
    parsed = nullptr;
    return true;
  }
  if (gpu_op_kind(parsed.value("cat", json())) || is_step(parsed)) return true;
  const json* corr = correlation_of(parsed);
  if (corr == nullptr) {
    parsed = nullptr;
    return true;
  }
  json launch{{"ph", "X"}, {"args", {{"correlation", *corr}}}};
  if (parsed.contains("ts")) launch["ts"] = parsed["ts"];
  parsed = std::move(launch);
  return true;
}

struct Context {
  const std::string& source;
  std::size_t index = 0;  // in traceEvents
  std::string what;       // e.g. "kernel 'void foo<...>'"

  [[noreturn]] void fail(const std::string& message) const {
    throw TraceError(source + ": traceEvents[" + std::to_string(index) + "]" + (what.empty() ? "" : " (" + what + ")") +
                     ": " + message);
  }
};

// Microseconds (integer or fractional) to integer ns; rejects non-numbers, NaN and infinities.
std::int64_t us_to_ns(const json& value, const char* field, const Context& ctx) {
  if (value.is_number_integer()) return value.get<std::int64_t>() * 1000;
  if (!value.is_number()) ctx.fail(std::string("\"") + field + "\" is not a number: " + json_text(value));
  const double us = value.get<double>();
  if (!std::isfinite(us)) ctx.fail(std::string("\"") + field + "\" is not finite");
  return std::llround(us * 1000.0);
}

std::array<std::uint32_t, 3> dim3_arg(const json& args, const char* key, const Context& ctx) {
  std::array<std::uint32_t, 3> dims{1, 1, 1};
  const auto it = args.find(key);
  if (it == args.end()) return dims;
  if (!it->is_array() || it->size() > 3) ctx.fail(std::string("args.") + key + " is not an array of up to 3 numbers");
  for (std::size_t i = 0; i < it->size(); ++i) {
    const json& v = (*it)[i];
    if (!v.is_number_integer() || v.get<std::int64_t>() < 1 || v.get<std::int64_t>() > 0xffffffffLL)
      ctx.fail(std::string("args.") + key + "[" + std::to_string(i) + "] is not a positive integer: " + json_text(v));
    dims[i] = v.get<std::uint32_t>();
  }
  return dims;
}

std::int64_t stream_of(const json& event, const json& args) {
  const auto s = args.find("stream");
  if (s != args.end() && s->is_number_integer()) return s->get<std::int64_t>();
  const auto tid = event.find("tid");  // old traces: "tid": "stream 7"
  if (tid != event.end() && tid->is_number_integer()) return tid->get<std::int64_t>();
  if (tid != event.end() && tid->is_string()) {
    const std::string& t = tid->get_ref<const std::string&>();
    const auto digits = t.find_first_of("0123456789");
    if (digits != std::string::npos) return std::stoll(t.substr(digits, 18));
  }
  return 0;
}

std::uint64_t byte_count(const json& args, const std::string& name, const Context& ctx) {
  const auto b = args.find("bytes");
  if (b != args.end()) {
    if (!b->is_number() || b->get<double>() < 0 || !std::isfinite(b->get<double>()))
      ctx.fail("args.bytes is not a non-negative number: " + json_text(*b));
    return b->is_number_integer() ? b->get<std::uint64_t>() : static_cast<std::uint64_t>(b->get<double>());
  }
  if (auto from_name = bytes_from_name(name)) return *from_name;
  ctx.fail("no size: neither args.bytes nor a byte count in the name");
}

struct RawOp {
  Operation op;
  std::string name;
  std::optional<std::int64_t> launch_ns;  // when the CPU launched it (via correlation)
  std::int64_t start_abs_ns = 0;
};

struct Step {
  std::string name;
  std::int64_t start_ns = 0;
  std::int64_t end_ns = 0;
};

std::string short_name(const std::string& name) { return name.size() > 80 ? name.substr(0, 77) + "..." : name; }

RawOp read_gpu_op(const json& e, OpKind kind, const Context& base) {
  Context ctx = base;
  const std::string name = e.value("name", json("")).is_string() ? e.value("name", std::string()) : std::string();
  ctx.what = std::string(to_string(kind)) + " '" + short_name(name) + "'";
  RawOp raw;
  raw.name = name;
  if (!e.contains("ts")) ctx.fail("no \"ts\"");
  raw.start_abs_ns = us_to_ns(e["ts"], "ts", ctx);
  raw.op.duration_ns = us_to_ns(e["dur"], "dur", ctx);
  if (raw.op.duration_ns < 0) ctx.fail("negative \"dur\": " + json_text(e["dur"]));
  raw.op.start_ns = raw.start_abs_ns;
  raw.op.kind = kind;
  static const json kNoArgs = json::object();
  const json& args = e.contains("args") && e["args"].is_object() ? e["args"] : kNoArgs;
  raw.op.stream = stream_of(e, args);
  if (kind == OpKind::kernel) {
    raw.op.grid = dim3_arg(args, "grid", ctx);
    raw.op.block = dim3_arg(args, "block", ctx);
    const auto shm = args.find("shared memory");
    if (shm != args.end()) {
      if (!shm->is_number_integer() || shm->get<std::int64_t>() < 0) ctx.fail("args[\"shared memory\"] is not a non-negative integer");
      raw.op.shared_bytes = shm->get<std::uint32_t>();
    }
  } else {
    raw.op.bytes = byte_count(args, name, ctx);
  }
  if (kind == OpKind::memcpy) {
    raw.op.direction = direction_from_name(name);
    raw.op.host_memory = host_memory_from_name(name, raw.op.direction);
  }
  return raw;
}

struct Collected {
  std::vector<RawOp> ops;
  std::vector<Step> cpu_steps;
  std::vector<Step> gpu_steps;
  std::unordered_map<std::int64_t, std::int64_t> launch_ns_by_correlation;
};

Collected collect(const json& events, const std::string& source) {
  Collected c;
  std::vector<std::optional<std::int64_t>> correlation_of_op;
  for (std::size_t i = 0; i < events.size(); ++i) {
    const json& e = events[i];
    if (!e.is_object() || e.value("ph", json()) != "X") continue;
    const Context ctx{source, i, {}};
    const auto kind = gpu_op_kind(e.value("cat", json()));
    const json* corr = correlation_of(e);
    const std::optional<std::int64_t> corr_id =
        corr && corr->is_number_integer() ? std::optional(corr->get<std::int64_t>()) : std::nullopt;
    if (kind) {
      if (!e.contains("dur")) continue;  // an instant or unfinished op: nothing to replay
      c.ops.push_back(read_gpu_op(e, *kind, ctx));
      correlation_of_op.push_back(corr_id);
    } else if (is_step(e) && e.contains("dur") && e.contains("ts")) {
      const std::int64_t start = us_to_ns(e["ts"], "ts", ctx);
      Step step{e["name"].get<std::string>(), start, start + us_to_ns(e["dur"], "dur", ctx)};
      (e.value("cat", json()) == "gpu_user_annotation" ? c.gpu_steps : c.cpu_steps).push_back(step);
    } else if (corr_id && e.contains("ts")) {
      c.launch_ns_by_correlation.emplace(*corr_id, us_to_ns(e["ts"], "ts", ctx));
    }
  }
  for (std::size_t k = 0; k < c.ops.size(); ++k) {
    if (!correlation_of_op[k]) continue;
    const auto it = c.launch_ns_by_correlation.find(*correlation_of_op[k]);
    if (it != c.launch_ns_by_correlation.end()) c.ops[k].launch_ns = it->second;
  }
  return c;
}

// Step index containing t, or -1. Steps are sorted by start and do not overlap.
int step_at(const std::vector<Step>& steps, std::int64_t t) {
  const auto after = std::upper_bound(steps.begin(), steps.end(), t,
                                      [](std::int64_t value, const Step& s) { return value < s.start_ns; });
  if (after == steps.begin()) return -1;
  const auto& s = *std::prev(after);
  return t < s.end_ns ? static_cast<int>(std::prev(after) - steps.begin()) : -1;
}

void assign_iterations(Collected& c, Workload& w) {
  std::vector<Step>& steps = c.cpu_steps.empty() ? c.gpu_steps : c.cpu_steps;
  if (steps.empty()) return;  // finalize() makes the whole trace one iteration
  std::sort(steps.begin(), steps.end(), [](const Step& a, const Step& b) { return a.start_ns < b.start_ns; });
  const bool by_launch = !c.cpu_steps.empty();
  std::vector<int> used(steps.size(), 0);
  for (RawOp& raw : c.ops) {
    raw.op.iteration = step_at(steps, by_launch && raw.launch_ns ? *raw.launch_ns : raw.start_abs_ns);
    if (raw.op.iteration >= 0) used[static_cast<std::size_t>(raw.op.iteration)] = 1;
  }
  std::vector<int> new_index(steps.size(), -1);  // steps without GPU work are dropped
  for (std::size_t s = 0; s < steps.size(); ++s) {
    if (!used[s]) continue;
    new_index[s] = static_cast<int>(w.iterations.size());
    w.iterations.push_back(Iteration{steps[s].name});
  }
  for (RawOp& raw : c.ops) {
    if (raw.op.iteration >= 0) raw.op.iteration = new_index[static_cast<std::size_t>(raw.op.iteration)];
  }
}

std::optional<std::string> gpu_name(const json& root, const json& first_op_args) {
  if (!root.is_object() || !root.contains("deviceProperties") || !root["deviceProperties"].is_array()) return std::nullopt;
  const json& props = root["deviceProperties"];
  const json device = first_op_args.is_object() ? first_op_args.value("device", json()) : json();
  for (const json& p : props) {
    if (p.is_object() && p.contains("name") && p["name"].is_string() && (device.is_null() || p.value("id", json()) == device))
      return p["name"].get<std::string>();
  }
  return std::nullopt;
}

const json& trace_events(const json& root, const std::string& source) {
  if (root.is_array()) return root;
  if (root.is_object() && root.contains("traceEvents") && root["traceEvents"].is_array()) return root["traceEvents"];
  throw TraceError(source + ": not a chrome trace: expected an object with a \"traceEvents\" array, or an array of events");
}

}  // namespace

Workload convert_kineto_text(const std::string& text, const std::string& source) {
  json root;
  try {
    root = json::parse(text, trim_event);
  } catch (const json::exception& e) {
    throw TraceError(source + ": not JSON: " + e.what());
  }
  const json& events = trace_events(root, source);
  Collected c = collect(events, source);
  if (c.ops.empty()) {
    throw TraceError(source + ": no GPU operations: no \"ph\":\"X\" event with \"dur\" of category "
                     "Kernel/kernel, Memcpy/gpu_memcpy or Memset/gpu_memset among " +
                     std::to_string(events.size()) + " events");
  }
  Workload w;
  w.source = source;
  for (const json& e : events) {
    if (e.is_object() && gpu_op_kind(e.value("cat", json())) && e.contains("dur")) {
      w.gpu = gpu_name(root, e.value("args", json()));
      break;
    }
  }
  assign_iterations(c, w);
  std::stable_sort(c.ops.begin(), c.ops.end(), [](const RawOp& a, const RawOp& b) { return a.start_abs_ns < b.start_abs_ns; });
  std::map<std::string, int> kernel_index;
  for (RawOp& raw : c.ops) {
    if (raw.op.kind == OpKind::kernel) {
      auto [it, added] = kernel_index.try_emplace(raw.name, static_cast<int>(w.kernels.size()));
      if (added) w.kernels.push_back({raw.name, ptx_entry_name(w.kernels.size(), raw.name)});
      raw.op.kernel = it->second;
    }
    raw.op.launch_ns = raw.launch_ns;
    w.ops.push_back(raw.op);
  }
  finalize(w);
  return w;
}

Workload convert_kineto_file(const std::filesystem::path& path) {
  std::string text;
  try {
    text = read_text_file(path);
  } catch (const FileError& e) {
    throw TraceError(e.what());
  }
  return convert_kineto_text(text, path.string());
}

}  // namespace gpuqos::replay
