// Tests of config/: defaults, a full file into structs, the shipped example, the access rule, and a
// table of malformed inputs whose every message is checked (file:line:column, key and reason).
#include "gpuqos/config/config.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "gpuqos/config/load.h"
#include "gpuqos/config/summary.h"
#include "gpuqos/testing/temp_dir.h"

namespace gpuqos::config {
namespace {

Config parse_ok(const std::string& text) {
  auto result = parse_config(text, "t.toml");
  EXPECT_TRUE(result.ok()) << result.error();
  return result.ok() ? result.value() : Config{};
}

TEST(ConfigDefaults, EmptyFileIsTheDefaultConfig) {
  const Config config = parse_ok("");
  EXPECT_EQ(config, default_config());
  EXPECT_EQ(config.daemon.socket_path, "/run/gpuqos/gpuqosd.sock");
  EXPECT_EQ(config.daemon.log_level, LogLevel::info);
  EXPECT_FALSE(config.daemon.metrics_listen.enabled());
  EXPECT_EQ(config.daemon.profile_store, "");
  EXPECT_TRUE(config.devices.ordinals.empty());
  EXPECT_EQ(config.policy.name, PolicyName::baymax);
  EXPECT_EQ(config.policy.baymax.safety_margin_ms, 1.0);
  EXPECT_EQ(config.policy.baymax.be_backlog_bound_ms, 5.0);
  EXPECT_EQ(config.policy.baymax.max_be_transfers, 1u);
  EXPECT_EQ(config.policy.baymax.copy_chunk_bytes, 4u << 20);
  EXPECT_FALSE(config.policy.baymax.adaptation);
  EXPECT_EQ(config.policy.fifo.max_outstanding, 0u);
  EXPECT_TRUE(config.jobs.empty());
  EXPECT_TRUE(config.access.anyone_may_run_high);
}

TEST(ConfigDefaults, EmptySectionsKeepDefaults) {
  EXPECT_EQ(parse_ok("[daemon]\n[devices]\n[policy]\n[policy.baymax]\n[policy.fifo]\n[access]\n"), default_config());
}

constexpr const char* kFullFile = R"(
[daemon]
socket = "/tmp/gpuqos/d.sock"
log_level = "debug"
metrics_listen = "[::1]:9500"
profile_store = "/var/lib/gpuqos/profiles.bin"
profile_save_interval_s = 60.5

[devices]
ordinals = [1, 0]

[policy]
name = "fifo"

[policy.baymax]
safety_margin_ms = 0.25
be_backlog_bound_ms = 8
max_be_transfers = 0
copy_chunk_bytes = "1 MiB"
adaptation = true
min_backlog_bound_ms = 2
max_backlog_bound_ms = 16.5
adapt_step_ms = 0.125
preemptive_device = true
long_op_tail_share = 0.25
timeslice_ms = 1.5
bound_by_slices = true

[policy.fifo]
max_outstanding = 4

[[job]]
name = "bert-infer"
allowed_priority = "high"
target_ms = 20
percentile = "p99.9"
safety_margin_ms = 2.5

[[job]]
name = "resnet_train.v2"
allowed_priority = "low"
percentile = 90
weight = 2.5

[access]
high_priority_uids = [1000, 1001]
high_priority_gids = [27]
)";

TEST(ConfigLoad, FullFileIntoStructs) {
  const Config config = parse_ok(kFullFile);
  EXPECT_EQ(config.daemon.socket_path, "/tmp/gpuqos/d.sock");
  EXPECT_EQ(config.daemon.log_level, LogLevel::debug);
  EXPECT_EQ(config.daemon.metrics_listen, (ListenAddress{"::1", 9500}));
  EXPECT_EQ(to_string(config.daemon.metrics_listen), "[::1]:9500");
  EXPECT_EQ(config.daemon.profile_store, "/var/lib/gpuqos/profiles.bin");
  EXPECT_EQ(config.daemon.profile_save_interval_s, 60.5);  // seconds, as the command line takes them
  EXPECT_EQ(config.devices.ordinals, (std::vector<std::uint32_t>{1, 0}));
  const Config by_uuid = parse_ok("[devices]\nuuids = [\"GPU-5053021F-f19c\", \"MIG-ab\"]\n");
  EXPECT_TRUE(by_uuid.devices.ordinals.empty());
  EXPECT_EQ(by_uuid.devices.uuids, (std::vector<std::string>{"5053021f-f19c", "ab"})) << "lowercase, past GPU-";
  EXPECT_EQ(managed_devices_text(by_uuid.devices), "GPU-5053021f-f19c, GPU-ab");
  EXPECT_NE(render_summary(by_uuid).find("GPU-5053021f-f19c, GPU-ab"), std::string::npos)
      << "not 'all': a user test read it so\n" << render_summary(by_uuid);
  EXPECT_EQ(managed_devices_text(parse_ok("[devices]\nordinals = [1]\nuuids = [\"GPU-ab\"]\n").devices), "device 1, GPU-ab");
  EXPECT_EQ(config.policy.name, PolicyName::fifo);
  const BaymaxConfig& baymax = config.policy.baymax;
  EXPECT_EQ(baymax.safety_margin_ms, 0.25);
  EXPECT_EQ(baymax.be_backlog_bound_ms, 8.0);
  EXPECT_EQ(baymax.max_be_transfers, 0u);
  EXPECT_EQ(baymax.copy_chunk_bytes, 1u << 20);
  EXPECT_TRUE(baymax.adaptation);
  EXPECT_EQ(baymax.min_backlog_bound_ms, 2.0);
  EXPECT_EQ(baymax.max_backlog_bound_ms, 16.5);
  EXPECT_EQ(baymax.adapt_step_ms, 0.125);
  EXPECT_TRUE(baymax.preemptive_device);
  EXPECT_EQ(baymax.long_op_tail_share, 0.25);
  EXPECT_EQ(baymax.timeslice_ms, 1.5);
  EXPECT_TRUE(baymax.bound_by_slices);
  EXPECT_EQ(config.policy.fifo.max_outstanding, 4u);
  ASSERT_EQ(config.jobs.size(), 2u);
  EXPECT_EQ(config.jobs[0], (JobConfig{"bert-infer", Priority::high, 20.0, 99.9, 1.0, 2.5, true}));
  EXPECT_EQ(config.jobs[1], (JobConfig{"resnet_train.v2", Priority::low, std::nullopt, 90.0, 2.5, std::nullopt, true}));
  EXPECT_FALSE(config.access.anyone_may_run_high);
  EXPECT_EQ(config.access.high_priority_uids, (std::vector<uid_t>{1000, 1001}));
  EXPECT_EQ(config.access.high_priority_gids, (std::vector<gid_t>{27}));
}

TEST(ConfigLoad, InlineTablesAndValueForms) {
  const Config config = parse_ok(R"(
daemon = { metrics_listen = "0.0.0.0:9400", log_level = "off" }
policy = { name = "priority", baymax = { copy_chunk_bytes = 65536 } }
job = [ { name = "a", percentile = 99.5 }, { name = "b", percentile = "75" } ]
)");
  EXPECT_EQ(config.daemon.metrics_listen, (ListenAddress{"0.0.0.0", 9400}));
  EXPECT_EQ(config.daemon.log_level, LogLevel::off);
  EXPECT_EQ(config.policy.name, PolicyName::priority);
  EXPECT_EQ(config.policy.baymax.copy_chunk_bytes, 65536u);
  ASSERT_EQ(config.jobs.size(), 2u);
  EXPECT_EQ(config.jobs[0].percentile, 99.5);
  EXPECT_EQ(config.jobs[1].percentile, 75.0);
}

// What the scan for deep dotted keys must not take for a key: dots in strings of every form (ones
// that end in quotes of their own too), comments, values and quoted keys. toml++ reads the whole
// file: the errors are the config's own, at its last lines too.
TEST(ConfigLoad, DotsInStringsCommentsAndValuesAreNoKeyParts) {
  const std::string dots = "a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r";
  const auto result = parse_config("# " + dots + " = 1\n"
                                   "[[job]]\n"
                                   "name = \"\"\"\"" + dots + "\"\"\"\"  # \"\"\"\n"
                                   "percentile = 99.9\n"
                                   "[[job]]\n"
                                   "name = \'\'\'\n" + dots + " = 1\n\'\'\'\n"
                                   "[[job]]\n"
                                   "name = \"x\\\"" + dots + " = \\\"\"\n"
                                   "[policy]\n"
                                   "\"" + dots + "\" = 1.5e3\n",
                                   "t.toml");
  ASSERT_FALSE(result.ok());
  const std::vector<std::string> expected = {
      "t.toml:3:8: job[0].name: must be 1 to 63 of A-Z a-z 0-9 . _ - (got \"\\\"" + dots + "\\\"\")",
      "t.toml:6:8: job[1].name: must be 1 to 63 of A-Z a-z 0-9 . _ - (got \"" + dots + " = 1\\n\")",
      "t.toml:10:8: job[2].name: must be 1 to 63 of A-Z a-z 0-9 . _ - (got \"x\\\"" + dots + " = \\\"\")",
      "t.toml:12:1: policy.\"" + dots + "\": unknown key"};
  EXPECT_EQ(result.errors(), expected);
}

TEST(ConfigLoad, ChunkSizesAndListenAddresses) {
  EXPECT_EQ(parse_ok("[policy.baymax]\ncopy_chunk_bytes = 0").policy.baymax.copy_chunk_bytes, 0u);
  EXPECT_EQ(parse_ok("[policy.baymax]\ncopy_chunk_bytes = \"64KiB\"").policy.baymax.copy_chunk_bytes, 65536u);
  EXPECT_EQ(parse_ok("[policy.baymax]\ncopy_chunk_bytes = \"2GiB\"").policy.baymax.copy_chunk_bytes, 2ull << 30);
  EXPECT_EQ(parse_ok("[policy.baymax]\ncopy_chunk_bytes = \"131072B\"").policy.baymax.copy_chunk_bytes, 131072u);
  EXPECT_EQ(parse_ok("[daemon]\nmetrics_listen = \"gpu-node.local:80\"").daemon.metrics_listen,
            (ListenAddress{"gpu-node.local", 80}));
  EXPECT_FALSE(parse_ok("[daemon]\nmetrics_listen = \"\"").daemon.metrics_listen.enabled());
  const ListenAddress scoped = parse_ok("[daemon]\nmetrics_listen = \"[fe80::1%lo]:9400\"").daemon.metrics_listen;
  EXPECT_EQ(scoped, (ListenAddress{"fe80::1%lo", 9400}));
  EXPECT_EQ(to_string(scoped), "[fe80::1%lo]:9400");
  EXPECT_EQ(parse_ok("[daemon]\nmetrics_listen = \"[fe80::1%2]:9400\"").daemon.metrics_listen,
            (ListenAddress{"fe80::1%2", 9400}))
      << "an interface's index";
}

TEST(ConfigLoad, ExampleFileLoads) {
  auto result = load_config_file(GPUQOS_SOURCE_DIR "/examples/gpuqos.toml");
  ASSERT_TRUE(result.ok()) << result.error();
  const Config& config = result.value();
  EXPECT_EQ(config.policy.name, PolicyName::baymax);
  EXPECT_EQ(config.policy.baymax.idle_bound_factor, 1.5) << "what the demo and the benchmark run";
  const JobConfig* bert = find_job(config, "bert-infer");
  ASSERT_NE(bert, nullptr);
  EXPECT_EQ(bert->allowed_priority, Priority::high);
  EXPECT_EQ(bert->target_ms, 20.0);
  EXPECT_EQ(bert->percentile, 99.0);
  for (const char* name : {"resnet-train", "recsys-train"}) {
    const JobConfig* job = find_job(config, name);
    ASSERT_NE(job, nullptr) << name;
    EXPECT_EQ(job->allowed_priority, Priority::low);
    EXPECT_GT(job->weight, 0.0);
  }
  EXPECT_TRUE(config.access.anyone_may_run_high);
}

TEST(ConfigLoad, FindJob) {
  const Config config = parse_ok("[[job]]\nname = \"a\"\n[[job]]\nname = \"b\"\nweight = 3\n");
  ASSERT_NE(find_job(config, "b"), nullptr);
  EXPECT_EQ(find_job(config, "b")->weight, 3.0);
  EXPECT_EQ(find_job(config, "c"), nullptr);
  EXPECT_EQ(find_job(default_config(), "a"), nullptr);
}

// A consumer that refuses a valid name (gpuqosd and "none") can point at where it was set.
TEST(ConfigLoad, ThePolicyNameKeepsItsPlace) {
  EXPECT_EQ(parse_ok("# policy\n[policy]\nname = \"none\"\n").policy.name_place, "t.toml:3:8");
  EXPECT_EQ(parse_ok("policy = { name = \"fifo\" }\n").policy.name_place, "t.toml:1:19");
  EXPECT_EQ(parse_ok("[policy]\n").policy.name_place, "") << "not set: no place";
  EXPECT_EQ(parse_ok("\n[policy]\nname = \"baymax\"\n"), default_config()) << "the place is not part of the value";
}

// gpuqosd's loads refuse "none" among the file's other problems, in file order; others take it.
TEST(ConfigLoad, ForGpuqosdPolicyNoneIsAProblemLikeAnyOther) {
  const std::string text = "[daemon]\nlog_level = \"verbose\"\n[policy]\nname = \"none\"\n";
  auto refused = parse_config(text, "t.toml", {.for_gpuqosd = true});
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().substr(0, 12), "t.toml:2:13:") << refused.error();
  EXPECT_NE(refused.error().find("\nt.toml:4:8: policy.name: \"none\" means running without gpuqosd"), std::string::npos)
      << refused.error();
  EXPECT_TRUE(parse_config("[policy]\nname = \"none\"\n", "t.toml").ok()) << "the benchmark's 'none' is a name";
}

