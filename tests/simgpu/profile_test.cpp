// Tests of the TOML device-profile loader: defaults, inheritance, devices and every error kind.
#include "gpuqos/simgpu/profile.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <string>

#include "gpuqos/testing/temp_dir.h"

namespace gpuqos::simgpu {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test for the profiles it writes, removed afterwards.
class ProfileFileTest : public ::testing::Test {
 protected:
  const gpuqos::testing::TempDir dir_{"profile_test"};
};

void expect_same(const DeviceProfile& a, const DeviceProfile& b) {
  EXPECT_EQ(a.name, b.name);
  EXPECT_EQ(a.sms, b.sms);
  EXPECT_DOUBLE_EQ(a.memory_gib, b.memory_gib);
  EXPECT_EQ(a.compute_mode, b.compute_mode);
  EXPECT_DOUBLE_EQ(a.timeslice_us, b.timeslice_us);
  EXPECT_DOUBLE_EQ(a.h2d_gbps, b.h2d_gbps);
  EXPECT_DOUBLE_EQ(a.d2h_gbps, b.d2h_gbps);
  EXPECT_DOUBLE_EQ(a.d2d_gbps, b.d2d_gbps);
  EXPECT_DOUBLE_EQ(a.pageable_factor, b.pageable_factor);
  EXPECT_DOUBLE_EQ(a.copy_latency_us, b.copy_latency_us);
  EXPECT_DOUBLE_EQ(a.time_scale, b.time_scale);
  EXPECT_EQ(a.cc_major, b.cc_major);
  EXPECT_EQ(a.cc_minor, b.cc_minor);
  EXPECT_EQ(a.clock_khz, b.clock_khz);
  EXPECT_EQ(a.memory_clock_khz, b.memory_clock_khz);
  EXPECT_EQ(a.memory_bus_width_bits, b.memory_bus_width_bits);
  EXPECT_EQ(a.l2_cache_bytes, b.l2_cache_bytes);
}

TEST(ProfileTest, DefaultProfileIsOneH100) {
  const auto devices = default_profile();
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].sms, 132);
  EXPECT_EQ(devices[0].memory_bytes(), 80ull << 30);
  EXPECT_EQ(devices[0].compute_mode, ComputeMode::timeslice);
  EXPECT_EQ(devices[0].cc_major, 9);
  expect_same(devices[0], DeviceProfile{});
}

TEST(ProfileTest, ToStringNamesEveryMode) {
  EXPECT_STREQ(to_string(ComputeMode::fifo), "fifo");
  EXPECT_STREQ(to_string(ComputeMode::timeslice), "timeslice");
  EXPECT_STREQ(to_string(ComputeMode::mps), "mps");
}

TEST(ProfileTest, EmptyTextIsOneDefaultDevice) {
  const auto devices = parse_profile("", "empty.toml");
  ASSERT_EQ(devices.size(), 1u);
  expect_same(devices[0], DeviceProfile{});
}

TEST(ProfileTest, TopLevelKeysWithoutDeviceTablesDescribeOneDevice) {
  const auto devices = parse_profile(
      "name = \"small\"\nsms = 64\nmemory_gib = 40\ncompute_mode = \"mps\"\n"
      "pageable_factor = 1.0\ncopy_latency_us = 0\nl2_cache_bytes = 0\n",
      "one.toml");
  ASSERT_EQ(devices.size(), 1u);
  EXPECT_EQ(devices[0].name, "small");
  EXPECT_EQ(devices[0].sms, 64);
  EXPECT_DOUBLE_EQ(devices[0].memory_gib, 40.0);  // an integer is accepted for a number
  EXPECT_EQ(devices[0].compute_mode, ComputeMode::mps);
  EXPECT_DOUBLE_EQ(devices[0].pageable_factor, 1.0);
  EXPECT_DOUBLE_EQ(devices[0].copy_latency_us, 0.0);
  EXPECT_EQ(devices[0].l2_cache_bytes, 0);
  EXPECT_DOUBLE_EQ(devices[0].h2d_gbps, DeviceProfile{}.h2d_gbps);  // untouched keys keep defaults
}

TEST(ProfileTest, DeviceTablesInheritTopLevelKeysAndOverrideThem) {
  const auto devices = parse_profile(
      "sms = 100\ntime_scale = 2.0\n"
      "[[device]]\nname = \"a\"\n"
      "[[device]]\nname = \"b\"\nsms = 50\ncompute_mode = \"fifo\"\n"
      "[[device]]\nname = \"c\"\ntime_scale = 0.5\n",
      "three.toml");
  ASSERT_EQ(devices.size(), 3u);
  EXPECT_EQ(devices[0].name, "a");
  EXPECT_EQ(devices[0].sms, 100);
  EXPECT_DOUBLE_EQ(devices[0].time_scale, 2.0);
  EXPECT_EQ(devices[0].compute_mode, ComputeMode::timeslice);
  EXPECT_EQ(devices[1].name, "b");
  EXPECT_EQ(devices[1].sms, 50);
  EXPECT_EQ(devices[1].compute_mode, ComputeMode::fifo);
  EXPECT_DOUBLE_EQ(devices[1].time_scale, 2.0);
  EXPECT_EQ(devices[2].name, "c");
  EXPECT_EQ(devices[2].sms, 100);  // b's override does not leak to its siblings
  EXPECT_EQ(devices[2].compute_mode, ComputeMode::timeslice);
  EXPECT_DOUBLE_EQ(devices[2].time_scale, 0.5);
}

