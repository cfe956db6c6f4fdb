// Measured operations to train and evaluate the predictor on, and the readers of the formats they
// come in: gpuqos profile records (JSON Lines, written by the shim's collector), Kineto /
// PyTorch-profiler chrome traces (.json or .json.gz) and tables of measured kernels (CSV).
//
// Readers never throw on bad content: a bad row is skipped, counted and described (file and line)
// in the report; a file that cannot be read at all is reported as failed.
#pragma once

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "gpuqos/predictor/features.h"

namespace gpuqos::predictor {

struct KernelSample {
  std::string name;
  LaunchShape shape;
  double duration_ns = 0;
};

struct CopySample {
  CopyFeatures copy;
  double duration_ns = 0;
};

struct SampleSet {
  std::vector<KernelSample> kernels;
  std::vector<CopySample> copies;  // memsets included
  void append(SampleSet&& other);
};

enum class InputFormat { profile, kineto, csv };
const char* to_string(InputFormat format);

struct ReadOptions {
  std::vector<std::string> csv_args;  // CSV columns taken as scalar args, in order (<= 8)
  std::size_t max_messages = 20;      // row messages kept per file (all are counted)
};

struct ReadReport {
  std::string source;
  std::optional<InputFormat> format;
  bool failed = false;                // nothing could be read (the first message says why)
  std::size_t kernels = 0;            // samples added
  std::size_t copies = 0;
  std::size_t skipped = 0;            // rows or events rejected
  std::vector<std::string> messages;  // "<file>:<line>: <what is wrong>", at most max_messages
  std::size_t unlisted = 0;           // messages dropped beyond max_messages
};

// Reads one file of any supported format (detected from its content; .csv by extension),
// gunzipping it first if it is gzip data, and appends its samples to `out`.
ReadReport read_measurements(const std::filesystem::path& path, const ReadOptions& options, SampleSet& out);

// The format of a file's (decompressed) text: a gpuqos-profile header line, else JSON (a chrome
// trace), else CSV when the extension says so or the first line has commas; nullopt otherwise.
std::optional<InputFormat> detect_format(const std::string& text, const std::filesystem::path& path);

// The readers on text already in memory. `source` names the input in messages.
ReadReport read_profile_text(const std::string& text, const std::string& source, const ReadOptions& options, SampleSet& out);
ReadReport read_csv_text(const std::string& text, const std::string& source, const ReadOptions& options, SampleSet& out);
ReadReport read_kineto_text(const std::string& text, const std::string& source, const ReadOptions& options, SampleSet& out);

}  // namespace gpuqos::predictor