TEST(ConfigLoad, MissingFileNamesThePath) {
  auto result = load_config_file("/nonexistent/gpuqos/gpuqos.toml");
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.error(), "/nonexistent/gpuqos/gpuqos.toml: cannot read config file: No such file or directory");
}

TEST(ConfigLoad, DirectoryIsRefused) {
  testing::TempDir dir("gpuqos-config");
  auto result = load_config_file(dir.path());
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.error(), dir.path().string() + ": cannot read config file: Is a directory");
}

// gpuqosd reads its config on its loop (SIGHUP): a FIFO without a writer, a device that never ends
// or a huge file must be refused at once, not read.
TEST(ConfigLoad, AFileThatIsNotARegularOneOrIsHugeIsRefusedWithoutReading) {
  testing::TempDir dir("gpuqos-config");
  const auto fifo = dir.path() / "fifo.toml";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  auto result = load_config_file(fifo);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.error(), fifo.string() + ": cannot read config file: not a regular file (a pipe, socket or device)");
  result = load_config_file("/dev/zero");
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.error(), "/dev/zero: cannot read config file: not a regular file (a pipe, socket or device)");
  // Not even opened: a writer waiting on the FIFO would be let go by the open (opening some devices
  // does something of its own; a terminal would become gpuqosd's controlling one).
  std::atomic<bool> writer_opening{false}, writer_opened{false};
  std::thread writer([&] {
    writer_opening = true;
    const int fd = ::open(fifo.c_str(), O_WRONLY);  // waits for a reader
    writer_opened = fd >= 0;
    if (fd >= 0) ::close(fd);
  });
  while (!writer_opening) std::this_thread::yield();
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // in its open by now
  EXPECT_FALSE(load_config_file(fifo).ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(writer_opened) << "the config load opened the FIFO";
  const int reader = ::open(fifo.c_str(), O_RDONLY | O_NONBLOCK);  // lets the writer go
  writer.join();
  if (reader >= 0) ::close(reader);
  const auto huge = dir.write("huge.toml", "# " + std::string(2 << 20, 'x') + "\n");
  result = load_config_file(huge);
  ASSERT_FALSE(result.ok());
  EXPECT_NE(result.error().find("more than a config file's limit of 1 MiB"), std::string::npos) << result.error();
}

TEST(ConfigLoad, FileErrorsStartWithThePath) {
  testing::TempDir dir("gpuqos-config");
  const auto path = dir.write("bad.toml", "[policy]\nname = \"lifo\"\n");
  auto result = load_config_file(path);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.error().rfind(path.string() + ":2:8: policy.name: must be one of", 0), 0u) << result.error();
}

TEST(ConfigLoad, EveryErrorIsReportedInFileOrder) {
  auto result = parse_config(
      "[policy.baymax]\nsafety_margin_ms = -1\n[daemon]\nlog_level = \"loud\"\n[access]\nx = 1\n", "t.toml");
  ASSERT_FALSE(result.ok());
  ASSERT_EQ(result.errors().size(), 3u) << result.error();
  EXPECT_EQ(result.errors()[0], "t.toml:2:20: policy.baymax.safety_margin_ms: must be >= 0 (got -1)");
  EXPECT_EQ(result.errors()[1].rfind("t.toml:4:13: daemon.log_level: must be one of", 0), 0u);
  EXPECT_EQ(result.errors()[2], "t.toml:6:1: access.x: unknown key");
  EXPECT_EQ(result.error(), result.errors()[0] + "\n" + result.errors()[1] + "\n" + result.errors()[2]);
}

