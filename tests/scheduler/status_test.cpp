// Tests of the status JSON (bounded to one control record), its table, and `gpuqos run`'s LD_PRELOAD.
#include "gpuqos/scheduler/status.h"

#include <gtest/gtest.h>

#include "gpuqos/scheduler/run_command.h"

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

TEST(Status, JsonCarriesEveryField) {
  auto json = nlohmann::json::parse(bounded_status_text(status_with(1)));
  EXPECT_EQ(json["daemon"]["policy"], "fifo");
  EXPECT_EQ(json["daemon"]["uptime_ns"], 5'000'000'000);
  EXPECT_EQ(json["backlog"][0]["engine"], "h2d");
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

TEST(Status, ManyClientsAreCutToFitOneRecord) {
  const std::string text = bounded_status_text(status_with(5000));
  EXPECT_LE(text.size(), ipc::kMaxControlTextBytes);
  auto json = nlohmann::json::parse(text);
  EXPECT_GT(json["clients"].size(), 10u);
  EXPECT_EQ(json["clients"].size() + json["clients_omitted"].get<std::size_t>(), 5000u);
}

TEST(RunCommand, ShimGoesFirstInLdPreload) {
  EXPECT_EQ(preload_with("/x/lib/libgpuqos.so", nullptr), "/x/lib/libgpuqos.so");
  EXPECT_EQ(preload_with("/s.so", "/a.so /b.so:/c.so"), "/s.so:/a.so:/b.so:/c.so");
  EXPECT_EQ(preload_with("/s.so", "/s.so:/a.so"), "/s.so:/a.so");
  EXPECT_EQ(shim_next_to("/opt/gpuqos/bin/gpuqos"), "/opt/gpuqos/lib/libgpuqos.so");
}

}  // namespace
}  // namespace gpuqos::scheduler
