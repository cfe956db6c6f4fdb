// The Kineto trace converter on small synthetic traces: both category styles, copies, gaps,
// iterations, gzip input and the messages for bad input.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <zlib.h>

#include "gpuqos/replay/kineto.h"
#include "gpuqos/replay/text_file.h"
#include "gpuqos/testing/temp_dir.h"

namespace gpuqos::replay {
namespace {

using ::testing::HasSubstr;

// An old-style (Kernel/Memcpy/Memset, "tid": "stream 7") trace: copy, gap, two kernels, memset.
const char* kOldStyle = R"J({"deviceProperties": [{"id": 0, "name": "Tesla V100"}], "traceEvents": [
  {"ph": "X", "cat": "Operator", "name": "ProfilerStep#3", "pid": 1, "tid": "1", "ts": 900, "dur": 200},
  {"ph": "X", "cat": "Runtime", "name": "cudaLaunchKernel", "ts": 1005, "dur": 2, "args": {"correlation": 11}},
  {"ph": "X", "cat": "Memcpy", "name": "Memcpy HtoD (Pageable -> Device)", "pid": 0, "tid": "stream 7",
   "ts": 1000, "dur": 20, "args": {"device": 0, "stream": 7, "bytes": 4096}},
  {"ph": "X", "cat": "Kernel", "name": "void ns::foo<float, 2>(float*, int)", "pid": 0, "tid": "stream 7",
   "ts": 1030, "dur": 5, "args": {"device": 0, "stream": 7, "correlation": 11, "grid": [4, 2, 1],
   "block": [128, 1, 1], "shared memory": 1024}},
  {"ph": "X", "cat": "Kernel", "name": "volta_sgemm_128x64_nn", "pid": 0, "tid": "stream 9",
   "ts": 1033, "dur": 10, "args": {"grid": [80, 1, 1], "block": [256, 1, 1]}},
  {"ph": "i", "cat": "Kernel", "name": "instant", "ts": 1040},
  {"ph": "X", "cat": "Memset", "name": "Memset (Device)", "pid": 0, "tid": "stream 7", "ts": 1050, "dur": 1,
   "args": {"stream": 7, "bytes": 512}},
  {"ph": "X", "cat": "Kernel", "name": "no_duration_kernel", "ts": 1060}
]})J";

// A new-style (kernel/gpu_memcpy/gpu_memset) trace with fractional microseconds and two steps.
const char* kNewStyle = R"J({"traceEvents": [
  {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#1", "ts": 0, "dur": 100},
  {"ph": "X", "cat": "user_annotation", "name": "ProfilerStep#2", "ts": 100, "dur": 100},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 10, "dur": 1, "args": {"correlation": 1}},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "ts": 90, "dur": 1, "args": {"correlation": 2}},
  {"ph": "X", "cat": "cuda_runtime", "name": "cudaMemcpyAsync", "ts": 150, "dur": 1, "args": {"correlation": 3}},
  {"ph": "X", "cat": "kernel", "name": "k1", "ts": 50.5, "dur": 2.25, "args": {"stream": 7, "correlation": 1, "grid": [1, 1, 1], "block": [32, 1, 1]}},
  {"ph": "X", "cat": "kernel", "name": "k2", "ts": 120.0, "dur": 3.0, "args": {"stream": 7, "correlation": 2, "grid": [2, 1, 1], "block": [64, 1, 1]}},
  {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoH (Device -> Pinned) 2 KB", "ts": 160.0, "dur": 1.5, "args": {"stream": 7, "correlation": 3}},
  {"ph": "X", "cat": "gpu_memset", "name": "Memset (Device)", "ts": 170, "dur": 1, "args": {"stream": 7, "bytes": 8}},
  {"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy DtoD (Device -> Device)", "ts": 180, "dur": 2, "args": {"stream": 8, "bytes": 64}}
]})J";