// The first 1,000 problems in file order, then how many more: a review reloaded a 1-MiB file of
// 340,000 bad array elements, and gpuqosd's loop took 250 ms to report them all, past the shims'
// 100-ms heartbeat (every job fell open). Unknown keys are found in name order, not file order.
TEST(ConfigLoad, TheFirstThousandProblemsAreListedAndTheRestCounted) {
  std::string text = "[policy.baymax]\nsafety_margin_ms = -1\n[access]\n";
  for (int i = 0; i < 1500; ++i) text += "k" + std::to_string(9999 - i) + " = 1\n";  // names fall as lines rise
  auto result = parse_config(text, "t.toml");
  ASSERT_FALSE(result.ok());
  ASSERT_EQ(result.errors().size(), 1001u);
  EXPECT_EQ(result.errors()[0], "t.toml:2:20: policy.baymax.safety_margin_ms: must be >= 0 (got -1)");
  EXPECT_EQ(result.errors()[1], "t.toml:4:1: access.k9999: unknown key");
  EXPECT_EQ(result.errors()[999], "t.toml:1002:1: access.k9001: unknown key");
  EXPECT_EQ(result.errors()[1000], "t.toml: and 501 more problems after these (only the first 1000 are listed)");
  EXPECT_EQ(result.problems(), 1501u);
}

// What a file sets but the daemon will not use is said in the summary, not left out of it.
TEST(ConfigSummary, SaysWhatAJobSetsButWillNotUse) {
  const std::string summary = render_summary(parse_ok("[[job]]\nname = \"a\"\nallowed_priority = \"low\"\ntarget_ms = 3\n"
                                                      "[[job]]\nname = \"b\"\npercentile = 90\n"
                                                      "[[job]]\nname = \"c\"\ntarget_ms = 5\npercentile = 90\n"
                                                      "[[job]]\nname = \"d\"\nsafety_margin_ms = 2\n"
                                                      "[[job]]\nname = \"e\"\nallowed_priority = \"low\"\n"
                                                      "target_ms = 9\nsafety_margin_ms = 3\n"
                                                      "[[job]]\nname = \"f\"\ntarget_ms = 4\nsafety_margin_ms = 4\n"
                                                      "[[job]]\nname = \"g\"\npercentile = 99\n"
                                                      "[[job]]\nname = \"h\"\n"));
  EXPECT_NE(summary.find("always low, target_ms 3 unused (the job always runs low)"), std::string::npos) << summary;
  EXPECT_NE(summary.find("may run high, no latency target (percentile 90 unused without target_ms)"), std::string::npos)
      << summary;
  // Set to the default is still set: said (a user test found `percentile = 99` alone went unsaid).
  EXPECT_NE(summary.find("no latency target (percentile 99 unused without target_ms)"), std::string::npos) << summary;
  EXPECT_EQ(summary.find("percentile 99 unused", summary.find("\n  h ")), std::string::npos) << summary;
  EXPECT_NE(summary.find("may run high, target p90 <= 5 ms"), std::string::npos) << summary;
  EXPECT_NE(summary.find("safety margin 2 ms unused (no latency target to keep it for)"), std::string::npos) << summary;
  EXPECT_NE(summary.find("safety margin 3 ms unused (the job always runs low)"), std::string::npos) << summary;
  EXPECT_NE(summary.find("safety margin 4 ms (not under the target: best-effort work waits while any query of it is "
                         "open)"),
            std::string::npos)
      << summary;
}

// baymax's own margin applies to every job that sets none: one not under a job's target is said
// there too (a user test found it said only of a job's own margin). Not under another policy.
TEST(ConfigSummary, SaysWhenBaymaxsMarginIsNotUnderAJobsTarget) {
  const std::string jobs = "[[job]]\nname = \"tight\"\ntarget_ms = 1\n[[job]]\nname = \"own\"\ntarget_ms = 1\n"
                           "safety_margin_ms = 0.5\n[[job]]\nname = \"loose\"\ntarget_ms = 100\n";
  const std::string note = "([policy.baymax] safety_margin_ms 50 is not under the target: best-effort work waits while "
                           "any query of it is open)";
  const std::string summary =
      render_summary(parse_ok("[policy]\nname = \"baymax\"\n[policy.baymax]\nsafety_margin_ms = 50\n" + jobs));
  EXPECT_NE(summary.find("target p99 <= 1 ms, weight 1 " + note), std::string::npos) << summary;
  EXPECT_EQ(summary.find(note), summary.rfind(note)) << "only the job without a margin of its own:\n" << summary;
  const std::string fifo = render_summary(parse_ok("[policy]\nname = \"fifo\"\n" + jobs));
  EXPECT_EQ(fifo.find("safety_margin_ms"), std::string::npos) << fifo;
}

TEST(ConfigSummary, ShowsEverySetting) {
  const std::string summary = render_summary(parse_ok(kFullFile));
  for (const char* expected : {"/tmp/gpuqos/d.sock", "debug", "[::1]:9500", "profiles.bin", "devices", "1, 0", "policy",
                               "fifo", "max_outstanding", "4", "bert-infer", "may run high", "target p99.9 <= 20 ms", "safety margin 2.5 ms",
                               "resnet_train.v2", "always low", "weight 2.5", "root, uids 1000, 1001, gids 27"})
    EXPECT_NE(summary.find(expected), std::string::npos) << expected << " not in:\n" << summary;
  const std::string defaults = render_summary(default_config());
  for (const char* expected : {"metrics_listen", "off", "all", "baymax", "be_backlog_bound_ms", "4194304 (4 MiB)",
                               "adaptation", "none listed", "anyone"})
    EXPECT_NE(defaults.find(expected), std::string::npos) << expected << " not in:\n" << defaults;
}

// The time slice, bound_by_slices and idle_bound_factor are shown only for a device said to
// time-slice processes.
TEST(ConfigSummary, ShowsTheSliceSettingsOfAPreemptiveDevice) {
  for (const char* factor : {"1", "2.5", "1000"}) {
    const Config accepted = parse_ok(std::string("[policy.baymax]\nidle_bound_factor = ") + factor + "\n");
    EXPECT_EQ(accepted.policy.baymax.idle_bound_factor, std::stod(factor));
  }
  const Config sliced_config =
      parse_ok("[policy]\nname = \"baymax\"\n[policy.baymax]\npreemptive_device = true\ntimeslice_ms = 1.5\n"
               "bound_by_slices = true\nidle_bound_factor = 4\n");
  EXPECT_EQ(sliced_config.policy.baymax.idle_bound_factor, 4.0);
  const std::string sliced = render_summary(sliced_config);
  EXPECT_NE(sliced.find("4 (x the bound per stream while no query is in the system)"), std::string::npos) << sliced;
  EXPECT_NE(sliced.find("long best-effort kernels not rationed"), std::string::npos) << sliced;
  EXPECT_NE(sliced.find("timeslice_ms"), std::string::npos) << sliced;
  EXPECT_NE(sliced.find("a best-effort job alone queues freely"), std::string::npos) << sliced;
  const std::string whole = render_summary(parse_ok("[policy]\nname = \"baymax\"\n[policy.baymax]\nbound_by_slices = true\n"));
  EXPECT_EQ(whole.find("timeslice_ms"), std::string::npos) << whole;
  EXPECT_EQ(whole.find("bound_by_slices"), std::string::npos) << "not used on a device that runs kernels to their end";
  EXPECT_EQ(whole.find("idle_bound_factor"), std::string::npos) << whole;
}

