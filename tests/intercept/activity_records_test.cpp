// What the profiler reads from each CUPTI activity record (intercept/shim/activity_records.h): the
// records are built here in the installed cupti_activity.h's layouts, as CUPTI writes them.
#include "activity_records.h"

#include <gtest/gtest.h>

namespace gpuqos::intercept {
namespace {

constexpr auto kOurs = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM2;
using What = ActivityRecord::What;

const CUpti_Activity& as_activity(const auto& record) { return reinterpret_cast<const CUpti_Activity&>(record); }

CUpti_ActivityKernel10 kernel(std::uint32_t correlation, std::uint32_t graph_id) {
  CUpti_ActivityKernel10 r{};
  r.kind = CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL;
  r.correlationId = correlation;
  r.graphId = graph_id;
  r.start = 1'000, r.end = 21'000;
  r.name = "spin";
  return r;
}

CUpti_ActivityMemcpy6 copy(std::uint8_t copy_kind, std::uint32_t graph_id = 0) {
  CUpti_ActivityMemcpy6 r{};
  r.kind = CUPTI_ACTIVITY_KIND_MEMCPY;
  r.copyKind = copy_kind;
  r.srcKind = CUPTI_ACTIVITY_MEMORY_KIND_PINNED;
  r.dstKind = CUPTI_ACTIVITY_MEMORY_KIND_DEVICE;
  r.correlationId = 7;
  r.graphId = graph_id;
  r.bytes = 4096;
  r.start = 5'000, r.end = 6'000;
  return r;
}

TEST(ActivityRecords, AKernelOfOurLaunchIsItsTiming) {
  const ActivityRecord read = read_activity(as_activity(kernel(42, 0)), kOurs);
  ASSERT_EQ(read.what, What::timing);
  EXPECT_EQ(read.correlation, 42u);
  EXPECT_EQ(read.timing.kind, ipc::OpKind::kernel);
  EXPECT_EQ(read.timing.start_ns, 1'000u);
  EXPECT_EQ(read.timing.end_ns, 21'000u);
  EXPECT_EQ(read.timing.cupti_name, "spin");
}

// A graph launch's nodes carry its graphId and the launch's correlation id. The shim profiles no
// graph launch, so no external id ever pairs with them: each was kept waiting for one, for good,
// until a CUDA-graph program's nodes filled the table, and then every record that came before its
// pairing was lost.
TEST(ActivityRecords, ANodeOfAGraphLaunchIsSaidToBeOne) {
  EXPECT_EQ(read_activity(as_activity(kernel(42, 3)), kOurs).what, What::graph_node);
  EXPECT_EQ(read_activity(as_activity(copy(CUPTI_ACTIVITY_MEMCPY_KIND_HTOD, 3)), kOurs).what, What::graph_node);
  CUpti_ActivityMemset4 memset{};
  memset.kind = CUPTI_ACTIVITY_KIND_MEMSET;
  memset.correlationId = 9;
  memset.graphId = 3;
  memset.start = 1, memset.end = 2;
  EXPECT_EQ(read_activity(as_activity(memset), kOurs).what, What::graph_node);
  memset.graphId = 0;
  EXPECT_EQ(read_activity(as_activity(memset), kOurs).what, What::timing);
}

TEST(ActivityRecords, ACopyIsTimedByItsDirectionAndAHostToHostOneMakesNoRecord) {
  const ActivityRecord h2d = read_activity(as_activity(copy(CUPTI_ACTIVITY_MEMCPY_KIND_HTOD)), kOurs);
  ASSERT_EQ(h2d.what, What::timing);
  EXPECT_EQ(h2d.timing.direction, ipc::CopyDirection::h2d);
  EXPECT_EQ(h2d.timing.host_memory, ipc::HostMemory::pinned);
  EXPECT_EQ(h2d.timing.bytes, 4096u);
  EXPECT_EQ(read_activity(as_activity(copy(CUPTI_ACTIVITY_MEMCPY_KIND_DTOD)), kOurs).timing.direction,
            ipc::CopyDirection::d2d);
  const ActivityRecord h2h = read_activity(as_activity(copy(CUPTI_ACTIVITY_MEMCPY_KIND_HTOH)), kOurs);
  EXPECT_EQ(h2h.what, What::no_timing);
  EXPECT_EQ(h2h.correlation, 7u) << "so that an op the shim began for it is done with";
}

TEST(ActivityRecords, ARecordWhoseTimesAreIncompleteMakesNoRecord) {
  CUpti_ActivityKernel10 r = kernel(42, 0);
  r.start = 0;
  EXPECT_EQ(read_activity(as_activity(r), kOurs).what, What::no_timing);
  r.start = 30'000;  // after its end
  EXPECT_EQ(read_activity(as_activity(r), kOurs).what, What::no_timing);
}

TEST(ActivityRecords, OnlyOurKindOfExternalIdPairs) {
  CUpti_ActivityExternalCorrelation r{};
  r.kind = CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION;
  r.externalKind = kOurs;
  r.correlationId = 42;
  r.externalId = 1234;
  const ActivityRecord read = read_activity(as_activity(r), kOurs);
  ASSERT_EQ(read.what, What::external);
  EXPECT_EQ(read.correlation, 42u);
  EXPECT_EQ(read.external_id, 1234u);
  r.externalKind = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;  // a framework's
  EXPECT_EQ(read_activity(as_activity(r), kOurs).what, What::other);
}

}  // namespace
}  // namespace gpuqos::intercept
