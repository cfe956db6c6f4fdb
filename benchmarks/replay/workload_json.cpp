// The workload's JSON form: writing, and reading with errors that name the file and the field.
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gpuqos/replay/text_file.h"
#include "gpuqos/replay/workload.h"

namespace gpuqos::replay {

using nlohmann::json;

namespace {

constexpr const char* kFormat = "gpuqos-workload";
constexpr int kVersion = 1;

json op_to_json(const Workload& w, const Operation& op) {
  json j{{"kind", to_string(op.kind)},       {"stream", op.stream},
         {"start_ns", op.start_ns},          {"duration_ns", op.duration_ns},
         {"idle_gap_ns", op.idle_gap_ns},    {"iteration", op.iteration}};
  if (op.launch_ns) j["launch_ns"] = *op.launch_ns;
  if (op.kind == OpKind::kernel) {
    j["entry"] = w.kernels.at(static_cast<std::size_t>(op.kernel)).entry;
    j["grid"] = op.grid;
    j["block"] = op.block;
    j["shared_bytes"] = op.shared_bytes;
  } else {
    j["bytes"] = op.bytes;
  }
  if (op.kind == OpKind::memcpy) {
    j["direction"] = to_string(op.direction);
    j["host_memory"] = to_string(op.host_memory);
  }
  return j;
}

template <typename E>
E enum_from(const json& j, const char* key, std::initializer_list<E> values) {
  const std::string text = j.at(key).get<std::string>();
  for (E v : values) {
    if (text == to_string(v)) return v;
  }
  throw WorkloadError(std::string("unknown ") + key + " '" + text + "'");
}

Operation op_from_json(const json& j, const std::map<std::string, int>& entries) {
  Operation op;
  op.kind = enum_from(j, "kind", {OpKind::kernel, OpKind::memcpy, OpKind::memset});
  op.stream = j.at("stream").get<std::int64_t>();
  op.start_ns = j.at("start_ns").get<std::int64_t>();
  op.duration_ns = j.at("duration_ns").get<std::int64_t>();
  op.idle_gap_ns = j.at("idle_gap_ns").get<std::int64_t>();
  op.iteration = j.at("iteration").get<int>();
  if (j.contains("launch_ns")) op.launch_ns = j.at("launch_ns").get<std::int64_t>();
  if (op.duration_ns < 0 || op.start_ns < 0) throw WorkloadError("negative start_ns or duration_ns");
  if (op.kind == OpKind::kernel) {
    const std::string entry = j.at("entry").get<std::string>();
    const auto it = entries.find(entry);
    if (it == entries.end()) throw WorkloadError("entry '" + entry + "' is not in \"kernels\"");
    op.kernel = it->second;
    op.grid = j.at("grid").get<std::array<std::uint32_t, 3>>();
    op.block = j.at("block").get<std::array<std::uint32_t, 3>>();
    op.shared_bytes = j.at("shared_bytes").get<std::uint32_t>();
  } else {
    op.bytes = j.at("bytes").get<std::uint64_t>();
  }
  if (op.kind == OpKind::memcpy) {
    using D = CopyDirection;
    using H = HostMemory;
    op.direction = enum_from(j, "direction", {D::h2d, D::d2h, D::d2d, D::other});
    op.host_memory = enum_from(j, "host_memory", {H::none, H::pinned, H::pageable, H::unknown});
  }
  return op;
}

Iteration iteration_from_json(const json& j) {
  return Iteration{j.at("name").get<std::string>(), j.at("start_ns").get<std::int64_t>(),
                   j.at("span_ns").get<std::int64_t>(), j.at("busy_ns").get<std::int64_t>(),
                   j.at("ops").get<std::uint64_t>()};
}

// Runs `read`, and rethrows any failure as a WorkloadError naming the source and `where`.
template <typename F>
auto with_context(const std::string& source, const std::string& where, F&& read) {
  try {
    return read();
  } catch (const std::exception& e) {
    throw WorkloadError(source + ": " + where + ": " + e.what());
  }
}

}  // namespace

std::string to_json_text(const Workload& w) {
  json j{{"format", kFormat}, {"version", kVersion}, {"source", w.source},
         {"span_ns", w.span_ns}, {"busy_ns", w.busy_ns}, {"kernel_busy_ns", w.kernel_busy_ns}};
  j["gpu"] = w.gpu ? json(*w.gpu) : json(nullptr);
  j["iterations"] = json::array();
  for (const Iteration& it : w.iterations) {
    j["iterations"].push_back(
        {{"name", it.name}, {"start_ns", it.start_ns}, {"span_ns", it.span_ns}, {"busy_ns", it.busy_ns}, {"ops", it.ops}});
  }
  j["kernels"] = json::array();
  for (const KernelInfo& k : w.kernels) j["kernels"].push_back({{"entry", k.entry}, {"name", k.name}});
  j["ops"] = json::array();
  for (const Operation& op : w.ops) j["ops"].push_back(op_to_json(w, op));
  return j.dump(1) + "\n";
}

Workload from_json_text(const std::string& text, const std::string& source_name) {
  const json j = with_context(source_name, "not JSON", [&] { return json::parse(text); });
  Workload w;
  with_context(source_name, "header", [&] {
    if (j.at("format").get<std::string>() != kFormat) throw WorkloadError("\"format\" is not " + std::string(kFormat));
    if (j.at("version").get<int>() != kVersion) throw WorkloadError("unsupported \"version\"");
    w.source = j.at("source").get<std::string>();
    if (!j.at("gpu").is_null()) w.gpu = j.at("gpu").get<std::string>();
    w.span_ns = j.at("span_ns").get<std::int64_t>();
    w.busy_ns = j.at("busy_ns").get<std::int64_t>();
    w.kernel_busy_ns = j.at("kernel_busy_ns").get<std::int64_t>();
    return 0;
  });
  std::map<std::string, int> entries;
  const json& kernels = with_context(source_name, "kernels", [&]() -> const json& { return j.at("kernels"); });
  for (std::size_t i = 0; i < kernels.size(); ++i) {
    with_context(source_name, "kernels[" + std::to_string(i) + "]", [&] {
      w.kernels.push_back({kernels[i].at("name").get<std::string>(), kernels[i].at("entry").get<std::string>()});
      if (!entries.emplace(w.kernels.back().entry, static_cast<int>(i)).second) throw WorkloadError("duplicate entry");
      return 0;
    });
  }
  const json& iterations = with_context(source_name, "iterations", [&]() -> const json& { return j.at("iterations"); });
  for (std::size_t i = 0; i < iterations.size(); ++i) {
    w.iterations.push_back(with_context(source_name, "iterations[" + std::to_string(i) + "]",
                                        [&] { return iteration_from_json(iterations[i]); }));
  }
  const json& ops = with_context(source_name, "ops", [&]() -> const json& { return j.at("ops"); });
  for (std::size_t i = 0; i < ops.size(); ++i) {
    w.ops.push_back(with_context(source_name, "ops[" + std::to_string(i) + "]", [&] {
      Operation op = op_from_json(ops[i], entries);
      if (op.iteration < -1 || op.iteration >= static_cast<int>(w.iterations.size()))
        throw WorkloadError("iteration out of range");
      return op;
    }));
  }
  return w;
}

void save_workload(const Workload& w, const std::filesystem::path& path) {
  std::ofstream out(path, std::ios::binary);
  if (!out) throw WorkloadError("cannot write " + path.string());
  out << to_json_text(w);
  if (!out.flush()) throw WorkloadError("error writing " + path.string());
}

Workload load_workload(const std::filesystem::path& path) {
  // As the traces are read: gzip data is unpacked whatever the name (a .json.gz workload was "not
  // JSON ... last read: '<U+001F>'").
  std::string text;
  try {
    text = read_text_file(path);
  } catch (const std::exception& e) {
    throw WorkloadError(e.what());
  }
  return from_json_text(text, path.string());
}

}  // namespace gpuqos::replay