// preemptive_device is true (every device), false, or a list of the devices that time-slice ([]:
// none).
TEST(Config, PreemptiveDeviceIsEveryDeviceOrTheListedOnes) {
  const Config listed = parse_ok("[policy]\nname = \"baymax\"\n[policy.baymax]\npreemptive_device = [3, 1]\n");
  EXPECT_FALSE(listed.policy.baymax.preemptive_device);
  EXPECT_EQ(listed.policy.baymax.preemptive_ordinals, (std::vector<std::uint32_t>{3, 1}));
  const std::string summary = render_summary(listed);
  EXPECT_NE(summary.find("devices 3, 1: long best-effort kernels not rationed there"), std::string::npos) << summary;
  EXPECT_NE(summary.find("timeslice_ms"), std::string::npos) << summary;
  const Config by_uuid = parse_ok(
      "[policy.baymax]\npreemptive_device = [2, \"GPU-5053021F-f19c\", \"MIG-ab\"]\n"
      "timeslice_ms = { default = 2, 1 = 4, GPU-5053021f = 1.5 }\n");
  EXPECT_EQ(by_uuid.policy.baymax.preemptive_ordinals, (std::vector<std::uint32_t>{2}));
  EXPECT_EQ(by_uuid.policy.baymax.preemptive_uuids, (std::vector<std::string>{"5053021f-f19c", "ab"}))
      << "lowercase, without GPU- or MIG-";
  EXPECT_EQ(by_uuid.policy.baymax.device_timeslice_ms, (std::map<std::uint32_t, double>{{1, 4.0}}));
  EXPECT_EQ(by_uuid.policy.baymax.uuid_timeslice_ms, (std::map<std::string, double>{{"5053021f", 1.5}}));
  const std::string uuid_summary = render_summary(by_uuid);
  EXPECT_NE(uuid_summary.find("device 2, GPU-5053021f-f19c, GPU-ab: long best-effort kernels not rationed there"),
            std::string::npos)
      << uuid_summary;
  EXPECT_NE(uuid_summary.find("GPU-5053021f: 1.5"), std::string::npos) << uuid_summary;
  const Config none = parse_ok("[policy.baymax]\npreemptive_device = []\n");
  EXPECT_TRUE(none.policy.baymax.preemptive_ordinals.empty());
  EXPECT_EQ(render_summary(none).find("timeslice_ms"), std::string::npos) << "an empty list: no device time-slices";
  const Config every = parse_ok("[policy.baymax]\npreemptive_device = true\n");
  EXPECT_TRUE(every.policy.baymax.preemptive_device);
  EXPECT_TRUE(every.policy.baymax.preemptive_ordinals.empty());
}

// timeslice_ms is one slice for every device, or a table of them by device ordinal with `default`
// for the others.
TEST(Config, TimesliceIsOneForEveryDeviceOrATableByOrdinal) {
  const Config table = parse_ok(
      "[policy.baymax]\npreemptive_device = true\ntimeslice_ms = { default = 4, 1 = 1.5, 63 = 8 }\n");
  EXPECT_EQ(table.policy.baymax.timeslice_ms, 4.0);
  EXPECT_EQ(table.policy.baymax.device_timeslice_ms, (std::map<std::uint32_t, double>{{1, 1.5}, {63, 8.0}}));
  const std::string summary = render_summary(table);
  EXPECT_NE(summary.find("4 (device 1: 1.5, device 63: 8)"), std::string::npos) << summary;
  const Config devices_only = parse_ok("[policy.baymax]\ntimeslice_ms = { 2 = 1 }\n");
  EXPECT_EQ(devices_only.policy.baymax.timeslice_ms, BaymaxConfig{}.timeslice_ms) << "no default: the built-in one";
  EXPECT_EQ(devices_only.policy.baymax.device_timeslice_ms, (std::map<std::uint32_t, double>{{2, 1.0}}));
  const Config header = parse_ok("[policy.baymax.timeslice_ms]\n0 = 0.5\n");
  EXPECT_EQ(header.policy.baymax.device_timeslice_ms, (std::map<std::uint32_t, double>{{0, 0.5}}));
  const Config one = parse_ok("[policy.baymax]\ntimeslice_ms = 3\n");
  EXPECT_EQ(one.policy.baymax.timeslice_ms, 3.0);
  EXPECT_TRUE(one.policy.baymax.device_timeslice_ms.empty());
}

// may_run_high

Config restricted(std::vector<uid_t> uids, std::vector<gid_t> gids) {
  Config config;
  config.access = AccessConfig{false, std::move(uids), std::move(gids)};
  return config;
}

TEST(MayRunHigh, AnyoneByDefault) { EXPECT_TRUE(may_run_high(default_config(), 1234, 1234, {})); }

TEST(MayRunHigh, RestrictedToListedUidsAndGroups) {
  const Config config = restricted({1000}, {27});
  const std::vector<gid_t> other_groups{5, 6};
  const std::vector<gid_t> with_listed_group{5, 27};
  EXPECT_TRUE(may_run_high(config, 0, 0, {}));                       // root always
  EXPECT_TRUE(may_run_high(config, 1000, 1000, {}));                 // listed uid
  EXPECT_TRUE(may_run_high(config, 2000, 27, {}));                   // listed primary group
  EXPECT_TRUE(may_run_high(config, 2000, 2000, with_listed_group));  // listed supplementary group
  EXPECT_FALSE(may_run_high(config, 2000, 2000, other_groups));
  EXPECT_FALSE(may_run_high(config, 1001, 1001, {}));
}

TEST(MayRunHigh, EmptyListsMeanRootOnly) {
  const Config config = parse_ok("[access]\nhigh_priority_uids = []\n");
  EXPECT_FALSE(config.access.anyone_may_run_high);
  EXPECT_TRUE(may_run_high(config, 0, 0, {}));
  EXPECT_FALSE(may_run_high(config, 1000, 1000, {}));
}

TEST(MayRunHigh, FromTheFile) {
  const Config config = parse_ok("[access]\nhigh_priority_gids = [44]\n");
  const std::vector<gid_t> groups{44};
  EXPECT_TRUE(may_run_high(config, 1000, 1000, groups));
  EXPECT_FALSE(may_run_high(config, 1000, 1000, {}));
}

// The malformed-input table: each input must fail with exactly this message (one error each).

struct BadCase {
  const char* name;
  std::string text;
  std::string message;
};

std::string repeat(char c, std::size_t n) { return std::string(n, c); }
// "a.a.....a": a dotted key of `parts` parts.
std::string deep_key(std::size_t parts) {
  std::string key = "a";
  for (std::size_t i = 1; i < parts; ++i) key += ".a";
  return key;
}

