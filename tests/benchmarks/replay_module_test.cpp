// The generated PTX module (one spinning entry per kernel; assembled by ptxas when present)
// and the simgpu catalog that goes with it.
#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <regex>

#include "gpuqos/replay/replay_module.h"
#include "gpuqos/testing/temp_dir.h"

namespace gpuqos::replay {
namespace {

using ::testing::HasSubstr;

Workload three_kernels() {
  Workload w;
  w.source = "three.json";
  w.kernels = {{"void a<1>(int)", "gq_0_a"}, {"b", "gq_1_b"}, {"void c::d()", "gq_2_d"}};
  return w;
}

TEST(ReplayModule, PtxHasOneSpinningEntryPerKernel) {
  const std::string ptx = generate_ptx(three_kernels());
  EXPECT_THAT(ptx, HasSubstr(".version 7.0\n.target sm_70\n.address_size 64\n"));
  const std::regex entry_re(R"(\.visible \.entry (\w+)\(\n\t\.param \.u64 (\w+)\n\))");
  std::vector<std::string> entries;
  for (auto it = std::sregex_iterator(ptx.begin(), ptx.end(), entry_re); it != std::sregex_iterator(); ++it) {
    entries.push_back((*it)[1].str());
  }
  EXPECT_EQ(entries, (std::vector<std::string>{"gq_0_a", "gq_1_b", "gq_2_d"}));
  EXPECT_THAT(ptx, HasSubstr("%globaltimer"));
  EXPECT_THAT(ptx, HasSubstr("ld.param.u64 \t%rd1, [gq_1_b_duration_ns];"));
}

TEST(ReplayModule, PtxAssemblesWithPtxas) {
  const std::filesystem::path ptxas = "/usr/local/cuda/bin/ptxas";
  if (!std::filesystem::exists(ptxas)) GTEST_SKIP() << "no ptxas at " << ptxas;
  const gpuqos::testing::TempDir dir;
  const auto ptx = dir.write("m.ptx", generate_ptx(three_kernels()));
  const auto cubin = dir.path() / "m.cubin";
  const std::string command = ptxas.string() + " -arch=sm_90 " + ptx.string() + " -o " + cubin.string() + " 2>" +
                              (dir.path() / "err.txt").string();
  EXPECT_EQ(std::system(command.c_str()), 0) << command;
  EXPECT_TRUE(std::filesystem::exists(cubin));
}

TEST(ReplayModule, CatalogTakesDurationsFromArgumentZeroInNs) {
  const auto catalog = nlohmann::json::parse(generate_catalog_json());
  ASSERT_EQ(catalog.at("kernels").size(), 1u);
  const auto& entry = catalog["kernels"][0];
  EXPECT_EQ(entry.at("match"), "^gq_");
  EXPECT_EQ(entry.at("model"), "from_arg");
  EXPECT_EQ(entry.at("arg"), 0);
  EXPECT_EQ(entry.at("unit"), "ns");
  EXPECT_EQ(catalog.at("noise_cv"), 0.0);
  EXPECT_TRUE(std::regex_search("gq_12_volta_sgemm", std::regex(entry["match"].get<std::string>())));
}

}  // namespace
}  // namespace gpuqos::replay
