// Tests of the status JSON (bounded to one control record), its table, and `gpuqos run`'s LD_PRELOAD.
#include "gpuqos/scheduler/status.h"

#include <gtest/gtest.h>

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <sys/socket.h>
#include <sys/un.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <future>
#include <iterator>
#include <sstream>
#include <tuple>
#include <utility>
#include <vector>

#include "gpuqos/scheduler/run_command.h"
#include "gpuqos/scheduler/unix_socket.h"
#include "gpuqos/testing/temp_dir.h"

namespace gpuqos::scheduler {
namespace {

DaemonStatus status_with(std::size_t clients) {
  DaemonStatus status{42, 5'000'000'000, "fifo", "/tmp/s.sock", {EngineLoad{0, Engine::h2d, 1, 10, 2, 20}}, {}};
  for (std::size_t i = 0; i < clients; ++i) {
    status.clients.push_back(ClientStatus{static_cast<std::uint32_t>(i + 1), 100 + static_cast<std::int64_t>(i), 1000,
                                          1000, "job-" + std::to_string(i), ipc::Priority::low, 0, "waiting",
                                          "/gpuqos-42-1", 3, 2, 1, {4, 1, 1, 2}, 9, 2, 1500, 0});
  }
  return status;
}

// A gpuqosd that takes the connection and never answers (stopped with SIGSTOP: the kernel still
// queues connections on its socket): the CLI says it waited and for how long, not a recv errno.
TEST(Status, ADaemonThatNeverAnswersIsSaidToHaveTimedOut) {
  const testing::TempDir dir("status-silent");
  const std::string path = (dir.path() / "gpuqosd.sock").string();
  auto listening = listen_unix(path);
  ASSERT_TRUE(listening) << listening.error();
  const auto answer = request_status(path);
  ASSERT_FALSE(answer);
  EXPECT_EQ(answer.error(), "gpuqosd did not answer within 5 s (stopped, or too busy?)");
}

// A review: a stopped gpuqosd's queue of connections not yet accepted fills (its jobs' shims ask
// again each second), and a blocking connect then waited for ever, in `gpuqos status` and in
// `gpuqos top`, which only SIGKILL could end. The connect now fails at once, said to be a stall.
TEST(Status, ADaemonWhoseConnectionQueueIsFullIsAStallNotAHang) {
  const testing::TempDir dir("status-full");
  const std::string path = (dir.path() / "gpuqosd.sock").string();
  FileDescriptor listener(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0));
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::snprintf(address.sun_path, sizeof address.sun_path, "%s", path.c_str());
  ASSERT_EQ(::bind(listener.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address), 0);
  ASSERT_EQ(::listen(listener.get(), 0), 0);
  std::vector<FileDescriptor> queued;  // never accepted
  for (;;) {
    FileDescriptor fd(::socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&address), sizeof address) != 0) {
      ASSERT_EQ(errno, EAGAIN) << std::strerror(errno);
      break;
    }
    queued.push_back(std::move(fd));
    ASSERT_LT(queued.size(), 64u) << "the queue never filled";
  }
  auto asked = std::async(std::launch::async, [&] { return request_status(path); });
  if (asked.wait_for(std::chrono::seconds(3)) != std::future_status::ready) {
    listener.reset();  // wakes the blocked connect, so the test ends
    asked.wait();
    FAIL() << "request_status waited for the full queue";
  }
  const auto answer = asked.get();
  ASSERT_FALSE(answer);
  EXPECT_NE(answer.error().find("gpuqosd's queue of new connections at " + path + " is full"), std::string::npos)
      << answer.error();
  EXPECT_TRUE(status_error_is_stall(answer.error())) << answer.error();
  EXPECT_TRUE(status_error_is_stall("gpuqosd did not answer within 5 s (stopped, or too busy?)"));
  EXPECT_FALSE(status_error_is_stall(ipc::connect_failure(path + ".none", ENOENT)));
  // A second gpuqosd on the path takes the full queue as a daemon there, not a stale socket.
  auto second = listen_unix(path);
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error(), "another gpuqosd is already serving " + path);
}

