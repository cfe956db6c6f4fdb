// gpuqos-trace2workload: converts a Kineto trace into a replayable workload, PTX module and simgpu catalog.
#include <CLI/CLI.hpp>
#include <charconv>
#include <fstream>
#include <iostream>
#include <optional>

#include "gpuqos/replay/kineto.h"
#include "gpuqos/replay/replay_module.h"
#include "gpuqos/replay/workload.h"

namespace {

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  if (!out || !(out << text) || !out.flush()) throw std::runtime_error("cannot write " + path);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Converts a Kineto/PyTorch-profiler chrome trace (.json or .json.gz) into a gpuqos workload."};
  std::string trace_path;
  std::string out_path;
  std::string ptx_path;
  std::string catalog_path;
  std::string iteration = "all";
  app.add_option("--trace", trace_path, "the trace file")->required()->check(CLI::ExistingFile);
  app.add_option("--out", out_path, "the workload JSON to write")->required();
  app.add_option("--ptx", ptx_path, "also write the replay PTX module here");
  app.add_option("--catalog", catalog_path, "also write the simgpu kernel catalog here");
  app.add_option("--iteration", iteration, "keep only iteration N (0-based, in trace order) or 'all'")
      ->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  // Digits only (std::stoul took "-1" as 2^64 - 1 and said only "stoul" of "abc"), checked before the
  // trace is read.
  std::optional<std::uint64_t> index;
  if (iteration != "all") {
    std::uint64_t value = 0;
    const auto [end, error] = std::from_chars(iteration.data(), iteration.data() + iteration.size(), value);
    if (iteration.empty() || error != std::errc() || end != iteration.data() + iteration.size()) {
      std::cerr << "gpuqos-trace2workload: --iteration " << iteration << ": expected 'all' or an iteration number (0, 1, ...)\n";
      return 2;
    }
    index = value;
  }
  try {
    using namespace gpuqos::replay;
    Workload workload = convert_kineto_file(trace_path);
    if (index) workload = select_iteration(workload, *index);
    save_workload(workload, out_path);
    if (!ptx_path.empty()) write_text(ptx_path, generate_ptx(workload));
    if (!catalog_path.empty()) write_text(catalog_path, generate_catalog_json());
    std::cout << summary(workload) << "\n";
  } catch (const std::exception& e) {
    std::cerr << "gpuqos-trace2workload: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
