// Workload bookkeeping (gaps, busy time) and the JSON round trip, including its error messages.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cstdlib>

#include "gpuqos/replay/kernel_names.h"
#include "gpuqos/replay/workload.h"
#include "gpuqos/testing/temp_dir.h"

namespace gpuqos::replay {
namespace {

using ::testing::HasSubstr;

Workload sample() {
  Workload w;
  w.source = "sample.json";
  w.gpu = "Test GPU";
  w.kernels = {{"void a::b<int>(int)", "gq_0_b"}, {"c", "gq_1_c"}};
  Operation k0;
  k0.kernel = 0;
  k0.grid = {3, 2, 1};
  k0.block = {64, 2, 1};
  k0.shared_bytes = 4096;
  k0.stream = 7;
  k0.start_ns = 1'000'000;  // absolute: finalize() moves the first op to 0
  k0.duration_ns = 5000;
  Operation copy;
  copy.kind = OpKind::memcpy;
  copy.stream = 9;
  copy.bytes = 1 << 20;
  copy.direction = CopyDirection::d2h;
  copy.host_memory = HostMemory::pageable;
  copy.start_ns = 1'002'000;
  copy.duration_ns = 10000;
  Operation set;
  set.kind = OpKind::memset;
  set.stream = 7;
  set.bytes = 256;
  set.start_ns = 1'020'000;
  set.duration_ns = 1000;
  Operation k1 = k0;
  k1.kernel = 1;
  k1.start_ns = 1'030'000;
  w.ops = {k1, set, copy, k0};  // out of order on purpose
  finalize(w);
  return w;
}

TEST(Workload, FinalizeSortsAndComputesGapsAndBusyTime) {
  const Workload w = sample();
  ASSERT_EQ(w.ops.size(), 4u);
  EXPECT_EQ(w.ops[0].start_ns, 0);
  EXPECT_EQ(w.ops[1].kind, OpKind::memcpy);
  EXPECT_EQ(w.ops[1].start_ns, 2000);
  EXPECT_EQ(w.ops[1].idle_gap_ns, 0);
  EXPECT_EQ(w.ops[2].idle_gap_ns, 20000 - 12000);
  EXPECT_EQ(w.ops[3].idle_gap_ns, 30000 - 21000);
  EXPECT_EQ(w.span_ns, 35000);
  EXPECT_EQ(w.busy_ns, 12000 + 1000 + 5000);
  EXPECT_EQ(w.kernel_busy_ns, 10000);
  ASSERT_EQ(w.iterations.size(), 1u);
  EXPECT_EQ(w.iterations[0].span_ns, 35000);
  EXPECT_EQ(w.iterations[0].busy_ns, w.busy_ns);
  EXPECT_THAT(summary(w), HasSubstr("2 kernels (2 names), 1 copies, 1 memsets"));
}

// A gzipped workload is read as the traces are (it was "not JSON ... last read: '<U+001F>'").
TEST(Workload, AGzippedWorkloadIsRead) {
  const Workload w = sample();
  const gpuqos::testing::TempDir dir;
  const auto plain = dir.path() / "w.json";
  save_workload(w, plain);
  const std::string packed = (dir.path() / "w.json.gz").string();
  ASSERT_EQ(std::system(("gzip -c '" + plain.string() + "' > '" + packed + "'").c_str()), 0);
  EXPECT_EQ(to_json_text(load_workload(packed)), to_json_text(w));
  EXPECT_THROW(load_workload(dir.path() / "missing.json"), WorkloadError);
}

TEST(Workload, JsonRoundTripKeepsEverything) {
  Workload w = sample();
  w.ops.front().launch_ns = -1500;  // launched before the workload's first op started
  const gpuqos::testing::TempDir dir;
  save_workload(w, dir.path() / "w.json");
  const Workload back = load_workload(dir.path() / "w.json");
  EXPECT_EQ(to_json_text(back), to_json_text(w));
  EXPECT_EQ(back.gpu, w.gpu);
  ASSERT_EQ(back.ops.size(), w.ops.size());
  for (std::size_t i = 0; i < w.ops.size(); ++i) {
    const Operation& a = w.ops[i];
    const Operation& b = back.ops[i];
    EXPECT_EQ(a.kind, b.kind);
    EXPECT_EQ(a.stream, b.stream);
    EXPECT_EQ(a.kernel, b.kernel);
    EXPECT_EQ(a.grid, b.grid);
    EXPECT_EQ(a.block, b.block);
    EXPECT_EQ(a.shared_bytes, b.shared_bytes);
    EXPECT_EQ(a.bytes, b.bytes);
    EXPECT_EQ(a.direction, b.direction);
    EXPECT_EQ(a.host_memory, b.host_memory);
    EXPECT_EQ(a.duration_ns, b.duration_ns);
    EXPECT_EQ(a.start_ns, b.start_ns);
    EXPECT_EQ(a.idle_gap_ns, b.idle_gap_ns);
    EXPECT_EQ(a.iteration, b.iteration);
    EXPECT_EQ(a.launch_ns, b.launch_ns);
  }
  EXPECT_EQ(back.kernels[0].name, "void a::b<int>(int)");
}

std::string load_error(const std::string& text) {
  try {
    from_json_text(text, "w.json");
  } catch (const WorkloadError& e) {
    return e.what();
  }
  return "no error";
}

TEST(Workload, BadJsonNamesFileAndField) {
  EXPECT_THAT(load_error("[1"), HasSubstr("w.json: not JSON"));
  EXPECT_THAT(load_error(R"({"format": "other"})"), HasSubstr("w.json: header"));
  std::string text = to_json_text(sample());
  const std::string good = "\"kind\": \"memset\"";
  text.replace(text.find(good), good.size(), "\"kind\": \"teleport\"");
  EXPECT_THAT(load_error(text), HasSubstr("w.json: ops[2]: unknown kind 'teleport'"));
}

TEST(KernelNames, EntryNamesAreShortValidAndStable) {
  EXPECT_EQ(base_function_name("void at::native::(anonymous namespace)::indexSelectLargeIndex<c10::BFloat16, long>"
                               "(at::cuda::detail::TensorInfo<c10::BFloat16, unsigned int>, long)"),
            "indexSelectLargeIndex");
  EXPECT_EQ(base_function_name("cask_cudnn::computeOffsetsKernel(cask_cudnn::ComputeOffsetsParams)"),
            "computeOffsetsKernel");
  EXPECT_EQ(base_function_name("volta_sgemm_128x64_nn"), "volta_sgemm_128x64_nn");
  EXPECT_EQ(ptx_entry_name(3, "void foo<4>(int)"), "gq_3_foo");
  EXPECT_EQ(ptx_entry_name(3, "void foo<4>(int)"), ptx_entry_name(3, "void foo<4>(int)"));
  EXPECT_EQ(ptx_entry_name(0, "<<<>>>"), "gq_0_kernel");
  const std::string long_name = ptx_entry_name(12, std::string(200, 'x'));
  EXPECT_LE(long_name.size(), 6u + 48u);
  for (const char* odd : {"void operator()<int>(int)", "(anonymous namespace)::k$1", "  ", "a b c", "ünïcode"}) {
    const std::string entry = ptx_entry_name(7, odd);
    EXPECT_TRUE(is_valid_ptx_identifier(entry)) << entry;
    EXPECT_EQ(entry.rfind("gq_7_", 0), 0u) << entry;
  }
}

}  // namespace
}  // namespace gpuqos::replay
