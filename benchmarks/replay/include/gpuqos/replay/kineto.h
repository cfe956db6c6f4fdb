// Converter from Kineto / PyTorch-profiler chrome traces (.json or .json.gz) to a Workload.
//
// Reads "ph":"X" events of categories Kernel/kernel, Memcpy/gpu_memcpy, Memset/gpu_memset
// (events of other phases or without "dur" are skipped), ProfilerStep#N annotations for
// iteration boundaries (a GPU op belongs to the step during which the CPU launched it, found
// through args.correlation, or else the step its own start falls in), and deviceProperties
// for the GPU name. Times in the trace are microseconds (possibly fractional).
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>

#include "gpuqos/replay/workload.h"

namespace gpuqos::replay {

// Bad input: the message names the file and, for an event, its index in traceEvents.
struct TraceError : std::runtime_error {
  using std::runtime_error::runtime_error;
};

Workload convert_kineto_file(const std::filesystem::path& path);
Workload convert_kineto_text(const std::string& json_text, const std::string& source_name);

// The byte count in a copy or memset name such as "Memcpy HtoD 4096 bytes" or "... 2.5 MB";
// nullopt when the name has none.
std::optional<std::uint64_t> bytes_from_name(const std::string& name);

// Direction and host memory kind from "Memcpy HtoD (Pageable -> Device)" and the like.
CopyDirection direction_from_name(const std::string& name);
HostMemory host_memory_from_name(const std::string& name, CopyDirection direction);

}  // namespace gpuqos::replay