TEST(KinetoConverter, ReadsOldStyleCategoriesShapesAndGaps) {
  const Workload w = convert_kineto_text(kOldStyle, "old.json");
  ASSERT_EQ(w.ops.size(), 4u);  // the instant event and the kernel without "dur" are skipped
  EXPECT_EQ(count_ops(w, OpKind::kernel), 2u);
  EXPECT_EQ(count_ops(w, OpKind::memcpy), 1u);
  EXPECT_EQ(count_ops(w, OpKind::memset), 1u);
  EXPECT_EQ(w.gpu, "Tesla V100");

  const Operation& copy = w.ops[0];
  EXPECT_EQ(copy.kind, OpKind::memcpy);
  EXPECT_EQ(copy.bytes, 4096u);
  EXPECT_EQ(copy.direction, CopyDirection::h2d);
  EXPECT_EQ(copy.host_memory, HostMemory::pageable);
  EXPECT_EQ(copy.start_ns, 0);
  EXPECT_EQ(copy.duration_ns, 20000);

  const Operation& foo = w.ops[1];
  EXPECT_EQ(foo.kind, OpKind::kernel);
  EXPECT_EQ(w.kernels.at(static_cast<std::size_t>(foo.kernel)).name, "void ns::foo<float, 2>(float*, int)");
  EXPECT_EQ(w.kernels.at(static_cast<std::size_t>(foo.kernel)).entry, "gq_0_foo");
  EXPECT_EQ(foo.grid, (std::array<std::uint32_t, 3>{4, 2, 1}));
  EXPECT_EQ(foo.block, (std::array<std::uint32_t, 3>{128, 1, 1}));
  EXPECT_EQ(foo.shared_bytes, 1024u);
  EXPECT_EQ(foo.start_ns, 30000);
  EXPECT_EQ(foo.idle_gap_ns, 10000);  // the copy ended at 20 us

  const Operation& sgemm = w.ops[2];
  EXPECT_EQ(sgemm.stream, 9);  // from "tid": "stream 9" when args.stream is missing
  EXPECT_EQ(sgemm.idle_gap_ns, 0);  // overlaps foo
  EXPECT_EQ(w.kernels.at(static_cast<std::size_t>(sgemm.kernel)).entry, "gq_1_volta_sgemm_128x64_nn");

  const Operation& memset = w.ops[3];
  EXPECT_EQ(memset.bytes, 512u);
  EXPECT_EQ(memset.start_ns, 50000);
  EXPECT_EQ(memset.idle_gap_ns, 7000);  // sgemm ended at 43 us

  EXPECT_EQ(w.span_ns, 51000);
  EXPECT_EQ(w.busy_ns, 20000 + 13000 + 1000);
  EXPECT_EQ(w.kernel_busy_ns, 13000);
  ASSERT_EQ(w.iterations.size(), 1u);
  EXPECT_EQ(w.iterations[0].name, "ProfilerStep#3");
  EXPECT_EQ(w.iterations[0].ops, 4u);
}

TEST(KinetoConverter, ReadsNewStyleCategoriesAndIterationsByLaunchTime) {
  const Workload w = convert_kineto_text(kNewStyle, "new.json");
  ASSERT_EQ(w.ops.size(), 5u);
  EXPECT_FALSE(w.gpu.has_value());
  EXPECT_EQ(w.ops[0].duration_ns, 2250);
  EXPECT_EQ(w.ops[1].start_ns, 69500);  // 120 - 50.5 us

  ASSERT_EQ(w.iterations.size(), 2u);
  EXPECT_EQ(w.iterations[0].name, "ProfilerStep#1");
  EXPECT_EQ(w.iterations[1].name, "ProfilerStep#2");
  // k2 ran at 120 us, inside step 2's CPU span, but was launched at 90 us: it is step 1's work.
  EXPECT_EQ(w.ops[1].iteration, 0);
  EXPECT_EQ(w.iterations[0].ops, 2u);
  EXPECT_EQ(w.iterations[0].span_ns, 72500);  // 50.5 .. 123 us
  EXPECT_EQ(w.iterations[0].busy_ns, 5250);
  // A replay hands k2 to the device when it was launched, not when it started.
  ASSERT_TRUE(w.ops[1].launch_ns.has_value());
  EXPECT_EQ(*w.ops[1].launch_ns, 39500);  // 90 - 50.5 us
  EXPECT_EQ(submit_offset_ns(w.ops[1]), 39500);

  const Operation& d2h = w.ops[2];
  EXPECT_EQ(d2h.bytes, 2000u);  // from the name
  EXPECT_EQ(d2h.direction, CopyDirection::d2h);
  EXPECT_EQ(d2h.host_memory, HostMemory::pinned);
  EXPECT_EQ(d2h.iteration, 1);
  // No correlation: the memset falls in step 2 by its own start time.
  EXPECT_EQ(w.ops[3].kind, OpKind::memset);
  EXPECT_EQ(w.ops[3].iteration, 1);
  EXPECT_FALSE(w.ops[3].launch_ns.has_value());
  EXPECT_EQ(submit_offset_ns(w.ops[3]), w.ops[3].start_ns);
  EXPECT_EQ(w.ops[4].direction, CopyDirection::d2d);
  EXPECT_EQ(w.ops[4].host_memory, HostMemory::none);
  EXPECT_EQ(w.ops[4].stream, 8);
}

