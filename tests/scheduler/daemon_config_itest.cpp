// Integration tests of what gpuqosd's config file decides at run time: who may run high priority
// (checked at registration), what the HelloReply tells the shim, and reloading the file on SIGHUP.
// Real daemon processes with --config, fake clients written with ipc alone.
#include <gtest/gtest.h>
#include <grp.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <fstream>
#include <optional>

#include "daemon_harness.h"
#include "gpuqos/scheduler/status.h"

namespace gpuqos::testing {
namespace {

using ipc::Priority;

// A daemon running `config_text` from <its dir>/gpuqosd.toml, with extra command-line options.
class ConfiguredDaemon {
 public:
  explicit ConfiguredDaemon(const std::string& config_text, std::vector<std::string> extra_args = {})
      : file_(write(config_text)), daemon_(args(file_, std::move(extra_args))) {}

  DaemonProcess& operator*() { return daemon_; }
  DaemonProcess* operator->() { return &daemon_; }
  const std::filesystem::path& file() const { return file_; }

  // Rewrites the file and sends SIGHUP; waits until the daemon logged the outcome (`expect`).
  bool reload(const std::string& config_text, const std::string& expect) {
    std::ofstream(file_, std::ios::trunc) << config_text;
    const std::size_t before = occurrences(expect);
    if (::kill(daemon_.pid(), SIGHUP) != 0) return false;
    return eventually([&] { return occurrences(expect) > before; }, 5s);
  }
  std::size_t occurrences(const std::string& text) const {
    const std::string log = daemon_.log();
    std::size_t n = 0;
    for (auto at = log.find(text); at != std::string::npos; at = log.find(text, at + 1)) ++n;
    return n;
  }

 private:
  static std::filesystem::path write(const std::string& text) {
    static TempDir dir("gpuqosd-config");  // outlives every daemon of this test program
    static int count = 0;
    const auto file = dir.path() / ("gpuqosd-" + std::to_string(++count) + ".toml");
    std::ofstream(file) << text;
    return file;
  }
  static std::vector<std::string> args(const std::filesystem::path& file, std::vector<std::string> extra) {
    extra.insert(extra.begin(), {"--config", file.string()});
    return extra;
  }