TEST(ProfileTest, EveryKeyIsReadFromADeviceTable) {
  const auto devices = parse_profile(
      "[[device]]\nname = \"x\"\nsms = 2\nmemory_gib = 1.5\ncompute_mode = \"fifo\"\n"
      "timeslice_us = 10\nh2d_gbps = 1\nd2h_gbps = 2\nd2d_gbps = 3\npageable_factor = 0.25\n"
      "copy_latency_us = 4\ntime_scale = 5\ncc_major = 8\ncc_minor = 6\nclock_khz = 7\n"
      "memory_clock_khz = 8\nmemory_bus_width_bits = 9\nl2_cache_bytes = 10\n",
      "all.toml");
  ASSERT_EQ(devices.size(), 1u);
  const DeviceProfile& d = devices[0];
  EXPECT_EQ(d.name, "x");
  EXPECT_EQ(d.sms, 2);
  EXPECT_DOUBLE_EQ(d.memory_gib, 1.5);
  EXPECT_EQ(d.compute_mode, ComputeMode::fifo);
  EXPECT_DOUBLE_EQ(d.timeslice_us, 10);
  EXPECT_DOUBLE_EQ(d.h2d_gbps, 1);
  EXPECT_DOUBLE_EQ(d.d2h_gbps, 2);
  EXPECT_DOUBLE_EQ(d.d2d_gbps, 3);
  EXPECT_DOUBLE_EQ(d.pageable_factor, 0.25);
  EXPECT_DOUBLE_EQ(d.copy_latency_us, 4);
  EXPECT_DOUBLE_EQ(d.time_scale, 5);
  EXPECT_EQ(d.cc_major, 8);
  EXPECT_EQ(d.cc_minor, 6);
  EXPECT_EQ(d.clock_khz, 7);
  EXPECT_EQ(d.memory_clock_khz, 8);
  EXPECT_EQ(d.memory_bus_width_bits, 9);
  EXPECT_EQ(d.l2_cache_bytes, 10);
}

TEST(ProfileTest, ShippedH100ProfileEqualsTheDefaults) {
  const auto devices = load_profile_file(fs::path(GPUQOS_SOURCE_DIR) / "simgpu/profiles/h100.toml");
  ASSERT_EQ(devices.size(), 1u);
  expect_same(devices[0], DeviceProfile{});
}

TEST(ProfileTest, ShippedTwoDeviceFifoProfile) {
  const auto devices =
      load_profile_file(fs::path(GPUQOS_SOURCE_DIR) / "simgpu/profiles/h100x2-fifo.toml");
  ASSERT_EQ(devices.size(), 2u);
  for (const DeviceProfile& d : devices) {
    EXPECT_EQ(d.compute_mode, ComputeMode::fifo);
    EXPECT_DOUBLE_EQ(d.copy_latency_us, 2.5);
    EXPECT_EQ(d.sms, 132);
  }
  EXPECT_NE(devices[0].name, devices[1].name);
  EXPECT_DOUBLE_EQ(devices[0].h2d_gbps, 25.0);
  EXPECT_DOUBLE_EQ(devices[1].h2d_gbps, 12.5);
}

TEST_F(ProfileFileTest, LoadsAFile) {
  const auto devices = load_profile_file(dir_.write("p.toml", "sms = 7\n[[device]]\n[[device]]\n"));
  ASSERT_EQ(devices.size(), 2u);
  EXPECT_EQ(devices[0].sms, 7);
  EXPECT_EQ(devices[1].sms, 7);
}

TEST_F(ProfileFileTest, MissingFileNamesThePath) {
  const fs::path path = dir_.path() / "absent.toml";
  try {
    load_profile_file(path);
    FAIL() << "no error for a missing file";
  } catch (const ProfileError& error) {
    EXPECT_NE(std::string(error.what()).find(path.string()), std::string::npos) << error.what();
  }
}

TEST_F(ProfileFileTest, ErrorMessageHasFileLineColumnKeyAndValue) {
  const fs::path path = dir_.write("h100.toml", "# comment\nname = \"x\"\n\nsms = -3\n");
  try {
    load_profile_file(path);
    FAIL() << "no error for sms = -3";
  } catch (const ProfileError& error) {
    EXPECT_EQ(std::string(error.what()),
              path.string() + ":4:7: key 'sms': must be an integer >= 1, got -3");
  }
}

struct BadProfile {
  const char* label;
  const char* text;
  const char* location;  // "line:column" the message must name
  const char* fragment;  // the key and complaint it must name
};

