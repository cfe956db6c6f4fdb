// The converter on the real traces of /work/shared/traces: the figures SOURCES.md states.
#include <gtest/gtest.h>

#include <filesystem>
#include <set>

#include "gpuqos/replay/kernel_names.h"
#include "gpuqos/replay/kineto.h"
#include "gpuqos/replay/replay_module.h"

namespace gpuqos::replay {
namespace {

const std::filesystem::path kTraces = std::filesystem::path(GPUQOS_SOURCE_DIR) / ".." / "shared" / "traces";

Workload load(const char* name) {
  const auto path = kTraces / name;
  if (!std::filesystem::exists(path)) throw std::runtime_error("missing trace " + path.string());
  return convert_kineto_file(path);
}

void expect_valid_entries(const Workload& w) {
  std::set<std::string> seen;
  for (const KernelInfo& k : w.kernels) {
    EXPECT_TRUE(is_valid_ptx_identifier(k.entry)) << k.entry;
    EXPECT_TRUE(seen.insert(k.entry).second) << "duplicate " << k.entry;
  }
}

TEST(RealTraces, BertSmallInferenceQuery) {
  const Workload w = load("tracelens_h100_bert_small_bs1_infer.json.gz");
  EXPECT_EQ(count_ops(w, OpKind::kernel), 60u);
  EXPECT_EQ(w.kernels.size(), 11u);
  EXPECT_EQ(count_ops(w, OpKind::memcpy), 1u);
  EXPECT_EQ(count_ops(w, OpKind::memset), 0u);
  EXPECT_EQ(w.gpu, "NVIDIA H100 80GB HBM3");
  EXPECT_NEAR(w.busy_ns, 310'000, 5'000);    // "busy 0.31 ms"
  EXPECT_NEAR(w.span_ns, 3'900'000, 20'000);  // "of a 3.9 ms step"
  std::int64_t shortest = w.ops[0].duration_ns;
  std::int64_t longest = 0;
  for (const Operation& op : w.ops) {
    if (op.kind != OpKind::kernel) continue;
    shortest = std::min(shortest, op.duration_ns);
    longest = std::max(longest, op.duration_ns);
  }
  EXPECT_GE(shortest, 1'500);  // "1.6-41 us each"
  EXPECT_LE(longest, 41'500);
  ASSERT_EQ(w.iterations.size(), 1u);
  EXPECT_EQ(w.iterations[0].name, "ProfilerStep#6");
  const Operation& copy = *std::find_if(w.ops.begin(), w.ops.end(), [](const Operation& op) { return op.kind == OpKind::memcpy; });
  EXPECT_EQ(copy.direction, CopyDirection::d2h);
  EXPECT_EQ(copy.host_memory, HostMemory::pinned);
  expect_valid_entries(w);
}

TEST(RealTraces, ResNet50Training) {
  const Workload w = load("kineto_resnet50_v100_train.json.gz");
  EXPECT_EQ(count_ops(w, OpKind::kernel), 8772u);
  EXPECT_EQ(w.kernels.size(), 67u);
  EXPECT_EQ(count_ops(w, OpKind::memcpy), 12u);
  EXPECT_EQ(count_ops(w, OpKind::memset), 312u);
  EXPECT_EQ(w.gpu, "Tesla V100-DGXS-32GB");
  ASSERT_EQ(w.iterations.size(), 6u);  // ProfilerStep#5..#10
  for (const Iteration& it : w.iterations) {
    EXPECT_EQ(it.ops, 1516u) << it.name;
    EXPECT_NEAR(it.span_ns, 118'000'000, 2'000'000) << it.name;
  }
  for (const Operation& op : w.ops) {
    if (op.kind == OpKind::memcpy) {
      EXPECT_EQ(op.direction, CopyDirection::h2d);
      EXPECT_EQ(op.host_memory, HostMemory::pageable);
    }
  }
  const Workload one = select_iteration(w, 1);
  EXPECT_EQ(one.ops.size(), 1516u);
  EXPECT_EQ(one.iterations[0].name, "ProfilerStep#6");
  EXPECT_FALSE(generate_ptx(one).empty());
  expect_valid_entries(w);
}

TEST(RealTraces, RecsysTrainingCopies) {
  const Workload w = load("hta_a100_recsys_train_rank0.json.gz");
  EXPECT_EQ(count_ops(w, OpKind::kernel), 6080u);
  EXPECT_EQ(w.kernels.size(), 85u);
  EXPECT_EQ(count_ops(w, OpKind::memset), 277u);
  std::map<std::pair<CopyDirection, HostMemory>, int> copies;
  for (const Operation& op : w.ops) {
    if (op.kind == OpKind::memcpy) ++copies[{op.direction, op.host_memory}];
  }
  EXPECT_EQ(copies[std::pair(CopyDirection::h2d, HostMemory::pinned)] + copies[std::pair(CopyDirection::h2d, HostMemory::pageable)], 80);
  EXPECT_EQ(copies[std::pair(CopyDirection::d2h, HostMemory::pageable)] + copies[std::pair(CopyDirection::d2h, HostMemory::pinned)], 30);
  EXPECT_EQ(copies[std::pair(CopyDirection::d2d, HostMemory::none)], 1280);
  std::set<std::int64_t> streams;
  for (const Operation& op : w.ops) streams.insert(op.stream);
  EXPECT_GT(streams.size(), 1u);
  EXPECT_EQ(w.iterations.size(), 5u);
  expect_valid_entries(w);
}

}  // namespace
}  // namespace gpuqos::replay