TEST(KinetoConverter, SelectsOneIteration) {
  const Workload all = convert_kineto_text(kNewStyle, "new.json");
  const Workload second = select_iteration(all, 1);
  ASSERT_EQ(second.ops.size(), 3u);
  EXPECT_EQ(second.ops[0].start_ns, 0);
  EXPECT_EQ(second.ops[0].idle_gap_ns, 0);
  EXPECT_EQ(second.ops[1].idle_gap_ns, 8500);  // 160 + 1.5 -> 170 us
  EXPECT_TRUE(second.kernels.empty());
  ASSERT_EQ(second.iterations.size(), 1u);
  EXPECT_EQ(second.iterations[0].name, "ProfilerStep#2");
  EXPECT_EQ(second.span_ns, 22000);
  EXPECT_THROW(select_iteration(all, 2), WorkloadError);
}

TEST(KinetoConverter, WithoutStepsTheWholeTraceIsOneIteration) {
  const Workload w = convert_kineto_text(
      R"J([{"ph": "X", "cat": "kernel", "name": "a", "ts": 5, "dur": 1},
          {"ph": "X", "cat": "kernel", "name": "a", "ts": 9, "dur": 1}])J",
      "bare-array.json");
  ASSERT_EQ(w.iterations.size(), 1u);
  EXPECT_EQ(w.iterations[0].ops, 2u);
  EXPECT_EQ(w.iterations[0].span_ns, 5000);
  EXPECT_EQ(w.kernels.size(), 1u);
  EXPECT_EQ(w.ops[1].kernel, 0);
}

TEST(KinetoConverter, ReadsGzipFiles) {
  const gpuqos::testing::TempDir dir;
  const auto path = dir.path() / "trace.json.gz";
  gzFile gz = gzopen(path.c_str(), "wb");
  ASSERT_NE(gz, nullptr);
  const std::string text = kOldStyle;
  ASSERT_EQ(gzwrite(gz, text.data(), static_cast<unsigned>(text.size())), static_cast<int>(text.size()));
  gzclose(gz);
  const Workload w = convert_kineto_file(path);
  EXPECT_EQ(w.ops.size(), 4u);
  EXPECT_EQ(w.source, path.string());
}

std::string error_of(const std::string& text, const std::string& name = "bad.json") {
  try {
    convert_kineto_text(text, name);
  } catch (const TraceError& e) {
    return e.what();
  }
  return "no error";
}

TEST(KinetoConverter, BadInputNamesFileAndEvent) {
  EXPECT_THAT(error_of("{not json"), HasSubstr("bad.json: not JSON"));
  EXPECT_THAT(error_of(R"J({"foo": 1})J"), HasSubstr("bad.json: not a chrome trace"));
  EXPECT_THAT(error_of(R"J({"traceEvents": [{"ph": "X", "cat": "cpu_op", "name": "a", "ts": 1, "dur": 1}]})J"),
              HasSubstr("bad.json: no GPU operations"));
  const std::string negative = error_of(R"J({"traceEvents": [
      {"ph": "X", "cat": "kernel", "name": "ok", "ts": 1, "dur": 1},
      {"ph": "X", "cat": "kernel", "name": "bad_kernel", "ts": 2, "dur": -3}]})J");
  EXPECT_THAT(negative, HasSubstr("bad.json: traceEvents[1]"));
  EXPECT_THAT(negative, HasSubstr("bad_kernel"));
  EXPECT_THAT(negative, HasSubstr("negative \"dur\""));
  EXPECT_THAT(error_of(R"J({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1e999}]})J"),
              HasSubstr("bad.json: not JSON: [json.exception.out_of_range.406] number overflow"));
  // Python's json module writes NaN as a bare literal, which is not JSON: the message says where.
  EXPECT_THAT(error_of(R"J({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": NaN}]})J"),
              HasSubstr("bad.json: not JSON: [json.exception.parse_error.101] parse error at line 1, column"));
  EXPECT_THAT(error_of(R"J({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": "NaN"}]})J"),
              HasSubstr("\"dur\" is not a number"));
  EXPECT_THAT(error_of(R"J({"traceEvents": [{"ph": "X", "cat": "gpu_memcpy", "name": "Memcpy HtoD", "ts": 1, "dur": 1}]})J"),
              HasSubstr("traceEvents[0] (memcpy 'Memcpy HtoD'): no size"));
  EXPECT_THAT(error_of(R"J({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": 1,
                           "args": {"grid": [0, 1, 1]}}]})J"),
              HasSubstr("args.grid[0] is not a positive integer"));
}

