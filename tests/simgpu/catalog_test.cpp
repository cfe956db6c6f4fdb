// Tests of the kernel catalog: loading, first-match resolution, the duration models and noise.
#include "gpuqos/simgpu/catalog.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include "gpuqos/testing/temp_dir.h"

namespace gpuqos::simgpu {
namespace {

namespace fs = std::filesystem;

// A fresh directory per test for the catalogs it writes, removed afterwards.
class CatalogFileTest : public ::testing::Test {
 protected:
  const gpuqos::testing::TempDir dir_{"catalog_test"};
};

std::int64_t duration_of(KernelCatalog& catalog, const std::string& name, LaunchShape shape = {}) {
  return catalog.duration_ns(catalog.resolve(name), shape);
}

TEST(CatalogTest, EmptyCatalogGivesEveryKernelTenMicroseconds) {
  KernelCatalog catalog;
  EXPECT_DOUBLE_EQ(catalog.default_us(), 10.0);
  EXPECT_DOUBLE_EQ(catalog.noise_cv(), 0.0);
  EXPECT_EQ(catalog.resolve("anything").kind, KernelModel::Kind::unknown);
  EXPECT_EQ(duration_of(catalog, "anything"), 10'000);
}

TEST(CatalogTest, FixedModel) {
  KernelCatalog catalog;
  catalog.add_json(R"({"kernels": [{"match": "gemm", "model": "fixed", "us": 500}]})", "c.json");
  const KernelModel model = catalog.resolve("sm90_xmma_gemm_f16");
  EXPECT_EQ(model.kind, KernelModel::Kind::fixed);
  EXPECT_DOUBLE_EQ(model.us, 500.0);
  EXPECT_EQ(catalog.duration_ns(model, {.blocks = 1000}), 500'000);
}

TEST(CatalogTest, PerBlockModel) {
  KernelCatalog catalog;
  catalog.add_json(
      R"({"kernels": [{"match": "softmax", "model": "per_block", "base_us": 5, "per_block_us": 0.8}]})",
      "c.json");
  const KernelModel model = catalog.resolve("softmax_warp_forward");
  EXPECT_EQ(model.kind, KernelModel::Kind::per_block);
  EXPECT_EQ(catalog.duration_ns(model, {.blocks = 1}), 5'800);
  EXPECT_EQ(catalog.duration_ns(model, {.blocks = 10}), 13'000);
  EXPECT_EQ(catalog.duration_ns(model, {.blocks = 0}), 5'000);
}

TEST(CatalogTest, DurationsAreRoundedToNanoseconds) {
  KernelCatalog catalog;
  catalog.add_json(R"({"kernels": [{"match": "k", "model": "fixed", "us": 0.0016}]})", "c.json");
  EXPECT_EQ(duration_of(catalog, "k"), 2);  // 1.6 ns
}

struct UnitCase {
  const char* unit;
  std::int64_t ns_per_unit;
};

class CatalogUnitTest : public ::testing::TestWithParam<UnitCase> {};

TEST_P(CatalogUnitTest, FromArgScalesTheArgumentByItsUnit) {
  KernelCatalog catalog;
  catalog.add_json(
      std::string(R"({"kernels": [{"match": "^sleep$", "model": "from_arg", "arg": 2, "unit": ")") +
          GetParam().unit + R"("}], "default_us": 7})",
      "c.json");
  const KernelModel model = catalog.resolve("sleep");
  EXPECT_EQ(model.kind, KernelModel::Kind::from_arg);
  EXPECT_EQ(model.arg, 2);
  EXPECT_DOUBLE_EQ(model.arg_unit_ns, static_cast<double>(GetParam().ns_per_unit));
  EXPECT_EQ(catalog.duration_ns(model, {.duration_arg = 3}), 3 * GetParam().ns_per_unit);
  EXPECT_EQ(catalog.duration_ns(model, {.duration_arg = 0}), 0);
  EXPECT_EQ(catalog.duration_ns(model, {}), 7'000);  // no value read: default_us
}

INSTANTIATE_TEST_SUITE_P(Units, CatalogUnitTest,
                         ::testing::Values(UnitCase{"ns", 1}, UnitCase{"us", 1'000},
                                         UnitCase{"ms", 1'000'000}, UnitCase{"s", 1'000'000'000}),
                         [](const ::testing::TestParamInfo<UnitCase>& info) {
                           return std::string(info.param.unit);
                         });

TEST(CatalogTest, FirstMatchWinsInFileOrder) {
  KernelCatalog catalog;
  catalog.add_json(R"({"kernels": [
      {"match": "^sgemm_small", "model": "fixed", "us": 1},
      {"match": "gemm", "model": "fixed", "us": 2},
      {"match": "^sgemm", "model": "fixed", "us": 3}]})",
                   "c.json");
  EXPECT_EQ(duration_of(catalog, "sgemm_small_kernel"), 1'000);
  EXPECT_EQ(duration_of(catalog, "sgemm_large_kernel"), 2'000);  // "gemm" comes before "^sgemm"
  EXPECT_EQ(duration_of(catalog, "dgemm"), 2'000);
  EXPECT_EQ(catalog.resolve("conv").kind, KernelModel::Kind::unknown);
}

TEST(CatalogTest, RegexIsSearchedNotFullyMatched) {
  KernelCatalog catalog;
  catalog.add_json(R"({"kernels": [{"match": "a[0-9]+b", "model": "fixed", "us": 4}]})", "c.json");
  EXPECT_EQ(catalog.resolve("xx_a42b_yy").kind, KernelModel::Kind::fixed);
  EXPECT_EQ(catalog.resolve("ab").kind, KernelModel::Kind::unknown);
}

TEST(CatalogTest, UnknownKernelTakesDefaultUs) {
  KernelCatalog catalog;
  catalog.add_json(R"({"kernels": [{"match": "x", "model": "fixed", "us": 1}], "default_us": 25})",
                   "c.json");
  EXPECT_DOUBLE_EQ(catalog.default_us(), 25.0);
  EXPECT_EQ(duration_of(catalog, "other"), 25'000);
}

TEST_F(CatalogFileTest, FilesAppendAndTheLastSettingWins) {
  KernelCatalog catalog;
  catalog.add_file(dir_.write(
      "a.json", R"({"kernels": [{"match": "^a", "model": "fixed", "us": 1}], "default_us": 20})"));
  catalog.add_file(dir_.write("b.json", R"({"kernels": [{"match": "^a", "model": "fixed", "us": 2},
      {"match": "^b", "model": "fixed", "us": 3}], "default_us": 30, "noise_cv": 0.1})"));
  catalog.add_file(dir_.write("c.json", R"({"kernels": []})"));
  EXPECT_EQ(catalog.resolve("abc").us, 1.0);  // the earlier file's entry comes first
  EXPECT_EQ(catalog.resolve("bcd").us, 3.0);
  EXPECT_DOUBLE_EQ(catalog.default_us(), 30.0);  // c.json sets nothing, so b.json's values stay
  EXPECT_DOUBLE_EQ(catalog.noise_cv(), 0.1);
}

TEST_F(CatalogFileTest, MissingFileNamesThePath) {
  KernelCatalog catalog;
  const fs::path path = dir_.path() / "absent.json";
  try {
    catalog.add_file(path);
    FAIL() << "no error for a missing file";
  } catch (const CatalogError& error) {
    EXPECT_NE(std::string(error.what()).find(path.string()), std::string::npos) << error.what();
  }
}

TEST(CatalogTest, ShippedExampleLoads) {
  KernelCatalog catalog;
  catalog.add_file(fs::path(GPUQOS_SOURCE_DIR) / "simgpu/catalogs/example.json");
  EXPECT_EQ(catalog.resolve("sleep_kernel").kind, KernelModel::Kind::from_arg);
  EXPECT_EQ(catalog.resolve("sm90_xmma_gemm_bf16").kind, KernelModel::Kind::fixed);
  EXPECT_EQ(catalog.resolve("softmax_warp_forward").kind, KernelModel::Kind::per_block);
  EXPECT_EQ(catalog.resolve("my_custom_kernel").kind, KernelModel::Kind::unknown);
}

TEST(CatalogTest, FailedAddLeavesTheCatalogUnchanged) {
  KernelCatalog catalog;
  catalog.add_json(R"({"kernels": [{"match": "^a", "model": "fixed", "us": 1}]})", "good.json");
  EXPECT_THROW(catalog.add_json(R"({"kernels": [{"match": "^b", "model": "fixed", "us": 2},
      {"match": "^c", "model": "fixed", "us": -1}], "default_us": 99})",
                                "bad.json"),
               CatalogError);
  EXPECT_EQ(catalog.resolve("b").kind, KernelModel::Kind::unknown);
  EXPECT_DOUBLE_EQ(catalog.default_us(), 10.0);
  EXPECT_EQ(catalog.resolve("a").kind, KernelModel::Kind::fixed);
}

std::vector<std::int64_t> draws(KernelCatalog& catalog, int count) {
  const KernelModel model = catalog.resolve("k");
  std::vector<std::int64_t> out;
  for (int i = 0; i < count; ++i) out.push_back(catalog.duration_ns(model, {}));
  return out;
}

TEST(CatalogTest, NoiseHasMeanOneAndTheRequestedCv) {
  KernelCatalog catalog;
  catalog.add_json(
      R"({"kernels": [{"match": "k", "model": "fixed", "us": 100}], "noise_cv": 0.2, "seed": 42})",
      "c.json");
  const std::vector<std::int64_t> values = draws(catalog, 20'000);
  double sum = 0;
  double sum_sq = 0;
  for (std::int64_t v : values) {
    ASSERT_GT(v, 0);
    sum += static_cast<double>(v);
    sum_sq += static_cast<double>(v) * static_cast<double>(v);
  }
  const double mean = sum / static_cast<double>(values.size());
  const double stddev = std::sqrt(sum_sq / static_cast<double>(values.size()) - mean * mean);
  EXPECT_NEAR(mean, 100'000.0, 2'000.0);  // within 2 %
  EXPECT_NEAR(stddev / mean, 0.2, 0.02);
}

TEST(CatalogTest, NoiseIsDeterministicGivenTheSeed) {
  const char* text =
      R"({"kernels": [{"match": "k", "model": "fixed", "us": 100}], "noise_cv": 0.5, "seed": 7})";
  KernelCatalog first;
  KernelCatalog second;
  first.add_json(text, "c.json");
  second.add_json(text, "c.json");
  const auto a = draws(first, 100);
  EXPECT_EQ(a, draws(second, 100));
  KernelCatalog other_seed;
  other_seed.add_json(
      R"({"kernels": [{"match": "k", "model": "fixed", "us": 100}], "noise_cv": 0.5, "seed": 8})",
      "c.json");
  EXPECT_NE(a, draws(other_seed, 100));
  // Without noise every draw is exact.
  KernelCatalog quiet;
  quiet.add_json(R"({"kernels": [{"match": "k", "model": "fixed", "us": 100}], "seed": 7})",
                 "c.json");
  for (std::int64_t v : draws(quiet, 100)) EXPECT_EQ(v, 100'000);
}

TEST_F(CatalogFileTest, SyntaxErrorNamesFileLineAndColumn) {
  const fs::path path =
      dir_.write("catalog.json", "{\n  \"kernels\": [\n    {\"match\": \"a\",, }\n  ]\n}\n");
  KernelCatalog catalog;
  try {
    catalog.add_file(path);
    FAIL() << "no error for a syntax error";
  } catch (const CatalogError& error) {
    // The second comma on line 3 is at column 19.
    EXPECT_EQ(std::string(error.what()).rfind(path.string() + ":3:19: ", 0), 0u) << error.what();
  }
}

TEST(CatalogTest, SyntaxErrorOnTheFirstLineAndAtTheEnd) {
  KernelCatalog catalog;
  try {
    catalog.add_json("[1, 2", "end.json");
    FAIL();
  } catch (const CatalogError& error) {
    EXPECT_EQ(std::string(error.what()).rfind("end.json:1:", 0), 0u) << error.what();
  }
  try {
    catalog.add_json("{x}", "first.json");
    FAIL();
  } catch (const CatalogError& error) {
    EXPECT_EQ(std::string(error.what()).rfind("first.json:1:2: ", 0), 0u) << error.what();
  }
}

TEST(CatalogTest, SemanticErrorNamesTheJsonPath) {
  KernelCatalog catalog;
  try {
    catalog.add_json(R"({"kernels": [
        {"match": "a", "model": "fixed", "us": 1},
        {"match": "b", "model": "fixed", "us": 1},
        {"match": "c", "model": "per_block", "base_us": 1, "per_block_us": -0.5}]})",
                     "catalog.json");
    FAIL();
  } catch (const CatalogError& error) {
    EXPECT_EQ(std::string(error.what()),
              "catalog.json: kernels[2].per_block_us: must be a number >= 0, got -0.5");
  }
}

struct BadCatalog {
  const char* label;
  const char* text;
  const char* fragment;  // path and complaint the message must name
};

void PrintTo(const BadCatalog& bad, std::ostream* out) { *out << bad.label; }

class CatalogErrorTest : public ::testing::TestWithParam<BadCatalog> {};

TEST_P(CatalogErrorTest, NamesFileAndPath) {
  KernelCatalog catalog;
  try {
    catalog.add_json(GetParam().text, "bad.json");
    FAIL() << "no error for: " << GetParam().text;
  } catch (const CatalogError& error) {
    const std::string message = error.what();
    EXPECT_EQ(message.rfind("bad.json: ", 0), 0u) << message;
    EXPECT_NE(message.find(GetParam().fragment), std::string::npos) << message;
  }
}

INSTANTIATE_TEST_SUITE_P(
    Errors, CatalogErrorTest,
    ::testing::Values(
        BadCatalog{"not_object", R"([1])", "top level must be an object"},
        BadCatalog{"missing_kernels", R"({"default_us": 1})", "kernels: missing key"},
        BadCatalog{"kernels_not_array", R"({"kernels": {}})", "kernels: must be an array"},
        BadCatalog{"unknown_top_key", R"({"kernels": [], "noise": 1})", "noise: unknown key"},
        BadCatalog{"entry_not_object", R"({"kernels": [3]})", "kernels[0]: must be an object"},
        BadCatalog{"missing_match", R"({"kernels": [{"model": "fixed", "us": 1}]})",
                   "kernels[0].match: missing key"},
        BadCatalog{"missing_model", R"({"kernels": [{"match": "a", "us": 1}]})",
                   "kernels[0].model: missing key"},
        BadCatalog{"missing_us", R"({"kernels": [{"match": "a", "model": "fixed"}]})",
                   "kernels[0].us: missing key"},
        BadCatalog{"missing_base_us",
                   R"({"kernels": [{"match": "a", "model": "per_block", "per_block_us": 1}]})",
                   "kernels[0].base_us: missing key"},
        BadCatalog{"missing_unit",
                   R"({"kernels": [{"match": "a", "model": "from_arg", "arg": 0}]})",
                   "kernels[0].unit: missing key"},
        BadCatalog{"key_of_other_model",
                   R"({"kernels": [{"match": "a", "model": "fixed", "us": 1, "arg": 0}]})",
                   "kernels[0].arg: unknown key for model 'fixed'"},
        BadCatalog{"unknown_entry_key",
                   R"({"kernels": [{"match": "a", "model": "fixed", "us": 1, "uss": 2}]})",
                   "kernels[0].uss: unknown key"},
        BadCatalog{"match_not_string", R"({"kernels": [{"match": 5, "model": "fixed", "us": 1}]})",
                   "kernels[0].match: must be a string, got 5"},
        BadCatalog{"us_is_string", R"({"kernels": [{"match": "a", "model": "fixed", "us": "5"}]})",
                   "kernels[0].us: must be a number >= 0, got \"5\""},
        BadCatalog{"negative_us", R"({"kernels": [{"match": "a", "model": "fixed", "us": -1}]})",
                   "kernels[0].us: must be a number >= 0"},
        BadCatalog{"unknown_model", R"({"kernels": [{"match": "a", "model": "linear"}]})",
                   "kernels[0].model: must be one of \"fixed\", \"per_block\", \"from_arg\", got "
                   "\"linear\""},
        BadCatalog{"unknown_unit",
                   R"({"kernels": [{"match": "a", "model": "from_arg", "arg": 0, "unit": "min"}]})",
                   "kernels[0].unit: must be one of"},
        BadCatalog{"arg_too_big",
                   R"({"kernels": [{"match": "a", "model": "from_arg", "arg": 64, "unit": "ns"}]})",
                   "kernels[0].arg: must be an integer in 0..63, got 64"},
        BadCatalog{"arg_negative",
                   R"({"kernels": [{"match": "a", "model": "from_arg", "arg": -1, "unit": "ns"}]})",
                   "kernels[0].arg: must be an integer in 0..63"},
        BadCatalog{
            "arg_fraction",
            R"({"kernels": [{"match": "a", "model": "from_arg", "arg": 1.5, "unit": "ns"}]})",
            "kernels[0].arg: must be an integer in 0..63"},
        BadCatalog{"bad_regex", R"({"kernels": [{"match": "a(b", "model": "fixed", "us": 1}]})",
                   "kernels[0].match: invalid regex 'a(b'"},
        BadCatalog{"negative_default", R"({"kernels": [], "default_us": -1})",
                   "default_us: must be a number >= 0"},
        BadCatalog{"negative_noise", R"({"kernels": [], "noise_cv": -0.1})",
                   "noise_cv: must be a number >= 0"},
        BadCatalog{"negative_seed", R"({"kernels": [], "seed": -1})", "seed: must be an integer"},
        BadCatalog{"huge_number", R"({"kernels": [], "default_us": 1e999})",
                   "number overflow parsing '1e999'"}),
    [](const ::testing::TestParamInfo<BadCatalog>& info) { return std::string(info.param.label); });

}  // namespace
}  // namespace gpuqos::simgpu