  std::filesystem::path file_;
  DaemonProcess daemon_;
};

std::string fifo(int max_outstanding, const std::string& more = "") {
  return "[policy]\nname = \"fifo\"\n[policy.fifo]\nmax_outstanding = " + std::to_string(max_outstanding) + "\n" +
         more;
}

const std::string kTrainOnlyLow = "[[job]]\nname = \"train\"\nallowed_priority = \"low\"\n";

TEST(Access, AJobAllowedOnlyLowThatClaimsHighRunsLowAndStatusShowsBoth) {
  ConfiguredDaemon daemon(fifo(0, kTrainOnlyLow));
  FakeClient train(daemon->socket(), Priority::high, "train");
  EXPECT_EQ(train.reply().effective_priority, Priority::low);
  FakeClient serve(daemon->socket(), Priority::high, "serve");
  EXPECT_EQ(serve.reply().effective_priority, Priority::high) << "a permitted claim stays high";
  const auto status = daemon->status();
  ASSERT_EQ(status["clients"].size(), 2u) << status.dump(1);
  EXPECT_EQ(status["clients"][0]["job"], "train");
  EXPECT_EQ(status["clients"][0]["priority"], "low");
  EXPECT_EQ(status["clients"][0]["claimed_priority"], "high");
  EXPECT_EQ(status["clients"][1]["priority"], "high");
  EXPECT_EQ(status["clients"][1]["claimed_priority"], "high");
  const std::string warning = "job 'train' pid " + std::to_string(::getpid()) + " uid " + std::to_string(::getuid()) +
                              ": claims high priority, but its [[job]] entry says allowed_priority";
  EXPECT_NE(daemon->log().find(warning), std::string::npos) << daemon->log();
  EXPECT_EQ(daemon->log().find("job 'serve' pid " + std::to_string(::getpid()) + " uid"), std::string::npos);

  // Held as low priority: it waits for grants like any best-effort client.
  train.name_kernel(1, "k");
  train.post(FakeClient::kernel(1));
  EXPECT_TRUE(train.wait_granted(1));
}

// Registers a high-priority client `job` from a forked child running as uid/gid (if they differ
// from ours: the test runs as root), which then waits to be killed. The effective priority the
// daemon answered (none if the child could not register) and the child's pid, for a ForkedChild.
struct Registered {
  pid_t pid = -1;
  std::optional<Priority> effective;
};
Registered register_high_as(uid_t uid, gid_t gid, const std::string& socket, const std::string& job) {
  int report[2];
  if (::pipe(report) != 0) return {};
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::close(report[0]);
    char answer = 'x';
    try {
      if (uid != ::getuid() && (::setgroups(0, nullptr) != 0 || ::setgid(gid) != 0 || ::setuid(uid) != 0)) ::_exit(1);
      FakeClient client(socket, Priority::high, job);
      answer = client.reply().effective_priority == Priority::high ? 'h' : 'l';
      [[maybe_unused]] auto written = ::write(report[1], &answer, 1);
      ::pause();
    } catch (...) {
      [[maybe_unused]] auto written = ::write(report[1], &answer, 1);
    }
    ::_exit(1);
  }
  ::close(report[1]);
  char answer = 'x';
  const bool got = pid > 0 && ::read(report[0], &answer, 1) == 1;
  ::close(report[0]);
  if (!got || answer == 'x') return {pid, std::nullopt};
  return {pid, answer == 'h' ? Priority::high : Priority::low};
}

TEST(Access, AClaimFromAUidTheAccessListsLeaveOutIsDowngraded) {
  // Root may always run high priority: as root, the claim comes from a child that became nobody.
  const bool root = ::getuid() == 0;
  const uid_t uid = root ? 65534 : ::getuid();
  const gid_t gid = root ? 65534 : ::getgid();
  const std::string access = "[access]\nhigh_priority_uids = [" + std::to_string(uid + 1) + "]\n";
  ConfiguredDaemon daemon(fifo(0, access));
  std::filesystem::permissions(daemon->dir(), std::filesystem::perms::owner_all | std::filesystem::perms::others_exec |
                                                  std::filesystem::perms::group_exec);  // nobody reaches the socket
  const Registered registered = register_high_as(uid, gid, daemon->socket(), "serve");
  ForkedChild child(registered.pid);
  ASSERT_TRUE(registered.effective) << daemon->log();
  EXPECT_EQ(*registered.effective, Priority::low);
  FakeClient low(daemon->socket(), Priority::low, "batch");
  EXPECT_EQ(low.reply().effective_priority, Priority::low);
  const auto serve = daemon->client_with_pid(child.pid());
  ASSERT_FALSE(serve.is_null()) << daemon->status().dump(1);
  EXPECT_EQ(serve["uid"], uid);
  EXPECT_EQ(serve["priority"], "low");
  EXPECT_EQ(serve["claimed_priority"], "high");
  EXPECT_EQ(daemon->client_with_pid(::getpid())["claimed_priority"], "low");
  const std::string warning = "job 'serve' pid " + std::to_string(child.pid()) + " uid " + std::to_string(uid) +
                              ": claims high priority, but [access] lets neither uid " + std::to_string(uid);
  EXPECT_NE(daemon->log().find(warning), std::string::npos) << daemon->log();
}

TEST(Access, AListedUidOrPrimaryGroupKeepsItsHighClaim) {
  ConfiguredDaemon by_uid(fifo(0, "[access]\nhigh_priority_uids = [" + std::to_string(::getuid()) + "]\n"));
  FakeClient a(by_uid->socket(), Priority::high, "serve");
  EXPECT_EQ(a.reply().effective_priority, Priority::high);
  EXPECT_EQ(by_uid->status()["clients"][0]["priority"], "high");
  ConfiguredDaemon by_gid(fifo(0, "[access]\nhigh_priority_gids = [" + std::to_string(::getgid()) + "]\n"));
  FakeClient b(by_gid->socket(), Priority::high, "serve");
  EXPECT_EQ(b.reply().effective_priority, Priority::high);
}

TEST(HelloReply, CarriesTheCopyChunkSizeWhateverThePolicy) {
  ConfiguredDaemon configured(fifo(0, "[policy.baymax]\ncopy_chunk_bytes = \"1MiB\"\n"));
  FakeClient low(configured->socket(), Priority::low, "batch");
  EXPECT_EQ(low.reply().version_minor, ipc::kProtocolVersionMinor);
  EXPECT_EQ(low.reply().copy_chunk_bytes, 1u << 20);
  DaemonProcess defaults;
  FakeClient other(defaults.socket(), Priority::low, "batch");
  EXPECT_EQ(other.reply().copy_chunk_bytes, 4u << 20) << "the default of [policy.baymax]";
}

// [devices] ordinals: the devices whose work the shim posts, as a bit mask in the HelloReply.
TEST(HelloReply, NamesTheDevicesTheConfigManages) {
  ConfiguredDaemon listed(fifo(0, "[devices]\nordinals = [2, 0, 63]\n"));
  FakeClient low(listed->socket(), Priority::low, "batch");
  EXPECT_EQ(low.reply().managed_devices, (std::uint64_t{1} << 63) | 0b101u);
  DaemonProcess defaults;
  FakeClient other(defaults.socket(), Priority::low, "batch");
  EXPECT_EQ(other.reply().managed_devices, ipc::kAllDevices) << "no [devices]: every device";
  EXPECT_TRUE(ipc::managed_uuids(other.reply()).empty());
  ConfiguredDaemon by_uuid(fifo(0, "[devices]\nuuids = [\"GPU-5053021F\", \"MIG-8601f82c-036c\"]\n"));
  FakeClient named(by_uuid->socket(), Priority::low, "batch");
  EXPECT_EQ(named.reply().managed_devices, 0u) << "[devices] uuids alone: no ordinal";
  EXPECT_EQ(ipc::managed_uuids(named.reply()), (std::vector<std::string>{"5053021f", "8601f82c-036c"}));
  // A 1.7 shim cannot read them, but its ops say their UUIDs: it is sent every device rather than
  // none, and told of. One older still says no UUID (its ops would be filed by ordinal): it keeps
  // the ordinals, and the GPUs named by UUID run unscheduled for it, which is said.
  FakeClient older(by_uuid->socket(), Priority::high, "serve", 7);
  EXPECT_EQ(older.reply().managed_devices, ipc::kAllDevices);
  EXPECT_TRUE(eventually([&] { return by_uuid->log().find("it posts the work of every device") != std::string::npos; }, 5s))
      << by_uuid->log();
  FakeClient oldest(by_uuid->socket(), Priority::high, "serve", 6);
  EXPECT_EQ(oldest.reply().managed_devices, 0u);
  EXPECT_TRUE(eventually([&] { return by_uuid->log().find("the GPUs they name run unscheduled for it") != std::string::npos; }, 5s))
      << by_uuid->log();
}

TEST(Reload, SighupAppliesANewFifoLimitAndJobTargets) {
  const std::string serve = "[[job]]\nname = \"serve\"\ntarget_ms = 20.0\n";
  ConfiguredDaemon daemon(fifo(1, serve), {"--credit-ops", "0"});
  FakeClient high(daemon->socket(), Priority::high, "serve");
  FakeClient low(daemon->socket(), Priority::low, "train");
  EXPECT_NE(daemon->log().find("target 20 ms at p99"), std::string::npos) << daemon->log();
  low.name_kernel(1, "k");
  low.post(FakeClient::kernel(1));
  ASSERT_TRUE(low.wait_granted(1));
  low.post(FakeClient::kernel(2));
  EXPECT_FALSE(low.wait_granted(2, 100ms)) << "max_outstanding = 1";

  const std::string serve35 = "[[job]]\nname = \"serve\"\ntarget_ms = 35.0\npercentile = 99.9\n";
  ASSERT_TRUE(daemon.reload(fifo(2, serve35), "config reloaded from " + daemon.file().string())) << daemon->log();
  EXPECT_TRUE(low.wait_granted(2)) << "the second slot opened";
  EXPECT_NE(daemon->log().find("max_outstanding_ops 2"), std::string::npos) << daemon->log();
  const std::string retold = "job 'serve' pid " + std::to_string(::getpid()) + ": target 35 ms at p99.9";
  EXPECT_TRUE(eventually([&] { return daemon->log().find(retold) != std::string::npos; })) << daemon->log();
  EXPECT_EQ(daemon->status()["clients"][0]["priority"], "high");
  // Each connected job whose settings change is said once, the old ones with the new (a user test
  // changed only a weight, and the log said nothing of it); a job whose settings stay is not.
  EXPECT_EQ(daemon.occurrences("reload of " + daemon.file().string() +
                               ": job 'serve' (connected) now has target 35 ms at p99.9, weight 1 (was target 20 ms at "
                               "p99, weight 1)"),
            1u)
      << daemon->log();
  ASSERT_TRUE(daemon.reload(fifo(2, serve35 + "[[job]]\nname = \"train\"\nweight = 3\n"),
                            "config reloaded from " + daemon.file().string()))
      << daemon->log();
  EXPECT_EQ(daemon.occurrences("job 'train' (connected) now has no target, weight 3 (was no target, weight 1)"), 1u)
      << daemon->log();
  EXPECT_EQ(daemon.occurrences("job 'serve' (connected) now has"), 1u) << "unchanged: not said again\n" << daemon->log();
}

// Under baymax, a job that runs high under a name the config does not list (a typo in GPUQOS_JOB)
// has no target, so nothing is held for it: said once a job, with the listed name it is close to,
// even when a low-priority helper of the job came first. Not said of a listed job without a target
// (chosen), of a second high process of the job, nor under fifo (no policy there uses targets).
TEST(Reload, AHighPriorityJobTheConfigDoesNotListIsWarnedOfOnceUnderBaymax) {
  const std::string jobs = "[[job]]\nname = \"bert-infer\"\ntarget_ms = 20.0\n[[job]]\nname = \"plain\"\n";
  const std::string unlisted = "job 'bert-infr' pid " + std::to_string(::getpid()) +
                               ": runs high priority, but no [[job]] of the config is named 'bert-infr' (did you mean "
                               "\"bert-infer\"?): with no latency target, best-effort work is not held for its queries";
  {
    ConfiguredDaemon daemon("[policy]\nname = \"baymax\"\n" + jobs);
    FakeClient helper(daemon->socket(), Priority::low, "bert-infr");
    ASSERT_TRUE(eventually([&] { return daemon->status()["clients"].size() == 1; })) << daemon->status().dump(1);
    FakeClient typo(daemon->socket(), Priority::high, "bert-infr");
    EXPECT_TRUE(eventually([&] { return daemon.occurrences(unlisted) == 1; })) << daemon->log();
    FakeClient second(daemon->socket(), Priority::high, "bert-infr");
    FakeClient plain(daemon->socket(), Priority::high, "plain");
    FakeClient listed(daemon->socket(), Priority::high, "bert-infer");
    ASSERT_TRUE(eventually([&] { return daemon->status()["clients"].size() == 5; })) << daemon->status().dump(1);
    EXPECT_EQ(daemon.occurrences("runs high priority, but no [[job]]"), 1u) << daemon->log();
  }
  ConfiguredDaemon daemon(fifo(0, jobs));
  FakeClient typo(daemon->socket(), Priority::high, "bert-infr");
  ASSERT_TRUE(eventually([&] { return daemon->status()["clients"].size() == 1; })) << daemon->status().dump(1);
  EXPECT_EQ(daemon.occurrences("runs high priority, but no [[job]]"), 0u) << daemon->log();
}

// A job the config gives a target that runs low (started without --priority high) is neither
// protected nor measured against it: said at registration and again at each reload, but not while a
// process of the job runs high (its low ones are helpers). A reload that takes a connected job's
// target away (its [[job]] renamed by a typo) is said too.
TEST(Reload, AJobWithATargetRunningLowAndATargetDroppedAreWarnedOf) {
  const std::string serve = "[[job]]\nname = \"serve\"\ntarget_ms = 20.0\n";
  ConfiguredDaemon daemon(fifo(0, serve));
  FakeClient low(daemon->socket(), Priority::low, "serve");
  const std::string unprotected = "job 'serve' pid " + std::to_string(::getpid()) +
                                  ": runs as low priority, but the config gives it a latency target (target 20 ms at p99";
  EXPECT_TRUE(eventually([&] { return daemon.occurrences(unprotected) == 1; })) << daemon->log();
  EXPECT_NE(daemon->log().find("GPUQOS_PRIORITY=high (gpuqos run --priority high)"), std::string::npos) << daemon->log();
  // Each reload re-tells the policy every client's targets (a debug line each), then warns.
  const std::string retold = "debug job 'serve' pid " + std::to_string(::getpid());
  ASSERT_TRUE(daemon.reload(fifo(0, serve), "config reloaded from")) << daemon->log();
  EXPECT_TRUE(eventually([&] { return daemon.occurrences(unprotected) == 2; })) << daemon->log();

  {
    FakeClient high(daemon->socket(), Priority::high, "serve");  // the job is protected now
    FakeClient helper(daemon->socket(), Priority::low, "serve");
    const std::size_t retolds = daemon.occurrences(retold);
    ASSERT_TRUE(daemon.reload(fifo(0, serve), "config reloaded from")) << daemon->log();
    ASSERT_TRUE(eventually([&] { return daemon.occurrences(retold) >= retolds + 3; })) << daemon->log();
    EXPECT_EQ(daemon.occurrences(unprotected), 2u) << "not beside a high process\n" << daemon->log();
  }
  ASSERT_TRUE(eventually([&] { return daemon->status()["clients"].size() == 1; })) << daemon->status().dump(1);

  const std::string renamed = "[[job]]\nname = \"serve-typo\"\ntarget_ms = 20.0\n";
  const std::size_t retolds = daemon.occurrences(retold);
  ASSERT_TRUE(daemon.reload(fifo(0, renamed), "config reloaded from")) << daemon->log();
  EXPECT_NE(daemon->log().find("reload of " + daemon.file().string() +
                               ": job 'serve' is connected and had a latency target (target 20 ms at p99, weight 1); "
                               "the new config gives it none, so it is no longer held to one"),
            std::string::npos)
      << daemon->log();
  ASSERT_TRUE(eventually([&] { return daemon.occurrences(retold) > retolds; })) << daemon->log();
  EXPECT_EQ(daemon.occurrences(unprotected), 2u) << "no target now: nothing to protect\n" << daemon->log();
}

// A reload that would not let a running high-priority process claim high any more (allowed_priority,
// [access]) cannot lower it (its shim was told at registration, and a high one does not wait for
// grants): it is said, each process, so the operator knows to restart it. A user test revoked it and
// the log said nothing.
TEST(Reload, AHighPriorityProcessTheNewConfigWouldLowerIsSaidToKeepItsPriority) {
  const std::string serve = "[[job]]\nname = \"serve\"\ntarget_ms = 20.0\n";
  ConfiguredDaemon daemon(fifo(0, serve));
  FakeClient high(daemon->socket(), Priority::high, "serve");
  FakeClient other(daemon->socket(), Priority::high, "rank");
  ASSERT_TRUE(eventually([&] { return daemon->status()["clients"].size() == 2; })) << daemon->status().dump(1);
  ASSERT_TRUE(daemon.reload(fifo(0, serve + "allowed_priority = \"low\"\n"), "config reloaded from")) << daemon->log();
  const std::string kept = "reload of " + daemon.file().string() + ": job 'serve' pid " + std::to_string(::getpid()) +
                           " uid " + std::to_string(::getuid()) + " runs high priority, which the new config would not "
                           "give it (";
  EXPECT_EQ(daemon.occurrences(kept), 1u) << daemon->log();
  EXPECT_NE(daemon->log().find("it keeps high priority until it registers again (restart it to apply)"),
            std::string::npos)
      << daemon->log();
  EXPECT_EQ(daemon.occurrences("which the new config would not give it"), 1u) << "rank may still run high\n"
                                                                               << daemon->log();
  EXPECT_EQ(daemon->status()["clients"][0]["priority"], "high") << "kept: it is not told";
  ASSERT_TRUE(daemon.reload(fifo(0, serve), "config reloaded from")) << daemon->log();
  EXPECT_EQ(daemon.occurrences(kept), 1u) << "allowed again: nothing to say\n" << daemon->log();
}

TEST(Reload, AMalformedFileKeepsTheRunningConfigAndALaterGoodOneWorks) {
  ConfiguredDaemon daemon(fifo(1), {"--credit-ops", "0"});
  FakeClient low(daemon->socket(), Priority::low, "train");
  low.name_kernel(1, "k");
  low.post(FakeClient::kernel(1));
  ASSERT_TRUE(low.wait_granted(1));
  low.post(FakeClient::kernel(2));

  const std::string failed = "reload of " + daemon.file().string() + " failed, keeping the running config";
  ASSERT_TRUE(daemon.reload(fifo(-3), failed)) << daemon->log();
  EXPECT_NE(daemon->log().find(daemon.file().string() + ":4:19: policy.fifo.max_outstanding"), std::string::npos)
      << "file:line:column: key\n" << daemon->log();
  ASSERT_TRUE(daemon.reload("[policy\nname = \"fifo\"\n", failed)) << daemon->log();
  EXPECT_NE(daemon->log().find(daemon.file().string() + ":1:8: invalid TOML"), std::string::npos) << daemon->log();
  EXPECT_TRUE(daemon->process().running());
  EXPECT_FALSE(low.wait_granted(2, 100ms)) << "still max_outstanding = 1";
  EXPECT_EQ(daemon->status()["daemon"]["policy"], "fifo");

  ASSERT_TRUE(daemon.reload(fifo(2), "config reloaded from")) << daemon->log();
  EXPECT_TRUE(low.wait_granted(2));
}

// What a reload did is seen outside the log: the status says the file, when the running config was
// read, and a refused reload with its problems (each its own log line); an emptied file (it loads)
// is warned of for the targets it drops.
TEST(Reload, TheStatusSaysWhetherTheLastReloadWasAppliedAndAnEmptiedFileIsWarnedOf) {
  const std::string serve = "[[job]]\nname = \"serve\"\ntarget_ms = 20.0\n";
  ConfiguredDaemon daemon(fifo(1, serve));
  nlohmann::json config = daemon->status()["daemon"]["config"];
  EXPECT_EQ(config["path"], daemon.file().string());
  EXPECT_EQ(config["last_reload_ok"], true);
  EXPECT_EQ(config["last_reload_unix_s"], 0);
  const std::int64_t started = config["loaded_unix_s"];
  EXPECT_GT(started, 1'700'000'000) << config.dump();

  const std::string failed = "reload of " + daemon.file().string() + " failed, keeping the running config";
  ASSERT_TRUE(daemon.reload(fifo(-3, "[[job]]\nname = \"serve\"\ntarget_ms = -1.0\n"), failed)) << daemon->log();
  config = daemon->status()["daemon"]["config"];
  EXPECT_EQ(config["last_reload_ok"], false);
  EXPECT_GE(config["last_reload_unix_s"].get<std::int64_t>(), started);
  EXPECT_EQ(config["loaded_unix_s"], started) << "the config running is still the first";
  const std::string error = config["last_reload_error"];
  EXPECT_NE(error.find("policy.fifo.max_outstanding"), std::string::npos) << error;
  EXPECT_NE(error.find("job[0].target_ms"), std::string::npos) << error;
  const std::string log = daemon->log();
  EXPECT_NE(log.find(failed + ": 2 problems:\n"), std::string::npos) << log;
  // Each problem on a line of its own, after the time and level: not a bare continuation line.
  const std::size_t problem = log.find(daemon.file().string() + ":7:13: job[0].target_ms");
  ASSERT_NE(problem, std::string::npos) << log;
  const std::size_t line_start = log.rfind('\n', problem) + 1;
  EXPECT_NE(log.substr(line_start, problem - line_start).find("error"), std::string::npos) << log;
  const std::string table = scheduler::render_status_table(daemon->status());
  EXPECT_NE(table.find("FAILED and was not applied: " + daemon.file().string()), std::string::npos) << table;
  EXPECT_NE(table.find("(and 1 more: gpuqosd --check-config " + daemon.file().string() + ")"), std::string::npos) << table;

  // Many problems: the status keeps the first 8 and the count (one control record must hold it).
  std::string many = fifo(1);
  for (int i = 0; i < 10; ++i) many += "[[job]]\nname = \"j" + std::to_string(i) + "\"\ntarget_ms = -1.0\n";
  ASSERT_TRUE(daemon.reload(many, failed)) << daemon->log();
  const std::string kept = daemon->status()["daemon"]["config"]["last_reload_error"];
  EXPECT_EQ(std::count(kept.begin(), kept.end(), '\n'), 8) << kept;
  EXPECT_TRUE(kept.ends_with("\n... and 2 more")) << kept;
  // And the log the first 100 (a megabyte of the wrong file logged 110,000 lines).
  std::string lots = fifo(1);
  for (int i = 0; i < 150; ++i) lots += "[[job]]\nname = \"k" + std::to_string(i) + "\"\ntarget_ms = -1.0\n";
  ASSERT_TRUE(daemon.reload(lots, failed + ": 150 problems:")) << daemon->log();
  ASSERT_TRUE(eventually([&] { return daemon->log().find(" more (gpuqosd --check-config") != std::string::npos; }))
      << daemon->log();
  EXPECT_NE(daemon->log().find("  ... and 50 more (gpuqosd --check-config " + daemon.file().string() + " lists them all)"),
            std::string::npos)
      << daemon->log();
  EXPECT_NE(daemon->log().find("job[99].target_ms"), std::string::npos);
  EXPECT_EQ(daemon->log().find("job[100].target_ms"), std::string::npos);
  // Past config's 1,000, the count is still of them all (a review: it read "1001 problems", the
  // line counting the rest taken for one, and "lists them all").
  std::string capped = fifo(1);
  for (int i = 0; i < 1200; ++i) capped += "[[job]]\nname = \"c" + std::to_string(i) + "\"\ntarget_ms = -1.0\n";
  ASSERT_TRUE(daemon.reload(capped, failed + ": 1200 problems:")) << daemon->log();
  ASSERT_TRUE(eventually([&] { return daemon->log().find("lists the first 1000)") != std::string::npos; })) << daemon->log();
  EXPECT_NE(daemon->log().find("  ... and 1100 more (gpuqosd --check-config " + daemon.file().string() +
                               " lists the first 1000)"),
            std::string::npos)
      << daemon->log();
  const std::string kept_capped = daemon->status()["daemon"]["config"]["last_reload_error"];
  EXPECT_TRUE(kept_capped.ends_with("\n... and 1192 more")) << kept_capped;

  ASSERT_TRUE(daemon.reload("", "config reloaded from")) << daemon->log();
  EXPECT_NE(daemon->log().find("it names no [[job]], the running config named 1: every latency target"), std::string::npos)
      << daemon->log();
  config = daemon->status()["daemon"]["config"];
  EXPECT_EQ(config["last_reload_ok"], true);
  EXPECT_EQ(config["last_reload_error"], "");
}

TEST(Reload, CommandLineOptionsStillWinAndAPolicyChangeNeedsARestart) {
  const std::string other_socket = "[daemon]\nsocket = \"/nonexistent/other.sock\"\nlog_level = \"error\"\n";
  ConfiguredDaemon daemon(other_socket + "[policy]\nname = \"fifo\"\n", {"--policy", "priority"});
  EXPECT_EQ(daemon->status()["daemon"]["policy"], "priority");
  FakeClient serve(daemon->socket(), Priority::high, "serve");
  ASSERT_TRUE(daemon.reload(other_socket + "[policy]\nname = \"fifo\"\n[policy.fifo]\nmax_outstanding = 3\n",
                            "config reloaded from"))
      << daemon->log();
  EXPECT_EQ(daemon->log().find("needs a restart"), std::string::npos) << "--socket and --policy still win\n"
                                                                      << daemon->log();
  EXPECT_EQ(daemon->status()["daemon"]["policy"], "priority");
  EXPECT_EQ(daemon->status()["daemon"]["socket"], daemon->socket());
  const std::string retold = "debug job 'serve' pid " + std::to_string(::getpid()) + ": no target";
  EXPECT_TRUE(eventually([&] { return daemon->log().find(retold) != std::string::npos; }))
      << "--log-level debug still wins over the file's error\n" << daemon->log();

  ConfiguredDaemon plain("[policy]\nname = \"fifo\"\n");
  ASSERT_TRUE(plain.reload("[policy]\nname = \"priority\"\n" + kTrainOnlyLow, "needs a restart")) << plain->log();
  EXPECT_NE(plain->log().find("policy change from fifo to priority needs a restart"), std::string::npos)
      << plain->log();
  EXPECT_TRUE(eventually([&] { return plain.occurrences("config reloaded from") == 1; })) << plain->log();
  EXPECT_EQ(plain->status()["daemon"]["policy"], "fifo");
  const nlohmann::json config = plain->status()["daemon"]["config"];
  EXPECT_EQ(config["last_reload_ok"], true) << "applied, but for the policy";
  EXPECT_EQ(config["needs_restart"], "the policy (priority)") << config.dump();
  const std::string restart = " changes the policy (priority), which only a restart applies";
  EXPECT_NE(scheduler::render_status_table(plain->status()).find("; the config read at "), std::string::npos);
  EXPECT_NE(scheduler::render_status_table(plain->status()).find(restart), std::string::npos);
  // A later reload refused (the file back to fifo, with a typo): the note is of the config running,
  // not of the file, which no longer changes the policy.
  ASSERT_TRUE(plain.reload("[policy]\nname = \"fifo\"\nnmae = 1\n", "failed, keeping the running config")) << plain->log();
  const std::string table = scheduler::render_status_table(plain->status());
  EXPECT_NE(table.find("FAILED and was not applied"), std::string::npos) << table;
  EXPECT_NE(table.find("; the config read at "), std::string::npos) << table;
  EXPECT_EQ(table.find("the file changes"), std::string::npos) << table;
  FakeClient train(plain->socket(), Priority::high, "train");
  EXPECT_EQ(train.reply().effective_priority, Priority::low) << "the new [[job]] entries apply to registrations";
}

TEST(Reload, SighupWithoutAConfigFileIsIgnored) {
  DaemonProcess daemon;
  ASSERT_EQ(::kill(daemon.pid(), SIGHUP), 0);
  EXPECT_TRUE(eventually([&] { return daemon.log().find("no file to reload") != std::string::npos; })) << daemon.log();
  EXPECT_TRUE(daemon.process().running());
  FakeClient client(daemon.socket(), Priority::low, "after");
  EXPECT_EQ(daemon.status()["clients"].size(), 1u);
}

}  // namespace
}  // namespace gpuqos::testing