const std::vector<BadCase>& bad_cases() {
  static const std::vector<BadCase> cases = {
      {"unterminated_string", "[daemon]\nsocket = \"/tmp/s\n",
       "t.toml:2:17: daemon.socket: invalid TOML: error while parsing string: unescaped control characters other than "
       "TAB (U+0009) are explicitly prohibited"},
      // toml++ reads a bare word as a broken number or boolean; the message names the key and the fix.
      {"string_without_quotes", "[daemon]\nlog_level = info\n",
       "t.toml:2:16: daemon.log_level: invalid TOML: error while parsing floating-point: expected value-terminator, "
       "saw 'o' (a bare word is no value: a string needs quotes, log_level = \"info\"; a boolean is true or false)"},
      {"string_without_quotes_in_the_second_job", "[[job]]\nname = \"a\"\n[[job]]\nname = b   # the second\n",
       "t.toml:4:8: job[1].name: invalid TOML: error while parsing value: could not determine value type (a bare "
       "word is no value: a string needs quotes, name = \"b\"; a boolean is true or false)"},
      // A line inside a multi-line string is neither a header nor a key: nothing is guessed.
      {"unterminated_multiline_string", "[daemon]\nsocket = \"\"\"\n[policy]\nname = fifo\n",
       "t.toml:4:13: invalid TOML: error while parsing string: encountered end-of-file"},
      {"byte_order_mark", "\xEF\xBB\xBF[daemon]\nlog_level = info\n",
       "t.toml:2:16: daemon.log_level: invalid TOML: error while parsing floating-point: expected value-terminator, "
       "saw 'o' (a bare word is no value: a string needs quotes, log_level = \"info\"; a boolean is true or false)"},
      {"integer_too_large", "[policy.fifo]\nmax_outstanding = 99999999999999999999\n",
       "t.toml:2:39: policy.fifo.max_outstanding: invalid TOML: error while parsing decimal integer: "
       "'99999999999999999999' is not representable in 64 bits"},
      {"key_defined_twice", "[daemon]\nlog_level = \"info\"\nlog_level = \"warn\"\n",
       "t.toml:3:13: daemon.log_level: invalid TOML: error while parsing key-value pair: cannot redefine existing "
       "string 'log_level'"},
      {"table_defined_twice", "[policy]\n[policy]\n",
       "t.toml:2:1: policy: invalid TOML: error while parsing table header: cannot redefine existing table 'policy'"},
      // An audit: an element of an array written over several lines was named by no key.
      {"bad_element_of_a_multiline_array", "[devices]\nordinals = [\n  0, # the first [GPU]\n  x,\n]\n",
       "t.toml:4:3: devices.ordinals: invalid TOML: error while parsing value: could not determine value type"},
      // An escaped quote in an element, and an array of multi-line strings: no key is guessed for a
      // later line (a review: "daemon.cmds" was named for an error in [policy]).
      {"escaped_quote_in_a_multiline_array", "[devices]\nuuids = [\n  \"GPU-\\\"[\",\n]\n[policy]\nname = fifo\n",
       "t.toml:6:9: policy.name: invalid TOML: error while parsing boolean: expected 'false', saw 'fi' (a bare "
       "word is no value: a string needs quotes, name = \"fifo\"; a boolean is true or false)"},
      {"multiline_strings_in_an_array", "[devices]\nuuids = [\n  \"\"\"a\n]\"\"\",\n]\n[policy]\nname = fifo\n",
       "t.toml:7:9: policy.name: invalid TOML: error while parsing boolean: expected 'false', saw 'fi' (a bare "
       "word is no value: a string needs quotes, name = \"fifo\"; a boolean is true or false)"},
      // A unit written after a number: the key's name has it (an audit).
      {"unit_after_a_number", "[[job]]\nname = \"serve\"\ntarget_ms = 20ms\n",
       "t.toml:3:15: job[0].target_ms: invalid TOML: error while parsing decimal integer: expected digit, saw 'm' "
       "(the unit is in the key's name, milliseconds: write target_ms = 20)"},
      {"unit_in_a_string", "[[job]]\nname = \"serve\"\ntarget_ms = \"20 ms\"\n",
       "t.toml:3:13: job[0].target_ms: must be a number (got a string) (the unit is in the key's name, "
       "milliseconds: write target_ms = 20)"},
      // In the key's unit (a review: 2s was "write 2" for a key in ms).
      {"other_unit_after_a_number", "[[job]]\nname = \"serve\"\ntarget_ms = 2s\n",
       "t.toml:3:14: job[0].target_ms: invalid TOML: error while parsing decimal integer: expected digit, saw 's' "
       "(the unit is in the key's name, milliseconds: write target_ms = 2000)"},
      {"other_unit_in_a_string", "[daemon]\nprofile_save_interval_s = \"500ms\"\n",
       "t.toml:2:27: daemon.profile_save_interval_s: must be a number (got a string) (the unit is in the key's "
       "name, seconds: write profile_save_interval_s = 0.5)"},
      {"unknown_unit", "[[job]]\nname = \"serve\"\ntarget_ms = \"20 fortnights\"\n",
       "t.toml:3:13: job[0].target_ms: must be a number (got a string) (the unit is in the key's name: a number "
       "of milliseconds)"},
      {"unknown_section", "[polcy]\nname = \"fifo\"\n",
       "t.toml:1:2: polcy: unknown section (did you mean \"policy\"?)"},
      {"unknown_top_level_key", "verbose = true\n", "t.toml:1:1: verbose: unknown key"},
      // A review: a key's control characters went out raw (a terminal's escapes, a newline read as a
      // second problem); a key that is not bare is shown as TOML writes it.
      {"unknown_key_with_control_characters", "[access]\n\"x\\u001b]2;t\\u0007\\nfake\" = 1\n",
       "t.toml:2:1: access.\"x\\u001B]2;t\\u0007\\nfake\": unknown key"},
      // A key appended at the end of a file lands in the last table (a user test: under [access]).
      {"key_under_the_wrong_header", "[access]\nhigh_priority_uids = [0]\ntimeslice_ms = 2.0\n",
       "t.toml:3:1: access.timeslice_ms: unknown key (a key of [policy.baymax]: a key belongs to the table whose "
       "header is above it)"},
      {"inline_table_under_the_wrong_header", "[access]\ntimeslice_ms = { default = 2.0 }\n",
       "t.toml:2:1: access.timeslice_ms: unknown key (a key of [policy.baymax]: a key belongs to the table whose "
       "header is above it)"},
      {"subtable_at_the_top", "[baymax]\nadaptation = true\n",
       "t.toml:1:2: baymax: unknown section (did you mean [policy.baymax]?)"},
      {"key_of_two_tables_under_another", "[devices]\nname = \"x\"\n",
       "t.toml:2:1: devices.name: unknown key (a key of [[job]] or [policy]: a key belongs to the table whose header "
       "is above it)"},
      {"unknown_baymax_key", "[policy.baymax]\nsafety_margin = 1\n",
       "t.toml:2:1: policy.baymax.safety_margin: unknown key (did you mean \"safety_margin_ms\"?)"},
      {"unknown_job_key", "[[job]]\nname = \"a\"\nweigth = 2\n",
       "t.toml:3:1: job[0].weigth: unknown key (did you mean \"weight\"?)"},
      {"unknown_policy_subsection", "[policy.bayamx]\n",
       "t.toml:1:9: policy.bayamx: unknown section (did you mean \"baymax\"?)"},
      {"policy_not_a_table", "policy = \"baymax\"\n", "t.toml:1:10: policy: must be a table (got a string)"},
      {"bad_policy_name", "[policy]\nname = \"baymx\"\n",
       "t.toml:2:8: policy.name: must be one of \"none\", \"fifo\", \"priority\", \"baymax\" (got \"baymx\") "
       "(did you mean \"baymax\"?)"},
      {"policy_name_wrong_type", "[policy]\nname = 3\n", "t.toml:2:8: policy.name: must be a string (got an integer)"},
      {"negative_margin", "[policy.baymax]\nsafety_margin_ms = -1\n",
       "t.toml:2:20: policy.baymax.safety_margin_ms: must be >= 0 (got -1)"},
      {"zero_backlog_bound", "[policy.baymax]\nbe_backlog_bound_ms = 0\n",
       "t.toml:2:23: policy.baymax.be_backlog_bound_ms: must be >= 0.001 (got 0)"},
      {"nan_margin", "[policy.baymax]\nsafety_margin_ms = nan\n",
       "t.toml:2:20: policy.baymax.safety_margin_ms: must be a finite number (got nan)"},
      {"margin_as_string", "[policy.baymax]\nsafety_margin_ms = \"1ms\"\n",
       "t.toml:2:20: policy.baymax.safety_margin_ms: must be a number (got a string) (the unit is in the key's "
       "name, milliseconds: write safety_margin_ms = 1)"},
      {"negative_transfers", "[policy.baymax]\nmax_be_transfers = -2\n",
       "t.toml:2:20: policy.baymax.max_be_transfers: must be >= 0 (got -2)"},
      {"fractional_transfers", "[policy.baymax]\nmax_be_transfers = 1.5\n",
       "t.toml:2:20: policy.baymax.max_be_transfers: must be an integer (got a floating-point number)"},
      {"chunk_too_small", "[policy.baymax]\ncopy_chunk_bytes = 1024\n",
       "t.toml:2:20: policy.baymax.copy_chunk_bytes: must be 0 (no chunking) or at least 65536 (64 KiB) (got 1024)"},
      {"chunk_string_too_small", "[policy.baymax]\ncopy_chunk_bytes = \"32KiB\"\n",
       "t.toml:2:20: policy.baymax.copy_chunk_bytes: must be 0 (no chunking) or at least 65536 (64 KiB) (got 32768)"},
      {"bad_size_unit", "[policy.baymax]\ncopy_chunk_bytes = \"4MB\"\n",
       "t.toml:2:20: policy.baymax.copy_chunk_bytes: must be a byte count like 4194304 or \"4MiB\" (units B, KiB, MiB, "
       "GiB, TiB) (got \"4MB\")"},
      {"size_overflow", "[policy.baymax]\ncopy_chunk_bytes = \"99999999999TiB\"\n",
       "t.toml:2:20: policy.baymax.copy_chunk_bytes: must be a byte count like 4194304 or \"4MiB\" (units B, KiB, MiB, "
       "GiB, TiB) (got \"99999999999TiB\")"},
      {"adaptation_not_bool", "[policy.baymax]\nadaptation = \"yes\"\n",
       "t.toml:2:14: policy.baymax.adaptation: must be true or false (got a string)"},
      {"adaptation_bounds_reversed", "[policy.baymax]\nmin_backlog_bound_ms = 10\nmax_backlog_bound_ms = 5\n",
       "t.toml:3:24: policy.baymax.max_backlog_bound_ms: must be >= min_backlog_bound_ms (10) (got 5)"},
      {"bound_outside_adaptation_range", "[policy.baymax]\nadaptation = true\nbe_backlog_bound_ms = 30\n",
       "t.toml:3:23: policy.baymax.be_backlog_bound_ms: must be within min_backlog_bound_ms and max_backlog_bound_ms "
       "(1 to 20) when adaptation is on (got 30)"},
      {"adaptation_min_above_default_bound", "[policy.baymax]\nadaptation = true\nmin_backlog_bound_ms = 8\n",
       "t.toml:3:24: policy.baymax.min_backlog_bound_ms: must be <= be_backlog_bound_ms (5) when adaptation is on "
       "(got 8)"},
      {"zero_adapt_step", "[policy.baymax]\nadapt_step_ms = 0\n",
       "t.toml:2:17: policy.baymax.adapt_step_ms: must be >= 0.001 (got 0)"},
      {"preemptive_not_bool_or_list", "[policy.baymax]\npreemptive_device = 1\n",
       "t.toml:2:21: policy.baymax.preemptive_device: must be true, false or a list of device ordinals and GPU UUIDs "
       "like [0, \"GPU-5053021f\"] (got an integer)"},
      {"preemptive_ordinal_too_high", "[policy.baymax]\npreemptive_device = [0, 64]\n",
       "t.toml:2:25: policy.baymax.preemptive_device[1]: must be a device ordinal 0 to 63 (got 64)"},
      {"preemptive_string_not_a_uuid", "[policy.baymax]\npreemptive_device = [\"1\"]\n",
       "t.toml:2:22: policy.baymax.preemptive_device[0]: must be a GPU UUID as nvidia-smi -L writes it, or a prefix of "
       "one, like \"GPU-5053021f\" (got \"1\")"},
      {"preemptive_uuid_not_hex", "[policy.baymax]\npreemptive_device = [\"GPU-53xz\"]\n",
       "t.toml:2:22: policy.baymax.preemptive_device[0]: must be a GPU UUID as nvidia-smi -L writes it, or a prefix of "
       "one, like \"GPU-5053021f\" (got \"GPU-53xz\")"},
      {"preemptive_uuid_empty_prefix", "[policy.baymax]\npreemptive_device = [\"GPU-\"]\n",
       "t.toml:2:22: policy.baymax.preemptive_device[0]: must be a GPU UUID as nvidia-smi -L writes it, or a prefix of "
       "one, like \"GPU-5053021f\" (got \"GPU-\")"},
      {"preemptive_uuid_twice", "[policy.baymax]\npreemptive_device = [\"GPU-5053\", \"GPU-5053\"]\n",
       "t.toml:2:34: policy.baymax.preemptive_device[1]: \"GPU-5053\" is listed twice"},
      {"preemptive_entry_not_ordinal_or_uuid", "[policy.baymax]\npreemptive_device = [1.5]\n",
       "t.toml:2:22: policy.baymax.preemptive_device[0]: must be a device ordinal or a GPU UUID (got a floating-point number)"},
      {"preemptive_ordinal_twice", "[policy.baymax]\npreemptive_device = [1, 1]\n",
       "t.toml:2:25: policy.baymax.preemptive_device[1]: 1 is listed twice"},
      {"zero_long_op_share", "[policy.baymax]\nlong_op_tail_share = 0\n",
       "t.toml:2:22: policy.baymax.long_op_tail_share: must be > 0 (got 0)"},
      {"long_op_share_above_one", "[policy.baymax]\nlong_op_tail_share = 1.5\n",
       "t.toml:2:22: policy.baymax.long_op_tail_share: must be <= 1 (got 1.5)"},
      {"zero_timeslice", "[policy.baymax]\ntimeslice_ms = 0\n",
       "t.toml:2:16: policy.baymax.timeslice_ms: must be >= 0.001 (got 0)"},
      {"timeslice_below_a_microsecond", "[policy.baymax]\ntimeslice_ms = 1e-7\n",
       "t.toml:2:16: policy.baymax.timeslice_ms: must be >= 0.001 (got 1e-07)"},
      {"timeslice_not_number", "[policy.baymax]\ntimeslice_ms = \"2ms\"\n",
       "t.toml:2:16: policy.baymax.timeslice_ms: must be a number of ms or a table of them by device ordinal or GPU "
       "UUID, like { default = 2.0, 1 = 1.0, GPU-5053021f = 1.0 } (got a string)"},
      {"timeslice_device_not_an_ordinal", "[policy.baymax]\ntimeslice_ms = { gpu1 = 1.0 }\n",
       "t.toml:2:18: policy.baymax.timeslice_ms.gpu1: must be a device ordinal 0 to 63, a GPU UUID (or a prefix of one, like GPU-5053021f) or default"},
      {"timeslice_device_too_high", "[policy.baymax]\ntimeslice_ms = { 64 = 1.0 }\n",
       "t.toml:2:18: policy.baymax.timeslice_ms.64: must be a device ordinal 0 to 63, a GPU UUID (or a prefix of one, like GPU-5053021f) or default"},
      {"timeslice_device_leading_zero", "[policy.baymax]\ntimeslice_ms = { 01 = 1.0 }\n",
       "t.toml:2:18: policy.baymax.timeslice_ms.01: must be a device ordinal 0 to 63, a GPU UUID (or a prefix of one, like GPU-5053021f) or default"},
      {"timeslice_uuid_not_hex", "[policy.baymax]\ntimeslice_ms = { GPU-xyz = 1.0 }\n",
       "t.toml:2:18: policy.baymax.timeslice_ms.GPU-xyz: must be a device ordinal 0 to 63, a GPU UUID (or a prefix of "
       "one, like GPU-5053021f) or default"},
      {"timeslice_uuid_twice_in_other_case", "[policy.baymax]\ntimeslice_ms = { GPU-ab12 = 1.0, GPU-AB12 = 2.0 }\n",
       "t.toml:2:18: policy.baymax.timeslice_ms.GPU-ab12: names the same GPUs as another key (UUIDs are read without "
       "case)"},
      {"timeslice_of_a_device_zero", "[policy.baymax]\ntimeslice_ms = { 1 = 0 }\n",
       "t.toml:2:22: policy.baymax.timeslice_ms.1: must be >= 0.001 (got 0)"},
      {"timeslice_empty_table", "[policy.baymax]\ntimeslice_ms = {}\n",
       "t.toml:2:16: policy.baymax.timeslice_ms: must set default or the slice of at least one device ordinal (got "
       "an empty table)"},
      {"timeslice_of_a_device_a_table", "[policy.baymax]\ntimeslice_ms = { 1 = {} }\n",
       "t.toml:2:22: policy.baymax.timeslice_ms.1: must be a number (got a table)"},
      {"timeslice_default_negative", "[policy.baymax]\ntimeslice_ms = { default = -2 }\n",
       "t.toml:2:28: policy.baymax.timeslice_ms.default: must be >= 0.001 (got -2)"},
      {"timeslice_over_an_hour", "[policy.baymax]\ntimeslice_ms = 1e300\n",
       "t.toml:2:16: policy.baymax.timeslice_ms: must be <= 3600000 (an hour) (got 1e+300)"},
      {"timeslice_of_a_device_over_an_hour", "[policy.baymax]\ntimeslice_ms = { 3 = 3600001 }\n",
       "t.toml:2:22: policy.baymax.timeslice_ms.3: must be <= 3600000 (an hour) (got 3600001)"},
      {"bound_over_an_hour", "[policy.baymax]\nbe_backlog_bound_ms = 1e19\n",
       "t.toml:2:23: policy.baymax.be_backlog_bound_ms: must be <= 3600000 (an hour) (got 1e+19)"},
      {"timeslice_default_not_number", "[policy.baymax]\ntimeslice_ms = { default = \"2\" }\n",
       "t.toml:2:28: policy.baymax.timeslice_ms.default: must be a number (got a string)"},
      {"idle_bound_factor_below_one", "[policy.baymax]\nidle_bound_factor = 0.5\n",
       "t.toml:2:21: policy.baymax.idle_bound_factor: must be >= 1 (got 0.5)"},
      {"idle_bound_factor_above_1000", "[policy.baymax]\nidle_bound_factor = 1001\n",
       "t.toml:2:21: policy.baymax.idle_bound_factor: must be <= 1000 (got 1001)"},
      {"idle_bound_factor_not_number", "[policy.baymax]\nidle_bound_factor = \"4x\"\n",
       "t.toml:2:21: policy.baymax.idle_bound_factor: must be a number (got a string)"},
      {"bound_by_slices_not_bool", "[policy.baymax]\nbound_by_slices = \"yes\"\n",
       "t.toml:2:19: policy.baymax.bound_by_slices: must be true or false (got a string)"},
      {"negative_fifo_limit", "[policy.fifo]\nmax_outstanding = -1\n",
       "t.toml:2:19: policy.fifo.max_outstanding: must be >= 0 (got -1)"},
      {"bad_log_level", "[daemon]\nlog_level = \"verbose\"\n",
       "t.toml:2:13: daemon.log_level: must be one of \"trace\", \"debug\", \"info\", \"warn\", \"error\", \"off\" "
       "(got "
       "\"verbose\")"},
      {"log_level_typo", "[daemon]\nlog_level = \"warning\"\n",
       "t.toml:2:13: daemon.log_level: must be one of \"trace\", \"debug\", \"info\", \"warn\", \"error\", \"off\" "
       "(got "
       "\"warning\") (did you mean \"warn\"?)"},
      {"log_level_case", "[daemon]\nlog_level = \"INFO\"\n",
       "t.toml:2:13: daemon.log_level: must be one of \"trace\", \"debug\", \"info\", \"warn\", \"error\", \"off\" "
       "(got "
       "\"INFO\") (did you mean \"info\"?)"},
      {"empty_socket", "[daemon]\nsocket = \"\"\n", "t.toml:2:10: daemon.socket: must not be empty"},
      // A review: the path was cut at the NUL, --check-config passed, and gpuqosd failed with no place.
      {"socket_with_nul", "[daemon]\nsocket = \"/tmp/x\\u0000y\"\n",
       "t.toml:2:10: daemon.socket: must not contain control characters (U+0000 at byte 6)"},
      // A review: C1 controls (a terminal's CSI, U+009B) went through into the summary.
      {"socket_with_c1_control", "[daemon]\nsocket = \"/tmp/a\\u009b2J.sock\"\n",
       "t.toml:2:10: daemon.socket: must not contain control characters (U+009B at byte 6)"},
      // A review: a syntax error's key is the file's text (here a table header's, with a raw ESC that
      // cleared a terminal); a bare key too long is cut (one of 500 KB made a 500-KB line).
      {"syntax_error_in_a_header_with_an_escape", "[\"a\x1b[2J\"]\nx = 1\n",
       "t.toml:1:4: \"\\\"a\\u001B[2J\\\"\": invalid TOML: error while parsing string: unescaped control characters "
       "other than TAB (U+0009) are explicitly prohibited"},
      {"long_bare_unknown_key", "[access]\n" + std::string(100, 'k') + " = 1\n",
       "t.toml:2:1: access.\"" + std::string(80, 'k') + "...\": unknown key"},
      {"profile_store_with_newline", "[daemon]\nprofile_store = \"/var/lib/gpuqos/p\\n.gqp\"\n",
       "t.toml:2:17: daemon.profile_store: must not contain control characters (U+000A at byte 17)"},
      // A review: toml++ recurses once per dotted part, and 50,000 overflowed the stack (SIGSEGV, on a
      // SIGHUP reload too): refused before it parses, wherever the key is.
      {"deep_dotted_header", "[policy]\nname = \"fifo\"\n[" + deep_key(20000) + "]\n",
       "t.toml:3:1: [a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a...: a key of more than 16 dotted parts (gpuqosd's have "
       "at most three): not read, a longer one could overflow the parser's stack"},
      {"deep_dotted_key", "x = 1 # a.b.c\n  " + deep_key(17) + " = 2\n",
       "t.toml:2:3: a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a...: a key of more than 16 dotted parts (gpuqosd's have "
       "at most three): not read, a longer one could overflow the parser's stack"},
      // The spec's multi-line strings that end in quotes of their own, before the key: the scan
      // stays in step (a review: it lost it, and the crash was back).
      {"deep_dotted_key_after_strings_ending_in_quotes",
       "s = \"\"\"\"This,\" she said, \"is just a pointless statement.\"\"\"\"\n"
       "l = \'\'\'\'That,\' she said, \'is still pointless.\'\'\'\'\n"
       "e = \"\"\"\"\"\"\n"
       "q = \"\"\"two\"\"\"\"\"\n" + deep_key(20000) + " = 1\n",
       "t.toml:5:1: a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a...: a key of more than 16 dotted parts (gpuqosd's have "
       "at most three): not read, a longer one could overflow the parser's stack"},
      {"deep_dotted_key_in_an_inline_table", "x = [1.5, { b = \"a.b.c.d.e.f.g.h.i.j.k.l.m.n.o.p.q.r\", " +
                                                deep_key(17) + " = 1 }]\n",
       "t.toml:1:56: a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a.a...: a key of more than 16 dotted parts (gpuqosd's "
       "have at most three): not read, a longer one could overflow the parser's stack"},
      {"socket_too_long", "[daemon]\nsocket = \"/" + repeat('s', 110) + "\"\n",
       "t.toml:2:10: daemon.socket: must be at most 107 bytes (a Unix socket path; got 111)"},
      {"listen_without_port", "[daemon]\nmetrics_listen = \"9400\"\n",
       "t.toml:2:18: daemon.metrics_listen: must be host:port, like \"127.0.0.1:9400\", or \"\" (off) (got \"9400\")"},
      {"listen_port_out_of_range", "[daemon]\nmetrics_listen = \"localhost:70000\"\n",
       "t.toml:2:18: daemon.metrics_listen: the port must be 1 to 65535 (got \"localhost:70000\")"},
      {"listen_bad_ipv4", "[daemon]\nmetrics_listen = \"300.1.1.1:9400\"\n",
       "t.toml:2:18: daemon.metrics_listen: bad IPv4 address (got \"300.1.1.1:9400\")"},
      {"listen_without_host", "[daemon]\nmetrics_listen = \":9400\"\n",
       "t.toml:2:18: daemon.metrics_listen: the host is missing (use 0.0.0.0 for every interface) (got \":9400\")"},
      {"listen_bad_ipv6", "[daemon]\nmetrics_listen = \"[::g]:9400\"\n",
       "t.toml:2:18: daemon.metrics_listen: bad IPv6 address (got \"[::g]:9400\")"},
      // A user test: "::1:9400" was a "bad host name", and "[fe80::1]:9400" passed the check but not
      // the bind (a link-local address is an interface's).
      {"listen_ipv6_without_brackets", "[daemon]\nmetrics_listen = \"::1:9400\"\n",
       "t.toml:2:18: daemon.metrics_listen: an IPv6 address goes in brackets, like \"[::1]:9400\" (got \"::1:9400\")"},
      {"listen_link_local_without_interface", "[daemon]\nmetrics_listen = \"[fe80::1]:9400\"\n",
       "t.toml:2:18: daemon.metrics_listen: a link-local address needs its interface, like \"[fe80::1%eth0]:9400\" "
       "(got \"[fe80::1]:9400\")"},
      {"listen_interface_of_a_global_address", "[daemon]\nmetrics_listen = \"[2001:db8::1%eth0]:9400\"\n",
       "t.toml:2:18: daemon.metrics_listen: only a link-local address (fe80::/10) takes an interface after '%' "
       "(got \"[2001:db8::1%eth0]:9400\")"},
      {"listen_empty_interface", "[daemon]\nmetrics_listen = \"[fe80::1%]:9400\"\n",
       "t.toml:2:18: daemon.metrics_listen: bad interface after '%' (an interface's name, or its index) (got "
       "\"[fe80::1%]:9400\")"},
      {"listen_interface_index_0", "[daemon]\nmetrics_listen = \"[fe80::1%0]:9400\"\n",
       "t.toml:2:18: daemon.metrics_listen: bad interface after '%' (an interface's name, or its index) (got "
       "\"[fe80::1%0]:9400\")"},
      {"listen_interface_name_from_a_digit", "[daemon]\nmetrics_listen = \"[fe80::1%2abc]:9400\"\n",
       "t.toml:2:18: daemon.metrics_listen: bad interface after '%' (an interface's name, or its index) (got "
       "\"[fe80::1%2abc]:9400\")"},
      {"listen_interface_too_long", "[daemon]\nmetrics_listen = \"[fe80::1%abcdefghijklmnop]:9400\"\n",
       "t.toml:2:18: daemon.metrics_listen: bad interface after '%' (an interface's name, or its index) (got "
       "\"[fe80::1%abcdefghijklmnop]:9400\")"},
      {"listen_interface_url_escaped", "[daemon]\nmetrics_listen = \"[fe80::1%25eth0]:9400\"\n",
       "t.toml:2:18: daemon.metrics_listen: '%25' is how a URL writes '%': write the interface after a plain '%', like "
       "\"[fe80::1%eth0]\" (got \"[fe80::1%25eth0]:9400\")"},
      {"listen_ipv6_without_port", "[daemon]\nmetrics_listen = \"[::1]\"\n",
       "t.toml:2:18: daemon.metrics_listen: must be host:port, like \"127.0.0.1:9400\", or \"\" (off) (got \"[::1]\")"},
      {"negative_save_interval", "[daemon]\nprofile_save_interval_s = -5\n",
       "t.toml:2:27: daemon.profile_save_interval_s: must be >= 0 (got -5)"},
      {"device_not_integer", "[devices]\nordinals = [0, \"1\"]\n",
       "t.toml:2:16: devices.ordinals[1]: must be an integer (got a string)"},
      {"device_listed_twice", "[devices]\nordinals = [0, 0]\n", "t.toml:2:16: devices.ordinals[1]: 0 is listed twice"},
      {"negative_device", "[devices]\nordinals = [-1]\n",
       "t.toml:2:13: devices.ordinals[0]: must be 0 to 63 (got -1)"},
      {"device_beyond_the_protocol", "[devices]\nordinals = [0, 64]\n",
       "t.toml:2:16: devices.ordinals[1]: must be 0 to 63 (got 64)"},
      {"no_devices", "[devices]\nordinals = []\n",
       "t.toml:2:12: devices.ordinals: must list at least one device (leave it out to manage every device)"},
      {"no_device_uuids", "[devices]\nuuids = []\n",
       "t.toml:2:9: devices.uuids: must list at least one GPU (leave it out to manage every device)"},
      {"device_uuid_not_a_uuid", "[devices]\nuuids = [\"5053021f\"]\n",
       "t.toml:2:10: devices.uuids[0]: must be a GPU UUID as nvidia-smi -L writes it, or a prefix of one, like "
       "\"GPU-5053021f\" (got \"5053021f\")"},
      {"device_uuid_not_a_string", "[devices]\nuuids = [3]\n",
       "t.toml:2:10: devices.uuids[0]: must be a GPU UUID as nvidia-smi -L writes it, or a prefix of one, like "
       "\"GPU-5053021f\" (got an integer)"},
      {"device_uuid_dash_misplaced", "[devices]\nuuids = [\"GPU-5053-021f\"]\n",
       "t.toml:2:10: devices.uuids[0]: must be a GPU UUID as nvidia-smi -L writes it, or a prefix of one, like "
       "\"GPU-5053021f\" (got \"GPU-5053-021f\")"},
      {"device_uuid_too_long", "[devices]\nuuids = [\"GPU-5053021f-f19c-8f3e-af75-ba138af7d6089\"]\n",
       "t.toml:2:10: devices.uuids[0]: must be a GPU UUID as nvidia-smi -L writes it, or a prefix of one, like "
       "\"GPU-5053021f\" (got \"GPU-5053021f-f19c-8f3e-af75-ba138af7d6089\")"},
      {"device_uuid_twice", "[devices]\nuuids = [\"GPU-ab\", \"GPU-AB\"]\n",
       "t.toml:2:20: devices.uuids[1]: \"GPU-AB\" is listed twice"},
      {"too_many_device_uuids",
       "[devices]\nuuids = [\"GPU-0\", \"GPU-1\", \"GPU-2\", \"GPU-3\", \"GPU-4\", \"GPU-5\", \"GPU-6\", \"GPU-7\", "
       "\"GPU-8\", \"GPU-9\", \"GPU-a\", \"GPU-b\", \"GPU-c\", \"GPU-d\", \"GPU-e\", \"GPU-f\", \"GPU-00\"]\n",
       "t.toml:2:9: devices.uuids: must list at most 16 GPUs (got 17)"},
      {"job_without_name", "[[job]]\ntarget_ms = 5\n", "t.toml:1:1: job[0].name: missing (every job needs a name)"},
      {"job_name_with_space", "[[job]]\nname = \"bert infer\"\n",
       "t.toml:2:8: job[0].name: must be 1 to 63 of A-Z a-z 0-9 . _ - (got \"bert infer\")"},
      // A user test: a name's escapes (a terminal's title and clear-screen, a newline) went out raw, so
      // `gpuqos status` cleared the screen, and the log read a second problem of its own.
      {"job_name_with_control_characters", "[[job]]\nname = \"a\\u001b]2;x\\u0007\\\"\\\\b\\nfake\"\n",
       "t.toml:2:8: job[0].name: must be 1 to 63 of A-Z a-z 0-9 . _ - (got \"a\\u001B]2;x\\u0007\\\"\\\\b\\nfake\")"},
      {"job_name_with_a_c1_control", "[[job]]\nname = \"a\\u009B2J\\u00e9\"\n",  // CSI to many terminals; é is not
       "t.toml:2:8: job[0].name: must be 1 to 63 of A-Z a-z 0-9 . _ - (got \"a\\u009B2J\xc3\xa9\")"},
      {"job_name_too_long", "[[job]]\nname = \"" + repeat('j', 64) + "\"\n",
       "t.toml:2:8: job[0].name: must be 1 to 63 of A-Z a-z 0-9 . _ - (got \"" + repeat('j', 64) + "\")"},
      {"duplicate_job", "[[job]]\nname = \"a\"\n[[job]]\nname = \"b\"\n[[job]]\n  name = \"a\"\n",
       "t.toml:6:10: job[2].name: duplicate job \"a\" (first defined at t.toml:2:8)"},
      {"percentile_100", "[[job]]\nname = \"a\"\npercentile = 100\n",
       "t.toml:3:14: job[0].percentile: must be >= 50 and < 100 (got 100)"},
      {"percentile_below_50", "[[job]]\nname = \"a\"\npercentile = \"p40\"\n",
       "t.toml:3:14: job[0].percentile: must be >= 50 and < 100 (got 40)"},
      {"percentile_malformed", "[[job]]\nname = \"a\"\npercentile = \"p9x\"\n",
       "t.toml:3:14: job[0].percentile: must be like 99, 99.9 or \"p99\" (got \"p9x\")"},
      {"percentile_wrong_type", "[[job]]\nname = \"a\"\npercentile = true\n",
       "t.toml:3:14: job[0].percentile: must be like 99, 99.9 or \"p99\" (got a boolean)"},
      {"infinite_target", "[[job]]\nname = \"a\"\ntarget_ms = inf\n",
       "t.toml:3:13: job[0].target_ms: must be a finite number (got inf)"},
      {"target_over_an_hour", "[[job]]\nname = \"a\"\ntarget_ms = 3600001\n",
       "t.toml:3:13: job[0].target_ms: must be <= 3600000 (an hour) (got 3600001)"},
      {"zero_target", "[[job]]\nname = \"a\"\ntarget_ms = 0\n", "t.toml:3:13: job[0].target_ms: must be >= 0.001 (got 0)"},
      // Would truncate to 0 ns in the daemon (and the QoS tracker rounds where the policy truncates).
      {"sub_microsecond_target", "[[job]]\nname = \"a\"\ntarget_ms = 1e-7\n",
       "t.toml:3:13: job[0].target_ms: must be >= 0.001 (got 1e-07)"},
      {"tiny_weight", "[[job]]\nname = \"a\"\nweight = 1e-6\n", "t.toml:3:10: job[0].weight: must be >= 0.001 (got 1e-06)"},
      {"negative_weight", "[[job]]\nname = \"a\"\nweight = -1.5\n",
       "t.toml:3:10: job[0].weight: must be >= 0.001 (got -1.5)"},
      {"huge_weight", "[[job]]\nname = \"a\"\nweight = 1e308\n", "t.toml:3:10: job[0].weight: must be <= 1e+06 (got 1e+308)"},
      {"negative_job_margin", "[[job]]\nname = \"a\"\nsafety_margin_ms = -1\n",
       "t.toml:3:20: job[0].safety_margin_ms: must be >= 0 (got -1)"},
      {"job_margin_as_string", "[[job]]\nname = \"a\"\nsafety_margin_ms = \"2ms\"\n",
       "t.toml:3:20: job[0].safety_margin_ms: must be a number (got a string) (the unit is in the key's name, "
       "milliseconds: write safety_margin_ms = 2)"},
      {"bad_priority_class", "[[job]]\nname = \"a\"\nallowed_priority = \"medium\"\n",
       "t.toml:3:20: job[0].allowed_priority: must be one of \"low\", \"high\" (got \"medium\")"},
      {"job_as_single_table", "[job]\nname = \"a\"\n",
       "t.toml:1:1: job: must be an array of tables, written [[job]] (got a table)"},
      {"job_element_not_table", "job = [1]\n", "t.toml:1:8: job[0]: must be a table (got an integer)"},
      {"uids_not_array", "[access]\nhigh_priority_uids = \"root\"\n",
       "t.toml:2:22: access.high_priority_uids: must be an array (got a string)"},
      {"negative_gid", "[access]\nhigh_priority_gids = [10, -3]\n",
       "t.toml:2:27: access.high_priority_gids[1]: must be 0 to 4294967294 (got -3)"},
      {"access_key_typo", "[access]\nhigh_priority_users = [0]\n",
       "t.toml:2:1: access.high_priority_users: unknown key (did you mean \"high_priority_uids\"?)"},
  };
  return cases;
}

void PrintTo(const BadCase& bad, std::ostream* out) { *out << bad.name; }

class MalformedConfig : public ::testing::TestWithParam<BadCase> {};

TEST_P(MalformedConfig, FailsWithThisMessage) {
  const BadCase& bad = GetParam();
  auto result = parse_config(bad.text, "t.toml");
  ASSERT_FALSE(result.ok()) << "accepted:\n" << bad.text;
  ASSERT_EQ(result.errors().size(), 1u) << result.error();
  EXPECT_EQ(result.errors()[0], bad.message);
}

INSTANTIATE_TEST_SUITE_P(Table, MalformedConfig, ::testing::ValuesIn(bad_cases()),
                         [](const ::testing::TestParamInfo<BadCase>& info) { return std::string(info.param.name); });

}  // namespace
}  // namespace gpuqos::config
