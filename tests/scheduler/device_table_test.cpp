// DeviceTable: each process's device ordinals renumbered to the node's GPUs by UUID, and the
// per-device settings that follow them (by_device_number).
#include "gpuqos/scheduler/device_table.h"

#include <gtest/gtest.h>

#include "gpuqos/scheduler/daemon_config.h"

namespace gpuqos::scheduler {
namespace {

DeviceTable::Uuid gpu(std::uint8_t n) {
  DeviceTable::Uuid uuid{};
  uuid[0] = 0xa0;
  uuid[15] = n;
  return uuid;
}
constexpr DeviceTable::Uuid kNone{};

TEST(DeviceTable, JobsThatNumberTheirGpusAlikeKeepTheirOrdinals) {
  DeviceTable table;
  EXPECT_EQ(table.renumber(1, 0, gpu(0)).device, 0u);
  EXPECT_EQ(table.renumber(1, 1, gpu(1)).device, 1u);
  EXPECT_EQ(table.renumber(2, 1, gpu(1)).device, 1u);
  EXPECT_EQ(table.renumber(2, 0, gpu(0)).device, 0u);
  EXPECT_FALSE(table.renumbered());
  ASSERT_EQ(table.devices().size(), 2u);
  EXPECT_EQ(table.devices()[0].clients, 2u);
}

// The Slurm/Kubernetes case: every job calls its own GPU device 0.
TEST(DeviceTable, JobsOnDifferentGpusAreOnDifferentDevicesWhateverTheyCallThem) {
  DeviceTable table;
  const auto first = table.renumber(1, 0, gpu(7));
  EXPECT_EQ(first.device, 0u);
  EXPECT_TRUE(first.added);
  const auto second = table.renumber(2, 0, gpu(3));
  EXPECT_EQ(second.device, 1u) << "device 0 is the other GPU's";
  EXPECT_TRUE(second.added);
  EXPECT_EQ(table.renumber(3, 0, gpu(3)).device, 1u) << "a third job on the second GPU joins it";
  EXPECT_FALSE(table.renumber(3, 0, gpu(3)).added);
  // A job that sees both (no CUDA_VISIBLE_DEVICES) finds them where the others put them.
  EXPECT_EQ(table.renumber(4, 3, gpu(3)).device, 1u);
  EXPECT_EQ(table.renumber(4, 7, gpu(7)).device, 0u);
  EXPECT_TRUE(table.renumbered());
  EXPECT_EQ(table.config_ordinal(1), 0u) << "the settings of the ordinal its first job called it";
  EXPECT_EQ(table.config_ordinal(0), 0u);
  EXPECT_EQ(table.config_ordinal(5), 5u) << "an unknown number is its own ordinal";
  EXPECT_EQ(DeviceTable::uuid_text(table.devices()[1].uuid), "GPU-a0000000-0000-0000-0000-000000000003");
}

TEST(DeviceTable, AnOpThatSaysNoUuidIsOnWhatItsClientSaidForItsOrdinal) {
  DeviceTable table;
  table.renumber(1, 0, gpu(1));
  EXPECT_EQ(table.renumber(2, 0, gpu(2)).device, 1u);
  EXPECT_EQ(table.renumber(2, 0, kNone).device, 1u) << "a query mark from a thread with no context";
  EXPECT_EQ(table.renumber(2, 5, kNone).device, 5u) << "never said: the ordinal, as an older shim's";
  EXPECT_EQ(table.renumber(9, 0, kNone).device, 0u);
  EXPECT_EQ(table.devices().size(), 2u) << "nothing added for ops that say nothing";
}

TEST(DeviceTable, AClientThatChangesAnOrdinalsUuidIsBroken) {
  DeviceTable table;
  table.renumber(1, 0, gpu(1));
  const auto changed = table.renumber(1, 0, gpu(2));
  EXPECT_EQ(changed.error, "device 0 was GPU-a0000000-0000-0000-0000-000000000001, now it says "
                           "GPU-a0000000-0000-0000-0000-000000000002");
  EXPECT_EQ(table.devices().size(), 1u);
}

TEST(DeviceTable, AFullTableReusesTheNumberOfAGpuNoClientUses) {
  DeviceTable table;
  for (std::uint8_t n = 0; n < ipc::kMaxDevices; ++n) {
    EXPECT_EQ(table.renumber(n, 0, gpu(n), true, /*uid=*/n).device, n) << "each of another user";
  }
  const auto full = table.renumber(100, 2, gpu(200));
  EXPECT_EQ(full.device, 2u) << "no number free: its ordinal";
  EXPECT_FALSE(full.added);
  EXPECT_NE(full.note.find("64 GPUs in use"), std::string::npos) << full.note;
  EXPECT_TRUE(table.renumber(101, 2, gpu(200)).note.empty()) << "said once for that GPU";
  EXPECT_NE(table.renumber(101, 3, gpu(201)).note.find("64 GPUs in use"), std::string::npos)
      << "and once for another: one GPU's line does not use up another's";
  table.client_gone(5);
  const auto reused = table.renumber(100, 2, gpu(200));
  EXPECT_EQ(reused.device, 5u) << "GPU 5's only client left";
  EXPECT_TRUE(reused.added);
  EXPECT_NE(reused.note.find("which no job uses"), std::string::npos) << reused.note;
  EXPECT_EQ(table.renumber(102, 1, gpu(5)).device, 1u) << "GPU 5 again, every number in use: by its ordinal";
}

// One user's processes together name at most kMaxGpusPerUser GPUs: an audit filled all 64 numbers
// with made-up UUIDs from four connections of one user, each within kMaxGpusPerClient. GPUs already
// in the table (another user's, or this user's own) cost nothing more.
TEST(DeviceTable, OneUsersClientsTogetherNameAtMostItsShareOfGpus) {
  DeviceTable table;
  constexpr std::uint32_t kUser = 1000;
  for (std::uint8_t n = 0; n < DeviceTable::kMaxGpusPerUser; ++n) {
    EXPECT_TRUE(table.renumber(1 + n / 8, n % 8, gpu(n), true, kUser).error.empty()) << int{n};
  }
  const auto over = table.renumber(3, 0, gpu(100), true, kUser);
  EXPECT_EQ(over.error, "its user's processes name more than 16 GPUs");
  EXPECT_EQ(table.devices().size(), DeviceTable::kMaxGpusPerUser);
  EXPECT_TRUE(table.renumber(3, 0, gpu(2), true, kUser).error.empty()) << "a GPU its user already names";
  EXPECT_TRUE(table.renumber(4, 0, gpu(100), true, kUser + 1).error.empty()) << "another user's";
  EXPECT_TRUE(table.renumber(3, 1, gpu(100), true, kUser).error.empty()) << "now in the table";
  table.client_gone(1);
  EXPECT_TRUE(table.renumber(5, 0, gpu(101), true, kUser).error.empty()) << "client 1's eight GPUs are not named now";
}

TEST(DeviceTable, AGoneClientsGpusKeepTheirNumbers) {
  DeviceTable table;
  table.renumber(1, 0, gpu(1));
  table.client_gone(1);
  ASSERT_EQ(table.devices().size(), 1u);
  EXPECT_EQ(table.devices()[0].clients, 0u);
  EXPECT_EQ(table.renumber(2, 0, gpu(2)).device, 1u) << "number 0 stays GPU 1's while numbers are free";
  EXPECT_EQ(table.renumber(3, 0, gpu(1)).device, 0u);
}

TEST(DeviceTable, AClientNamingMoreGpusThanAProcessSeesIsBroken) {
  DeviceTable table;
  for (std::uint32_t n = 0; n < DeviceTable::kMaxGpusPerClient; ++n) {
    EXPECT_TRUE(table.renumber(1, n, gpu(static_cast<std::uint8_t>(n))).error.empty());
  }
  EXPECT_EQ(table.renumber(1, 16, gpu(16)).error, "it names more than 16 GPUs");
  EXPECT_EQ(table.renumber(1, 3, gpu(3)).device, 3u) << "those it named before still are";
}

// A shim older than 1.7 says no UUID: its ops go by ordinal, which may be another GPU's number, and
// it is told once (not for marks, which a thread with no context sends without one).
TEST(DeviceTable, AClientWhoseGpuOpsSayNoUuidIsToldOnce) {
  DeviceTable table;
  EXPECT_TRUE(table.renumber(1, 0, kNone).note.empty()) << "no GPU known: nothing it could be mistaken for";
  table.renumber(2, 0, gpu(4));
  EXPECT_TRUE(table.renumber(3, 0, kNone, /*work=*/false).note.empty()) << "a mark";
  const auto told = table.renumber(3, 0, kNone);
  EXPECT_EQ(told.device, 0u);
  EXPECT_NE(told.note.find("its GPU ops say no device UUID"), std::string::npos) << told.note;
  EXPECT_TRUE(table.renumber(3, 1, kNone).note.empty()) << "once";
  EXPECT_TRUE(table.renumber(2, 1, kNone).note.empty()) << "a client that says UUIDs has its marks say none";
}

// Once no client uses a GPU, the next job's ordinal for it picks its settings.
TEST(DeviceTable, AnUnusedGpuTakesTheSettingsOfItsNextJobsOrdinal) {
  DeviceTable table;
  table.renumber(1, 0, gpu(0));
  const auto second = table.renumber(2, 0, gpu(1));
  EXPECT_TRUE(second.settings_moved) << "number 1, settings of ordinal 0";
  EXPECT_EQ(table.config_ordinal(1), 0u);
  EXPECT_FALSE(table.renumber(3, 1, gpu(1)).settings_moved) << "in use: its first job's ordinal stays";
  table.client_gone(2);
  table.client_gone(3);
  const auto next = table.renumber(4, 1, gpu(1));
  EXPECT_TRUE(next.settings_moved);
  EXPECT_EQ(table.config_ordinal(1), 1u);
  EXPECT_FALSE(table.renumbered());
}

// [policy.baymax] gives preemptive_device and timeslice_ms by ordinal: a renumbered GPU takes those
// of the ordinal its first job called it.
TEST(DeviceTable, PerDeviceSettingsFollowTheGpuToItsNumber) {
  PolicyOptions options;
  options.baymax.preemptive_devices = ipc::device_mask(std::vector<std::uint32_t>{0});
  options.baymax.device_timeslice_ns = {{0, 8'000'000}};
  DeviceTable table;
  table.renumber(1, 0, gpu(0));
  EXPECT_EQ(by_device_number(options, table).baymax.preemptive_devices, options.baymax.preemptive_devices)
      << "nothing renumbered";
  table.renumber(2, 0, gpu(1));  // number 1, settings of ordinal 0
  table.renumber(3, 1, gpu(2));  // number 2, settings of ordinal 1
  const BaymaxOptions numbered = by_device_number(options, table).baymax;
  EXPECT_TRUE(numbered.preemptive(0));
  EXPECT_TRUE(numbered.preemptive(1));
  EXPECT_FALSE(numbered.preemptive(2));
  EXPECT_EQ(numbered.timeslice(1), 8'000'000);
  EXPECT_EQ(numbered.timeslice(2), options.baymax.timeslice_ns);
  EXPECT_TRUE(device_settings_differ(options.baymax, gpu(1), 0, 1));
  EXPECT_FALSE(device_settings_differ(options.baymax, gpu(1), 1, 2));
  options.baymax.preemptive_devices = ipc::kAllDevices;
  EXPECT_EQ(by_device_number(options, table).baymax.preemptive_devices, ipc::kAllDevices);
}

// Under CUDA_VISIBLE_DEVICES every job may call its GPU device 0, so an ordinal cannot name one GPU's
// settings: a UUID (or a prefix of one) can, whatever its jobs call it, and wins over the ordinals'.
TEST(DeviceTable, AGpuNamedByUuidHasItsSettingsWhateverItsJobsCallIt) {
  PolicyOptions options;
  options.baymax.preemptive_devices = ipc::device_mask(std::vector<std::uint32_t>{1});
  options.baymax.timeslice_ns = 2'000'000;
  options.baymax.preemptive_uuids = {"a0000000-0000-0000-0000-00000000000"};  // gpu(0) to gpu(15)
  options.baymax.uuid_timeslice_ns = {{"a0", 3'000'000}, {"a0000000-0000-0000-0000-000000000002", 1'000'000}};
  DeviceTable table;
  table.renumber(1, 0, gpu(2));   // number 0
  table.renumber(2, 0, gpu(20));  // number 1, ordinal 0's settings: not preemptive by ordinal
  const BaymaxOptions numbered = by_device_number(options, table).baymax;
  EXPECT_TRUE(numbered.preemptive(0)) << "its UUID is listed";
  EXPECT_EQ(numbered.timeslice(0), 1'000'000) << "the longest prefix that names it";
  EXPECT_FALSE(numbered.preemptive(1)) << "0x14 is not under the listed prefix, and ordinal 0 is not preemptive";
  EXPECT_EQ(numbered.timeslice(1), 3'000'000);
  EXPECT_FALSE(numbered.preemptive(2)) << "no GPU there: ordinal 2's settings";
  EXPECT_FALSE(device_settings_differ(options.baymax, gpu(2), 0, 1)) << "named by UUID: no ordinal's settings matter";
  EXPECT_TRUE(device_settings_differ(options.baymax, gpu(20), 0, 1)) << "preemptive as ordinal 1 only";
}

}  // namespace
}  // namespace gpuqos::scheduler