// The "is gpuqosd running?" hint goes only with an error that could not connect and does not say
// what is at the path: `gpuqos status` and `gpuqos top` both use it (a review: top put it on a
// timeout, where gpuqosd had connected).
TEST(Status, TheIsItRunningHintIsOnlyForAConnectThatFailedUnexplained) {
  const std::string path = "/run/gpuqos/gpuqosd.sock";
  EXPECT_EQ(status_error_text("cannot reach gpuqosd: connect: Permission denied", path),
            "cannot reach gpuqosd: connect: Permission denied (socket " + path + "; is gpuqosd running?)");
  const std::string said = "cannot reach gpuqosd: " + ipc::connect_failure(path, ENOENT);
  EXPECT_EQ(status_error_text(said, path), said) << "it names the path already";
  const std::string timeout = "gpuqosd did not answer within 5 s (stopped, or too busy?)";
  EXPECT_EQ(status_error_text(timeout, path), timeout);
  EXPECT_EQ(status_error_text("gpuqosd refused: x", path), "gpuqosd refused: x");
}

// A user test: only the log said whether the endpoint served or was retrying a port in use.
TEST(Status, TheMetricsEndpointIsSaidServingOrNot) {
  DaemonStatus status = status_with(0);
  EXPECT_FALSE(nlohmann::json::parse(bounded_status_text(status))["daemon"].contains("metrics")) << "none asked for";
  EXPECT_EQ(render_status_table(nlohmann::json::parse(bounded_status_text(status))).find("metrics"), std::string::npos);

  status.metrics = MetricsStatus{"127.0.0.1:9400", "127.0.0.1:9400", "", 5};
  auto json = nlohmann::json::parse(bounded_status_text(status));
  EXPECT_EQ(json["daemon"]["metrics"]["serving"], "127.0.0.1:9400");
  EXPECT_TRUE(json["daemon"]["metrics"]["error"].is_null());
  std::string table = render_status_table(json);
  EXPECT_NE(table.find("  metrics: serving http://127.0.0.1:9400/metrics\n"), std::string::npos) << table;

  status.metrics = MetricsStatus{"[::1]:9401", "127.0.0.1:9400", "cannot listen on [::1]:9401: Address in use", 5};
  json = nlohmann::json::parse(bounded_status_text(status));
  EXPECT_EQ(json["daemon"]["metrics"]["listen"], "[::1]:9401");
  EXPECT_EQ(json["daemon"]["metrics"]["retry_s"], 5);
  table = render_status_table(json);
  EXPECT_NE(table.find("  metrics: NOT serving: cannot listen on [::1]:9401: Address in use (trying again every 5 s); "
                       "still serving http://127.0.0.1:9400/metrics\n"),
            std::string::npos)
      << table;

  status.metrics = MetricsStatus{"127.0.0.1:9400", "", "cannot listen on 127.0.0.1:9400: Address in use", 5};
  table = render_status_table(nlohmann::json::parse(bounded_status_text(status)));
  EXPECT_NE(table.find("(trying again every 5 s)\n"), std::string::npos) << table;
  EXPECT_EQ(table.find("still serving"), std::string::npos) << table;
  // Another daemon's JSON (a key left out, a null) still makes a table.
  json = nlohmann::json::parse(bounded_status_text(status));
  json["daemon"]["metrics"].erase("serving");
  json["daemon"]["metrics"]["retry_s"] = nullptr;
  table = render_status_table(json);
  EXPECT_NE(table.find("  metrics: NOT serving: cannot listen on 127.0.0.1:9400: Address in use\n"), std::string::npos)
      << table;
}

