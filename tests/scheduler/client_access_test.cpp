// Tests of the registration access check, the /proc groups reader and a client's ClientInfo.
#include "gpuqos/scheduler/client_access.h"

#include <grp.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <optional>

#include "gpuqos/scheduler/unix_socket.h"
#include "gpuqos/testing/ready_child.h"
#include "gpuqos/testing/temp_dir.h"

namespace gpuqos::scheduler {
namespace {

using ipc::Priority;

const ipc::PeerCredentials kAlice{4242, 1000, 1000};

config::Config with_jobs() {
  config::Config config = config::default_config();
  config.jobs.push_back({.name = "serve", .allowed_priority = config::Priority::high, .target_ms = 20.0,
                         .percentile = 99.9, .weight = 1.0, .safety_margin_ms = 2.5});
  config.jobs.push_back({.name = "train", .allowed_priority = config::Priority::low, .target_ms = std::nullopt,
                         .percentile = 99.0, .weight = 3.0});
  return config;
}

config::Config restricted(std::vector<uid_t> uids, std::vector<gid_t> gids) {
  config::Config config = with_jobs();
  config.access = {.anyone_may_run_high = false,
                   .high_priority_uids = std::move(uids),
                   .high_priority_gids = std::move(gids)};
  return config;
}

TEST(DecidePriority, APermittedClaimStandsAndLowIsNeverRaised) {
  const auto config = with_jobs();
  EXPECT_EQ(decide_priority(config, "serve", Priority::high, kAlice, {}).effective, Priority::high);
  EXPECT_TRUE(decide_priority(config, "serve", Priority::high, kAlice, {}).why_lowered.empty());
  EXPECT_EQ(decide_priority(config, "unlisted", Priority::high, kAlice, {}).effective, Priority::high);
  EXPECT_EQ(decide_priority(config, "serve", Priority::low, kAlice, {}).effective, Priority::low);
  EXPECT_TRUE(decide_priority(config, "serve", Priority::low, kAlice, {}).why_lowered.empty());
}

TEST(DecidePriority, AJobAllowedOnlyLowRunsLow) {
  const PriorityDecision decision = decide_priority(with_jobs(), "train", Priority::high, kAlice, {});
  EXPECT_EQ(decision.effective, Priority::low);
  EXPECT_NE(decision.why_lowered.find("allowed_priority"), std::string::npos) << decision.why_lowered;
}

TEST(DecidePriority, AccessListsCountUidPrimaryAndSupplementaryGroups) {
  const gid_t groups[] = {27, 500};
  EXPECT_EQ(decide_priority(restricted({1000}, {}), "serve", Priority::high, kAlice, {}).effective, Priority::high);
  EXPECT_EQ(decide_priority(restricted({}, {1000}), "serve", Priority::high, kAlice, {}).effective, Priority::high);
  EXPECT_EQ(decide_priority(restricted({}, {500}), "serve", Priority::high, kAlice, groups).effective, Priority::high);
  const PriorityDecision refused = decide_priority(restricted({7}, {8}), "serve", Priority::high, kAlice, groups);
  EXPECT_EQ(refused.effective, Priority::low);
  EXPECT_NE(refused.why_lowered.find("uid 1000"), std::string::npos) << refused.why_lowered;
  EXPECT_EQ(decide_priority(restricted({}, {}), "serve", Priority::high, {1, 0, 0}, {}).effective, Priority::high)
      << "root always may";
}

TEST(StatusGroups, ParsesTheGroupsLine) {
  EXPECT_EQ(parse_status_groups("Name:\tx\nUid:\t1\t1\t1\t1\nGroups:\t4 24 27 1000 \nNSpid:\t1\n"),
            (std::vector<gid_t>{4, 24, 27, 1000}));
  EXPECT_EQ(parse_status_groups("Groups:\t5\n"), (std::vector<gid_t>{5}));
  EXPECT_TRUE(parse_status_groups("Name:\tx\nGroups:\t\nNSpid:\t1\n").empty());
  EXPECT_TRUE(parse_status_groups("Name:\tx\n").empty());
  EXPECT_TRUE(parse_status_groups("Groups:\t4 x 5\n").empty()) << "malformed: none trusted";
  EXPECT_TRUE(parse_status_groups("Name:\tGroups: 4\n").empty()) << "only a line that starts with the key";
}

TEST(StatusGroups, OfThisProcessAreWhatGetgroupsSays) {
  std::vector<gid_t> expected(static_cast<std::size_t>(::getgroups(0, nullptr)));
  ASSERT_EQ(::getgroups(static_cast<int>(expected.size()), expected.data()), static_cast<int>(expected.size()));
  std::vector<gid_t> read = supplementary_groups(::getpid());
  std::sort(expected.begin(), expected.end());
  std::sort(read.begin(), read.end());
  EXPECT_EQ(read, expected);
  EXPECT_TRUE(supplementary_groups(-1).empty());
}

// The groups a high claim is judged by are those of connect time, as the uid: a process that
// connects, hands its socket on and exits frees its pid, and another process (of a group allowed
// high priority) that gets it would have had its groups read from /proc instead.
TEST(StatusGroups, APeersGroupsAreThoseItConnectedWith) {
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to set a child's groups";
  const gpuqos::testing::TempDir dir;
  const std::string path = (dir.path() / "s.sock").string();
  auto listening = listen_unix(path);
  ASSERT_TRUE(listening) << listening.error();
  std::optional<FileDescriptor> kept;  // the child's connection, open until it is killed
  testing::ReadyChild child([&] {
    const gid_t at_connect[] = {4242, 4343};
    if (::setgroups(2, at_connect) != 0) return false;
    auto connected = connect_unix(path);
    if (!connected) return false;
    kept = std::move(connected.value());
    return ::setgroups(0, nullptr) == 0;  // other groups from now on
  });
  ASSERT_TRUE(child.ready());
  FileDescriptor accepted(::accept(listening->get(), nullptr, nullptr));
  ASSERT_TRUE(accepted.valid());
  std::vector<gid_t> groups = peer_groups(accepted.get(), child.pid());
  const std::vector<gid_t> now = supplementary_groups(child.pid());
  std::sort(groups.begin(), groups.end());
  EXPECT_EQ(groups, (std::vector<gid_t>{4242, 4343}));
  EXPECT_TRUE(now.empty()) << "what /proc says by now";
}

TEST(ClientInfoOf, CarriesTheJobsTargetsInNanoseconds) {
  const auto config = with_jobs();
  const ClientIdentity serve{7, kAlice, "serve", Priority::high, 1, Priority::high};
  const ClientInfo info = client_info(config, serve);
  EXPECT_EQ(info.client, 7u);
  EXPECT_EQ(info.job, "serve");
  EXPECT_EQ(info.priority, Priority::high);
  EXPECT_EQ(info.device, ClientInfo::kNoDevice) << "not the Hello's ordinal: each process numbers its own";
  EXPECT_EQ(info.target_ns, 20'000'000);
  EXPECT_DOUBLE_EQ(info.percentile, 99.9);
  EXPECT_EQ(info.safety_margin_ns, 2'500'000);
  EXPECT_EQ(describe_targets(info), "target 20 ms at p99.9, weight 1, safety margin 2.5 ms");

  const ClientInfo train = client_info(config, {8, kAlice, "train", Priority::low, 0, Priority::high});
  EXPECT_FALSE(train.target_ns);
  EXPECT_DOUBLE_EQ(train.weight, 3.0);
  EXPECT_EQ(train.priority, Priority::low) << "the effective class";
  EXPECT_EQ(describe_targets(train), "no target, weight 3");

  const ClientInfo unlisted = client_info(config, {9, kAlice, "other", Priority::low, 0, Priority::low});
  EXPECT_FALSE(unlisted.target_ns);
  EXPECT_DOUBLE_EQ(unlisted.percentile, 99.0);
  EXPECT_DOUBLE_EQ(unlisted.weight, 1.0);
  EXPECT_FALSE(unlisted.safety_margin_ns) << "the policy's";
}

}  // namespace
}  // namespace gpuqos::scheduler