// A value nested 200,000 deep: its message names its kind, where dump() recursed once a level and
// crashed the process (an audit: gpuqos train, eval and gpuqosd on such a line).
TEST(KinetoConverter, ADeeplyNestedValueIsNamedNotPrinted) {
  const std::string deep = std::string(200'000, '[') + std::string(200'000, ']');
  EXPECT_THAT(error_of(R"J({"traceEvents": [{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "dur": )J" + deep + "}]}"),
              HasSubstr("\"dur\" is not a number: an array of 1"));
}

// A device, or more than the limit as read or as inflated, is refused with the file's name: /dev/zero
// and a gzip of a billion spaces grew without end (an audit).
TEST(TextFile, DevicesAndFilesOverTheLimitAreRefused) {
  const gpuqos::testing::TempDir dir;
  const auto error_of_file = [](const std::filesystem::path& path, std::uint64_t limit) -> std::string {
    try {
      (void)read_text_file(path, limit);
    } catch (const FileError& e) {
      return e.what();
    }
    return "no error";
  };
  EXPECT_EQ(error_of_file("/dev/zero", kMaxTextFileBytes), "/dev/zero: is a device, not a file");
  const auto big = dir.write("big.json", std::string(3 << 20, ' '));
  EXPECT_THAT(error_of_file(big, 2 << 20), HasSubstr("big.json: holds more than 2 MiB"));
  EXPECT_EQ(read_text_file(big, 3 << 20).size(), std::size_t{3} << 20) << "at the limit: read";
  const auto bomb = dir.path() / "bomb.json.gz";
  gzFile gz = gzopen(bomb.c_str(), "wb9");
  ASSERT_NE(gz, nullptr);
  const std::string spaces(1 << 20, ' ');
  for (int i = 0; i < 3; ++i) ASSERT_EQ(gzwrite(gz, spaces.data(), static_cast<unsigned>(spaces.size())), 1 << 20);
  gzclose(gz);
  EXPECT_LT(std::filesystem::file_size(bomb), 64u * 1024);
  EXPECT_THAT(error_of_file(bomb, 2 << 20), HasSubstr("bomb.json.gz: inflates to more than 2 MiB"));
}

TEST(KinetoConverter, MissingOrCorruptFilesAreErrors) {
  const gpuqos::testing::TempDir dir;
  EXPECT_THROW(convert_kineto_file(dir.path() / "absent.json"), TraceError);
  const auto corrupt = dir.write("corrupt.json.gz", std::string("\x1f\x8b\x08\x00garbage", 12));
  try {
    convert_kineto_file(corrupt);
    FAIL() << "no error";
  } catch (const TraceError& e) {
    EXPECT_THAT(e.what(), HasSubstr("corrupt.json.gz: corrupt gzip data"));
  }
}

TEST(KinetoNames, CopySizesDirectionsAndHostMemory) {
  EXPECT_EQ(bytes_from_name("Memcpy HtoD 4096 bytes"), 4096u);
  EXPECT_EQ(bytes_from_name("Memcpy DtoD 1.5 MB"), 1500000u);
  EXPECT_EQ(bytes_from_name("Memcpy DtoD (2 KiB)"), 2048u);
  EXPECT_EQ(bytes_from_name("Memcpy HtoD (Pageable -> Device)"), std::nullopt);
  EXPECT_EQ(direction_from_name("Memcpy HtoD (Pinned -> Device)"), CopyDirection::h2d);
  EXPECT_EQ(direction_from_name("Memcpy DtoH (Device -> Pageable)"), CopyDirection::d2h);
  EXPECT_EQ(direction_from_name("Memcpy PtoP (Device -> Device)"), CopyDirection::other);
  EXPECT_EQ(host_memory_from_name("Memcpy DtoH (Device -> Pageable)", CopyDirection::d2h), HostMemory::pageable);
  EXPECT_EQ(host_memory_from_name("Memcpy HtoD", CopyDirection::h2d), HostMemory::unknown);
}

}  // namespace
}  // namespace gpuqos::replay