TEST(Status, JsonCarriesEveryField) {
  auto json = nlohmann::json::parse(bounded_status_text(status_with(1)));
  EXPECT_EQ(json["daemon"]["policy"], "fifo");
  EXPECT_EQ(json["daemon"]["uptime_ns"], 5'000'000'000);
  EXPECT_EQ(json["backlog"][0]["engine"], "h2d");
  EXPECT_EQ(json["backlog"][0]["lost_ops"], 0);
  EXPECT_NE(render_status_table(json).find("  device 0 h2d: 1 outstanding ops, backlog 0.000 ms, 2 completed\n"),
            std::string::npos)
      << render_status_table(json);
  DaemonStatus lossy = status_with(1);
  lossy.backlog[0].lost_ops = 3;
  const std::string lossy_table = render_status_table(nlohmann::json::parse(bounded_status_text(lossy)));
  EXPECT_NE(lossy_table.find("2 completed, 3 lost (no completion in 10 s)\n"), std::string::npos) << lossy_table;
  const auto& client = json["clients"][0];
  EXPECT_EQ(client["pid"], 100);
  EXPECT_EQ(client["job"], "job-0");
  EXPECT_EQ(client["priority"], "low");
  EXPECT_EQ(client["state"], "waiting");
  EXPECT_EQ(client["ops"]["posted"], 3);
  EXPECT_EQ(client["ops"]["granted"], 2);
  EXPECT_EQ(client["ops"]["completed"], 1);
  EXPECT_EQ(client["marks"]["sync"], 4);
  EXPECT_EQ(client["marks"]["query_begin"], 1);
  EXPECT_EQ(client["marks"]["query_end"], 1);
  EXPECT_EQ(client["marks"]["query_arrived"], 2);
  EXPECT_EQ(client["current_wait_ns"], 1500);
  EXPECT_FALSE(json.contains("clients_omitted"));
  const std::string table = render_status_table(json);
  EXPECT_NE(table.find("job-0"), std::string::npos) << table;
  EXPECT_NE(table.find("policy fifo"), std::string::npos) << table;
  EXPECT_NE(table.find("gpuqosd pid 42, up 5.0 s, policy fifo"), std::string::npos) << table;
}

// Which GPU each of gpuqosd's device numbers is, and where each client's work is: in the JSON and
// the table (a job under CUDA_VISIBLE_DEVICES=1 calls the node's second GPU its device 0).
TEST(Status, DevicesAreListedWithTheirUuidsAndEachClientsWithIt) {
  DaemonStatus status = status_with(2);
  status.devices = {DeviceStatus{0, "GPU-8601f82c-036c-8858-b907-c46eb6bf5f92", 0, 1},
                    DeviceStatus{1, "GPU-5053021f-f19c-8f3e-af75-ba138af7d608", 0, 1}};
  status.clients[0].devices = {1};
  const auto json = nlohmann::json::parse(bounded_status_text(status));
  EXPECT_EQ(json["devices"][1]["uuid"], "GPU-5053021f-f19c-8f3e-af75-ba138af7d608");
  EXPECT_EQ(json["devices"][1]["ordinal"], 0);
  const std::string table = render_status_table(json);
  EXPECT_NE(table.find("  device 0 is GPU-8601f82c-036c-8858-b907-c46eb6bf5f92, 1 client(s)\n"), std::string::npos)
      << table;
  EXPECT_NE(table.find("  device 1 is GPU-5053021f-f19c-8f3e-af75-ba138af7d608 (device 0 to its first job), 1 client(s)\n"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find(" DEVICES "), std::string::npos) << table;
  EXPECT_NE(table.find(" low  1       "), std::string::npos) << "the first client's work is on device 1\n" << table;
  EXPECT_NE(table.find(" low  -       "), std::string::npos) << "the second's nowhere yet\n" << table;
}

TEST(Status, UptimeReadsAsAPersonSaysIt) {
  auto json = nlohmann::json::parse(bounded_status_text(status_with(0)));
  const auto up = [&](std::int64_t seconds) {
    json["daemon"]["uptime_ns"] = seconds * 1'000'000'000;
    const std::string table = render_status_table(json);
    const auto at = table.find(", up ");
    return table.substr(at + 5, table.find(", policy") - at - 5);
  };
  EXPECT_EQ(up(42), "42.0 s");
  EXPECT_EQ(up(201), "3 min 21 s");
  EXPECT_EQ(up(3725), "1 h 02 min");
  EXPECT_EQ(up(201030), "2 d 7 h");
}

// Names run to 63 characters: the JOB column widens to the longest, so the columns after it line up.
TEST(Status, ALongJobNameWidensItsColumn) {
  DaemonStatus status = status_with(2);
  status.clients[1].job = std::string(40, 'j');
  const std::string table = render_status_table(nlohmann::json::parse(bounded_status_text(status)));
  std::vector<std::size_t> prio_column;  // where each header or client row has its priority
  std::istringstream lines(table);
  for (std::string line; std::getline(lines, line);) {
    if (line.starts_with("PID ")) prio_column.push_back(line.find("PRIO"));
    if (line.find("job-0 ") != std::string::npos || line.find(std::string(40, 'j') + " ") != std::string::npos)
      prio_column.push_back(line.find("low"));
  }
  ASSERT_EQ(prio_column.size(), 3u) << table;
  EXPECT_EQ(prio_column[0], prio_column[1]) << table;
  EXPECT_EQ(prio_column[0], prio_column[2]) << table;
}

// A client with work on 64 devices and a 63-character name: its row ran past a 256-byte buffer,
// lost its newline, and the next row was glued to it (a review).
TEST(Status, AClientRowOfManyDevicesIsWholeAndEndsItsLine) {
  DaemonStatus status = status_with(2);
  status.clients[0].job = std::string(63, 'j');
  for (std::uint32_t d = 0; d < 64; ++d) status.clients[0].devices.push_back(d);
  const std::string table = render_status_table(nlohmann::json::parse(bounded_status_text(status)));
  const std::size_t row = table.find(std::string(63, 'j') + " ");
  ASSERT_NE(row, std::string::npos) << table;
  const std::string line = table.substr(row, table.find('\n', row) - row);
  EXPECT_NE(line.find(",62,63 "), std::string::npos) << "every device, then the columns after\n" << line;
  EXPECT_EQ(line.find("job-1"), std::string::npos) << "the next client on a line of its own\n" << table;
  EXPECT_NE(table.find("\n" + std::to_string(status.clients[1].pid) + " "), std::string::npos) << table;
}

TEST(Status, AHeldClientShowsTheOpItIsHeldAtAndWhy) {
  DaemonStatus status = status_with(2);
  status.clients[1].held = HeldOpStatus{3, "kernel gq_41_vectorized_elementwise_kernel", 9'000'000, 6'000'000, "budget"};
  auto json = nlohmann::json::parse(bounded_status_text(status));
  EXPECT_FALSE(json["clients"][0].contains("held_at"));
  const auto& held = json["clients"][1]["held_at"];
  EXPECT_EQ(held["seq"], 3);
  EXPECT_EQ(held["op"], "kernel gq_41_vectorized_elementwise_kernel");
  EXPECT_EQ(held["predicted_ns"], 9'000'000);
  EXPECT_EQ(held["expected_ns"], 6'000'000);
  EXPECT_EQ(held["held_by"], "budget");
  const std::string table = render_status_table(json);
  EXPECT_NE(table.find("held at op 3, kernel gq_41_vectorized_elementwise_kernel (predicted 6.000 ms, up to 9.000 ms), "
                       "by budget"),
            std::string::npos)
      << table;
}

// A GPU a job runs without gpuqosd ([devices] does not name it) is listed once, with how many clients
// use it, and under each such client; JSON only for those clients.
TEST(Status, GpusRunUnscheduledAreListedAndUnderTheirClients) {
  DaemonStatus status = status_with(3);
  const std::string gpu = "GPU-49821f9d-0a1b-2c3d-4e5f-60718293a4b5";
  status.clients[1].unscheduled = {{0, gpu}};
  status.clients[2].unscheduled = {{1, gpu}, {2, ""}};
  auto json = nlohmann::json::parse(bounded_status_text(status));
  EXPECT_FALSE(json["clients"][0].contains("unscheduled_devices"));
  EXPECT_EQ(json["clients"][2]["unscheduled_devices"],
            nlohmann::json::parse(R"([{"ordinal":1,"uuid":")" + gpu + R"("},{"ordinal":2,"uuid":""}])"));
  const std::string table = render_status_table(json);
  EXPECT_NE(table.find("  not scheduled: " + gpu + ", 2 client(s) run their work there straight to the driver"),
            std::string::npos) << table;
  EXPECT_NE(table.find("  not scheduled: a GPU whose UUID its driver cannot say, 1 client(s)"), std::string::npos)
      << table;
  EXPECT_NE(table.find("runs its device 1 (" + gpu + ") unscheduled\n         runs its device 2 unscheduled\n"),
            std::string::npos) << table;
}

// A client the config runs below its claim is marked in the table, with what the mark means; no
// clients at all is said, not an empty table.
TEST(Status, ALoweredClaimIsMarkedAndNoClientsIsSaid) {
  DaemonStatus status = status_with(2);
  status.clients[1].claimed_priority = ipc::Priority::high;
  std::string table = render_status_table(nlohmann::json::parse(bounded_status_text(status)));
  const std::size_t marked = table.find(" low* ");
  ASSERT_NE(marked, std::string::npos) << table;
  EXPECT_EQ(table.find(" low* ", marked + 1), std::string::npos) << "only the lowered client\n" << table;
  EXPECT_NE(table.rfind("job-1 ", marked), std::string::npos) << table;
  EXPECT_NE(table.find("* claimed high priority; the config ([access], the job's allowed_priority) runs it as low"),
            std::string::npos) << table;
  table = render_status_table(nlohmann::json::parse(bounded_status_text(status_with(0))));
  EXPECT_NE(table.find("no clients connected\n"), std::string::npos) << table;
  EXPECT_EQ(table.find("PID "), std::string::npos) << table;
}

TEST(Status, ManyClientsAreCutToFitOneRecord) {
  const std::string text = bounded_status_text(status_with(5000));
  EXPECT_LE(text.size(), ipc::kMaxControlTextBytes);
  auto json = nlohmann::json::parse(text);
  EXPECT_GT(json["clients"].size(), 10u);
  EXPECT_EQ(json["clients"].size() + json["clients_omitted"].get<std::size_t>(), 5000u);
}

// A re-test: one user's 512 clients filled the status, and another user's inference client was
// among those left out. A cut keeps the high-priority clients, then each user's first, second...
TEST(Status, ACutKeepsHighPriorityClientsAndEveryUsersFirst) {
  DaemonStatus status = status_with(5000);  // uid 1000, low
  status.clients[4000].uid = 1001;
  status.clients[4001].uid = 1001;
  status.clients[4999].uid = 1002;
  status.clients[4999].priority = ipc::Priority::high;
  status.clients[4500].uid = 1003;
  auto json = nlohmann::json::parse(bounded_status_text(status));
  ASSERT_TRUE(json.contains("clients_omitted"));
  const auto& kept = json["clients"];
  ASSERT_GT(kept.size(), 4u);
  EXPECT_EQ(kept[0]["uid"], 1002) << "high priority first";
  EXPECT_EQ(kept[1]["uid"], 1000);  // then each user's first client, by uid
  EXPECT_EQ(kept[2]["uid"], 1001);
  EXPECT_EQ(kept[3]["uid"], 1003);
  EXPECT_EQ(kept[4]["uid"], 1000);  // then each user's second
  EXPECT_EQ(kept[5]["uid"], 1001);
  EXPECT_EQ(kept[6]["uid"], 1000);
  EXPECT_EQ(kept[1]["client"], 1) << "in client order within a user";
  EXPECT_EQ(kept[4]["client"], 2);
}

// A review: nlohmann's get<int64_t> casts a float, undefined behaviour for one out of range (a
// daemon's answer is any JSON: 1e300 as a backlog printed garbage, or crashed under UBSan). Every
// integer a table reads must be one, in range; a float that is exactly one is still taken.
TEST(Status, AnIntegerFieldOutOfRangeIsAnUnexpectedAnswerNotACast) {
  DaemonStatus status = status_with(1);
  status.config = ConfigStatus{"/etc/gpuqos.toml", 1'700'000'000};
  status.jobs.push_back(JobQosSnapshot{});
  status.jobs.back().job = "train";
  status.jobs.back().be_ops = 3;
  const nlohmann::json good = nlohmann::json::parse(bounded_status_text(status));
  ASSERT_NO_THROW(render_status_table(good));
  const auto error_of = [&](const nlohmann::json::json_pointer& field, const nlohmann::json& value) {
    nlohmann::json bad = good;
    bad[field] = value;
    try {
      render_status_table(bad);
    } catch (const nlohmann::json::type_error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  EXPECT_EQ(error_of("/backlog/0/backlog_ns"_json_pointer, 1e300),
            "[json.exception.type_error.302] backlog_ns is 1e+300, not an integer from -9223372036854775808 to "
            "9223372036854775807");
  EXPECT_EQ(error_of("/clients/0/uid"_json_pointer, 1e300),
            "[json.exception.type_error.302] uid is 1e+300, not an integer from 0 to 4294967295");
  EXPECT_NE(error_of("/clients/0/uid"_json_pointer, -1).find("uid is -1, not an integer"), std::string::npos);
  EXPECT_NE(error_of("/daemon/config/loaded_unix_s"_json_pointer, 1e300).find("loaded_unix_s is 1e+300"), std::string::npos);
  EXPECT_NE(error_of("/daemon/uptime_ns"_json_pointer, 1e300).find("uptime_ns is 1e+300"), std::string::npos);
  EXPECT_NE(error_of("/daemon/uptime_ns"_json_pointer, 9.3e18).find("uptime_ns is 9.3e+18"), std::string::npos)
      << "just past the int64 range";
  EXPECT_NE(error_of("/daemon/uptime_ns"_json_pointer, 2.5).find("uptime_ns is 2.5"), std::string::npos);
  EXPECT_NE(error_of("/jobs/0/be/ops"_json_pointer, -1.5e300).find("ops is -1.5e+300"), std::string::npos);
  EXPECT_NE(error_of("/clients/0/ops/posted"_json_pointer, "3").find("posted is \"3\""), std::string::npos);
  EXPECT_NE(error_of("/clients/0/current_wait_ns"_json_pointer, nullptr).find("current_wait_ns is null"),
            std::string::npos);
  EXPECT_NE(error_of("/grants/held_wait_ns_max"_json_pointer, 1e19).find("held_wait_ns_max is 1e+19"), std::string::npos);
  // A float that is an integer in range is one (a JSON writer may well print 5e9).
  nlohmann::json whole = good;
  whole["daemon"]["uptime_ns"] = 5e9;
  whole["backlog"][0]["backlog_ns"] = -2e6;
  const std::string table = render_status_table(whole);
  EXPECT_NE(table.find(", up 5.0 s,"), std::string::npos) << table;
  EXPECT_NE(table.find("backlog -2.000 ms"), std::string::npos) << table;
  EXPECT_EQ(json_integer<std::uint64_t>(nlohmann::json(18446744073709551615ull), "n"), 18446744073709551615ull);
  EXPECT_EQ(json_integer<std::int64_t>(nlohmann::json(-9.223372036854775808e18), "n"), INT64_MIN);
  EXPECT_THROW(json_integer<std::int64_t>(nlohmann::json(9.223372036854775808e18), "n"), nlohmann::json::type_error);
  EXPECT_THROW(json_integer<std::uint64_t>(nlohmann::json(1.8446744073709551616e19), "n"), nlohmann::json::type_error);
  EXPECT_THROW(json_integer<std::int64_t>(nlohmann::json(std::nan("")), "n"), nlohmann::json::type_error);
  EXPECT_THROW(json_integer<std::int64_t>(nlohmann::json(18446744073709551615ull), "n"), nlohmann::json::type_error);
}

TEST(RunCommand, ShimGoesFirstInLdPreload) {
  EXPECT_EQ(preload_with("/x/lib/libgpuqos.so", nullptr), "/x/lib/libgpuqos.so");
  EXPECT_EQ(preload_with("/s.so", "/a.so /b.so:/c.so"), "/s.so:/a.so:/b.so:/c.so");
  EXPECT_EQ(preload_with("/s.so", "/s.so:/a.so"), "/s.so:/a.so");
  EXPECT_EQ(shim_next_to("/opt/gpuqos/bin/gpuqos"), "/opt/gpuqos/lib/libgpuqos.so");
}

// What exec_managed's command printed (stdout and stderr) and its exit code, run in a child with
// LD_PRELOAD and LD_LIBRARY_PATH unset and `env` set.
std::pair<std::string, int> run_managed(const std::vector<std::string>& command, const std::filesystem::path& shim,
                                        const std::vector<std::pair<std::string, std::string>>& env = {}) {
  const testing::TempDir dir;
  const std::string out = (dir.path() / "out").string();
  const pid_t child = ::fork();
  if (child < 0) return {"fork failed", -1};
  if (child == 0) {
    const int fd = ::open(out.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    if (fd < 0 || ::dup2(fd, STDOUT_FILENO) < 0 || ::dup2(fd, STDERR_FILENO) < 0) ::_exit(99);
    ::unsetenv("LD_PRELOAD");
    ::unsetenv("LD_LIBRARY_PATH");
    for (const auto& [name, value] : env) ::setenv(name.c_str(), value.c_str(), 1);
    RunOptions options;
    options.command = command;
    ::_exit(exec_managed(options, shim));
  }
  int status = 0;
  if (::waitpid(child, &status, 0) != child || !WIFEXITED(status)) return {"no exit", -1};
  std::ifstream file(out);
  return {std::string{std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()}, WEXITSTATUS(status)};
}

// A real library to stand in for the shim (libz: no constructor, nothing it does at load).
std::filesystem::path stand_in_library() {
  for (const char* candidate : {"/lib/x86_64-linux-gnu/libz.so.1", "/usr/lib/x86_64-linux-gnu/libz.so.1",
                                "/lib/aarch64-linux-gnu/libz.so.1", "/usr/lib64/libz.so.1", "/lib64/libz.so.1"}) {
    if (std::filesystem::exists(candidate)) return candidate;
  }
  return {};
}

// A shim in a folder whose path has a space (a clone in "~/My Projects") or a colon, which LD_PRELOAD
// cannot carry, is loaded through a link to it in a folder of the user's own (a review: it ran every
// job unmanaged). Shown with a real library copied there under the shim's name, found in the job's
// memory map; the link is reused, and one in a folder others could change is not used.
TEST(RunCommand, AShimWhosePathHasASpaceOrColonIsLoadedThroughALink) {
  const std::filesystem::path library = stand_in_library();
  if (library.empty()) GTEST_SKIP() << "no libz.so.1 to stand in for the shim";
  const testing::TempDir dir;
  const std::filesystem::path runtime = dir.path() / "runtime";
  std::filesystem::create_directories(runtime);
  const std::string links = (runtime / ("gpuqos-" + std::to_string(::geteuid()))).string();
  for (const char* name : {"my gpuqos", "gpuqos:2"}) {
    SCOPED_TRACE(name);
    const std::filesystem::path folder = dir.path() / name / "lib";
    std::filesystem::create_directories(folder);
    std::filesystem::copy_file(library, folder / "libgpuqos.so");
    for (int run = 0; run < 2; ++run) {  // the second reuses the link
      const auto [text, code] = run_managed(
          {"sh", "-c", "echo \"[$LD_PRELOAD] [${LD_LIBRARY_PATH-unset}]\"; grep -c '" + std::string(name) +
                           "/lib/libgpuqos.so' /proc/$$/maps"},
          folder / "libgpuqos.so", {{"XDG_RUNTIME_DIR", runtime.string()}});
      EXPECT_EQ(code, 0) << text;
      EXPECT_EQ(text.find("cannot"), std::string::npos) << text;
      const auto open = text.find('['), close = text.find(']');
      ASSERT_TRUE(open != std::string::npos && close != std::string::npos) << text;
      const std::string preload = text.substr(open + 1, close - open - 1);
      EXPECT_EQ(preload.rfind(links + "/libgpuqos-", 0), 0u) << text;
      EXPECT_EQ(preload.find_first_of(" :"), std::string::npos) << text;
      EXPECT_EQ(std::filesystem::read_symlink(preload), folder / "libgpuqos.so");
      EXPECT_NE(text.find("[unset]"), std::string::npos) << "the library path is left alone: " << text;
    }
  }
  EXPECT_EQ(std::distance(std::filesystem::directory_iterator(links), std::filesystem::directory_iterator()), 2)
      << "one link a shim, no leftovers";
  // A links folder others may write to could have its link swapped: not used (the next, /tmp, is).
  const testing::TempDir open_runtime;
  const std::string open_links = (open_runtime.path() / ("gpuqos-" + std::to_string(::geteuid()))).string();
  ASSERT_EQ(::mkdir(open_links.c_str(), 0700), 0);
  ASSERT_EQ(::chmod(open_links.c_str(), 0777), 0);
  const auto [text, code] = run_managed({"sh", "-c", "echo \"[$LD_PRELOAD]\""}, dir.path() / "my gpuqos" / "lib" / "libgpuqos.so",
                                        {{"XDG_RUNTIME_DIR", open_runtime.path().string()}});
  EXPECT_EQ(code, 0) << text;
  EXPECT_EQ(text.find(open_links), std::string::npos) << text;
  const auto open = text.find('['), close = text.find(']');
  ASSERT_TRUE(open != std::string::npos && close != std::string::npos) << text;
  const std::string preload = text.substr(open + 1, close - open - 1);
  EXPECT_EQ(preload.rfind("/tmp/gpuqos-", 0), 0u) << text;
  ::unlink(preload.c_str());  // the test's own, beside any the user has there
}

// A set-user-ID program (sudo, su) gets no LD_PRELOAD path from the loader when it changes who it
// runs as: the job runs, and the user is told it may run unmanaged (a review: not a word before).
TEST(RunCommand, ASetIdProgramIsRunWithAWarning) {
  const testing::TempDir dir;
  const std::filesystem::path program = dir.path() / "escalate";
  {
    std::ofstream file(program);
    file << "#!/bin/sh\necho ran\n";
  }
  ::chmod(program.c_str(), 0755);
  EXPECT_FALSE(runs_set_id(program.string()));
  auto [text, code] = run_managed({program.string()}, "/opt/gpuqos/lib/libgpuqos.so");
  EXPECT_EQ(code, 0);
  EXPECT_NE(text.find("ran\n"), std::string::npos) << text;
  EXPECT_EQ(text.find("set-user-ID"), std::string::npos) << "no warning for a plain program: " << text;
  ASSERT_EQ(::chmod(program.c_str(), 04755), 0);
  EXPECT_TRUE(runs_set_id(program.string()));
  std::tie(text, code) = run_managed({program.string()}, "/opt/gpuqos/lib/libgpuqos.so");
  EXPECT_EQ(code, 0);
  EXPECT_NE(text.find("is set-user-ID or set-group-ID: the loader does not preload the shim"), std::string::npos) << text;
  EXPECT_NE(text.find("ran\n"), std::string::npos) << text;
  EXPECT_FALSE(runs_set_id("no-such-program-anywhere"));
  EXPECT_FALSE(runs_set_id("sh")) << "found on PATH, not set-ID";
}

}  // namespace
}  // namespace gpuqos::scheduler