void PrintTo(const BadProfile& bad, std::ostream* out) { *out << bad.label; }

class ProfileErrorTest : public ProfileFileTest, public ::testing::WithParamInterface<BadProfile> {};

TEST_P(ProfileErrorTest, NamesFileLocationAndKey) {
  const BadProfile& bad = GetParam();
  const fs::path path = dir_.write("bad.toml", bad.text);
  try {
    load_profile_file(path);
    FAIL() << "no error for: " << bad.text;
  } catch (const ProfileError& error) {
    const std::string message = error.what();
    EXPECT_NE(message.find(path.string() + ":" + bad.location + ": "), std::string::npos)
        << message;
    EXPECT_NE(message.find(bad.fragment), std::string::npos) << message;
  }
  // The same text parsed from memory names the given source.
  EXPECT_THROW(parse_profile(bad.text, "mem.toml"), ProfileError);
}

INSTANTIATE_TEST_SUITE_P(
    Errors, ProfileErrorTest,
    ::testing::Values(
        BadProfile{"unknown_top_key", "sms = 1\nsmss = 2\n", "2:1", "unknown key 'smss'"},
        BadProfile{"unknown_device_key", "[[device]]\nname = \"a\"\n  colour = 1\n", "3:3",
                   "unknown key 'colour'"},
        BadProfile{"nested_device", "[[device]]\n[[device.device]]\n", "2:10",
                   "unknown key 'device'"},
        BadProfile{"string_for_int", "sms = \"many\"\n", "1:7",
                   "key 'sms': must be an integer >= 1, got 'many'"},
        BadProfile{"float_for_int", "sms = 1.5\n", "1:7",
                   "key 'sms': must be an integer >= 1, got 1.5"},
        BadProfile{"int_overflow", "l2_cache_bytes = 10000000000\n", "1:18",
                   "key 'l2_cache_bytes': must be an integer <="},
        BadProfile{"negative_minor", "cc_minor = -1\n", "1:12",
                   "key 'cc_minor': must be an integer >= 0"},
        BadProfile{"zero_clock", "clock_khz = 0\n", "1:13",
                   "key 'clock_khz': must be an integer >= 1"},
        BadProfile{"zero_memory", "memory_gib = 0\n", "1:14",
                   "key 'memory_gib': must be a number > 0, got 0"},
        BadProfile{"nan_memory", "memory_gib = nan\n", "1:14",
                   "key 'memory_gib': must be a number > 0"},
        BadProfile{"memory_beyond_64_bits", "memory_gib = 1e30\n", "1:14",
                   "key 'memory_gib': must be a number > 0 and <= 17179869183 (2^64 bytes), got 1e+30"},
        BadProfile{"inf_bandwidth", "d2d_gbps = inf\n", "1:12",
                   "key 'd2d_gbps': must be a number > 0"},
        BadProfile{"bool_for_number", "h2d_gbps = true\n", "1:12",
                   "key 'h2d_gbps': must be a number > 0, got true"},
        BadProfile{"negative_bandwidth", "[[device]]\nd2h_gbps = -1\n", "2:12",
                   "key 'd2h_gbps': must be a number > 0"},
        BadProfile{"pageable_above_one", "pageable_factor = 1.5\n", "1:19",
                   "key 'pageable_factor': must be a number > 0 and <= 1"},
        BadProfile{"pageable_zero", "pageable_factor = 0.0\n", "1:19", "key 'pageable_factor'"},
        BadProfile{"zero_time_scale", "time_scale = 0\n", "1:14",
                   "key 'time_scale': must be a number > 0"},
        BadProfile{"zero_timeslice", "timeslice_us = 0.0\n", "1:16",
                   "key 'timeslice_us': must be a number > 0"},
        BadProfile{"negative_copy_latency", "copy_latency_us = -0.5\n", "1:19",
                   "key 'copy_latency_us': must be a number >= 0"},
        BadProfile{"unknown_mode", "compute_mode = \"rr\"\n", "1:16",
                   "key 'compute_mode': must be one of \"fifo\", \"timeslice\", \"mps\", got 'rr'"},
        BadProfile{"empty_name", "name = \"\"\n", "1:8", "key 'name': must be a non-empty string"},
        BadProfile{"table_for_number", "[memory_gib]\nx = 1\n", "1:1",
                   "key 'memory_gib': must be a number > 0, got a table"},
        BadProfile{"device_not_tables", "device = 3\n", "1:10",
                   "key 'device': must be one or more [[device]] tables"},
        BadProfile{"device_empty_array", "device = []\n", "1:10", "key 'device'"},
        BadProfile{"syntax_error", "sms = 1\nname = \n", "2:8", ""},
        BadProfile{"duplicate_key", "sms = 1\nsms = 2\n", "2:7",
                   "cannot redefine existing integer 'sms'"}),
    [](const ::testing::TestParamInfo<BadProfile>& info) { return std::string(info.param.label); });

}  // namespace
}  // namespace gpuqos::simgpu
