// options_from_config: what a parsed config file means to gpuqosd's policy.
#include "gpuqos/scheduler/daemon_config.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "gpuqos/config/config.h"
#include "gpuqos/config/load.h"
#include "gpuqos/testing/temp_dir.h"

namespace gpuqos::scheduler {
namespace {

BaymaxOptions baymax_of(const config::Config& config) {
  const auto options = options_from_config(config, DaemonOptions{});
  EXPECT_TRUE(options) << options.error();
  return options ? options.value().policy.baymax : BaymaxOptions{};
}

TEST(OptionsFromConfig, BaymaxTimesAreInNanosecondsAndItsSwitchesCarryOver) {
  config::Config config;
  config.policy.name = config::PolicyName::baymax;
  config.policy.baymax.be_backlog_bound_ms = 2.5;
  config.policy.baymax.timeslice_ms = 1.5;
  config.policy.baymax.bound_by_slices = true;
  config.policy.baymax.idle_bound_factor = 4;
  const BaymaxOptions baymax = baymax_of(config);
  EXPECT_EQ(baymax.be_backlog_bound_ns, 2'500'000);
  EXPECT_EQ(baymax.timeslice_ns, 1'500'000);
  EXPECT_TRUE(baymax.bound_by_slices);
  EXPECT_EQ(baymax.idle_bound_factor, 4.0);
}

// timeslice_ms by device: those devices' slices, the default for the others.
TEST(OptionsFromConfig, ADeviceMayHaveATimeSliceOfItsOwn) {
  config::Config config;
  config.policy.name = config::PolicyName::baymax;
  config.policy.baymax.timeslice_ms = 2;
  config.policy.baymax.device_timeslice_ms = {{1, 0.5}, {63, 8}};
  const BaymaxOptions baymax = baymax_of(config);
  EXPECT_EQ(baymax.timeslice(0), 2'000'000);
  EXPECT_EQ(baymax.timeslice(1), 500'000);
  EXPECT_EQ(baymax.timeslice(2), 2'000'000);
  EXPECT_EQ(baymax.timeslice(63), 8'000'000);
}

// preemptive_device = true is every device, a list only its ordinals, false none.
TEST(OptionsFromConfig, PreemptiveDevicesAreEveryDeviceOrTheListedOnes) {
  config::Config config;
  config.policy.name = config::PolicyName::baymax;
  EXPECT_EQ(baymax_of(config).preemptive_devices, 0u);
  EXPECT_FALSE(baymax_of(config).preemptive(0));
  config.policy.baymax.preemptive_device = true;
  EXPECT_TRUE(baymax_of(config).preemptive(0));
  EXPECT_TRUE(baymax_of(config).preemptive(63));
  config.policy.baymax.preemptive_device = false;
  config.policy.baymax.preemptive_ordinals = {1, 63};
  const BaymaxOptions listed = baymax_of(config);
  EXPECT_FALSE(listed.preemptive(0));
  EXPECT_TRUE(listed.preemptive(1));
  EXPECT_FALSE(listed.preemptive(2));
  EXPECT_TRUE(listed.preemptive(63));
  EXPECT_FALSE(listed.preemptive(64)) << "beyond what the protocol can name";
}

// "none" is a valid name (the benchmark's baseline: no daemon) that gpuqosd cannot run; its
// refusal names the file, line and column as every config error does.
TEST(OptionsFromConfig, PolicyNoneIsRefusedAtItsPlaceInTheFile) {
  const auto loaded = config::parse_config("[policy]\nname = \"none\"\n", "/etc/gpuqos/gpuqos.toml");
  ASSERT_TRUE(loaded) << loaded.error();
  const auto options = options_from_config(loaded.value(), DaemonOptions{});
  ASSERT_FALSE(options);
  EXPECT_EQ(options.error(),
            "/etc/gpuqos/gpuqos.toml:2:8: policy.name: \"none\" means running without gpuqosd (stop the daemon instead)");
}

// A review: gpuqosd kept "link/../c.toml" as "c.toml" beside the link, lexically, while the kernel
// had read real/c.toml (link -> real/sub): status named another file, and SIGHUP reloaded it. The
// path is kept as given (made absolute), so each reload reads what the kernel resolves then: the
// same file, or, after a deployment repoints a link on the way, the new one.
TEST(ConfigPathToKeep, IsTheGivenPathMadeAbsoluteSoEachReloadResolvesItAgain) {
  namespace fs = std::filesystem;
  const testing::TempDir dir;
  const fs::path base = fs::canonical(dir.path());
  fs::create_directories(base / "real" / "sub");
  fs::create_directories(base / "v2" / "sub");
  fs::create_directory_symlink(base / "real" / "sub", base / "link");
  { std::ofstream(base / "real" / "c.toml") << "first\n"; }
  { std::ofstream(base / "v2" / "c.toml") << "second\n"; }
  { std::ofstream(base / "c.toml") << "beside the link\n"; }
  const std::string kept = config_path_to_keep((base / "link" / ".." / "c.toml").string());
  const auto first_line = [](const std::string& path) {
    std::string line;
    std::ifstream in(path);
    std::getline(in, line);
    return line;
  };
  EXPECT_EQ(first_line(kept), "first") << kept;
  fs::remove(base / "link");
  fs::create_directory_symlink(base / "v2" / "sub", base / "link");  // repointed
  EXPECT_EQ(first_line(kept), "second") << kept;
  const fs::path here = fs::current_path();
  fs::current_path(base);
  const std::string relative = config_path_to_keep("link/../c.toml");
  fs::current_path(here);
  EXPECT_EQ(relative, (base / "link" / ".." / "c.toml").string());
}

}  // namespace
}  // namespace gpuqos::scheduler
