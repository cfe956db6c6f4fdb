// The profile file: a round trip predicts the same; missing, truncated, corrupt, foreign, newer
// or invalid files give an empty model and a warning saying why; saving replaces atomically.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>

#include "gpuqos/predictor/store.h"
#include "gpuqos/testing/temp_dir.h"

namespace gpuqos::predictor {
namespace {

using ::testing::HasSubstr;

LaunchShape shape(std::uint64_t m, std::uint64_t n) {
  LaunchShape s;
  s.grid = {std::uint32_t(m / 32 + 1), std::uint32_t(n / 32 + 1), 1};
  s.block = {256, 1, 1};
  s.arg_count = 2;
  s.args = {m, n};
  return s;
}

Predictor trained() {
  PredictorConfig config;
  config.sm_count = 80;
  Predictor p(config);
  for (std::uint64_t i = 0; i < 300; ++i) {
    const LaunchShape s = shape(32 + 7 * i, 64 + 13 * (i % 17));
    p.observe(KernelFeatures{"gemm", s}, 3000.0 + 0.01 * double(s.args[0] * s.args[1]));
    p.observe(KernelFeatures{"small", s}, 2000.0 + double(i % 5));
    p.observe(CopyFeatures{CopyDirection::h2d, HostMemory::pinned, 4096 * (i + 1)}, 5000.0 + 4096.0 * double(i + 1) / 20);
  }
  return p;
}

std::string read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

void expect_empty(const LoadedProfile& loaded, const std::string& why) {
  ASSERT_TRUE(loaded.warning.has_value());
  EXPECT_THAT(*loaded.warning, HasSubstr(why));
  EXPECT_THAT(*loaded.warning, HasSubstr("starting with an empty model"));
  EXPECT_EQ(loaded.predictor.kernel_count(), 0u);
  EXPECT_EQ(loaded.predictor.predict(KernelFeatures{"gemm", shape(64, 64)}).model, ModelUsed::global_default);
}

TEST(Store, RoundTripPredictsTheSame) {
  const testing::TempDir dir;
  const Predictor original = trained();
  const auto path = dir.path() / "profile.gqp";
  ASSERT_EQ(save_profile(original, path), std::nullopt);
  const LoadedProfile loaded = load_profile(path, PredictorConfig{.sm_count = 80});
  EXPECT_EQ(loaded.warning, std::nullopt);
  EXPECT_EQ(loaded.predictor.kernel_count(), 2u);
  EXPECT_EQ(loaded.predictor.config().sm_count, 80u);
  EXPECT_EQ(loaded.predictor.stored_samples(), original.stored_samples());
  for (const char* name : {"gemm", "small", "unknown"}) {
    for (std::uint64_t m : {40u, 1000u, 20000u}) {
      const KernelFeatures k{name, shape(m, 100)};
      const Prediction a = original.predict(k), b = loaded.predictor.predict(k);
      EXPECT_NEAR(b.duration_ns / a.duration_ns, 1.0, 1e-6) << name << " " << m;
      EXPECT_NEAR(b.upper_ns / a.upper_ns, 1.0, 1e-6) << name << " " << m << " " << to_string(a.model);
      EXPECT_EQ(a.model, b.model);
      EXPECT_EQ(a.candidate, b.candidate);
    }
  }
  const CopyFeatures c{CopyDirection::h2d, HostMemory::pinned, 1 << 22};
  EXPECT_NEAR(loaded.predictor.predict(c).duration_ns, original.predict(c).duration_ns, 1e-6);
  // It keeps learning after a load exactly as the original does.
  Predictor continued = loaded.predictor;
  Predictor reference = original;
  continued.observe(KernelFeatures{"gemm", shape(500, 500)}, 9000);
  reference.observe(KernelFeatures{"gemm", shape(500, 500)}, 9000);
  EXPECT_NEAR(continued.predict(KernelFeatures{"gemm", shape(510, 500)}).duration_ns,
              reference.predict(KernelFeatures{"gemm", shape(510, 500)}).duration_ns, 1e-3);
}

// A store holds no kernel without a name (its loader refuses one), so none is learned: one kernel
// event without a name in a trace made `gpuqos train` write a store gpuqosd moved aside (a review).
TEST(Store, AKernelWithoutANameIsNotLearnedSoTheStoreStillLoads) {
  Predictor p = trained();
  EXPECT_FALSE(p.observe(KernelFeatures{"", shape(64, 64)}, 1000.0));
  const testing::TempDir dir;
  const auto path = dir.path() / "store.gqp";
  ASSERT_EQ(save_profile(p, path), std::nullopt);
  const LoadedProfile loaded = load_profile(path, PredictorConfig{.sm_count = 80});
  EXPECT_FALSE(loaded.warning.has_value()) << *loaded.warning;
  EXPECT_EQ(loaded.predictor.kernel_count(), p.kernel_count());
}

// The caller's config is only the fallback: gpuqosd passes the default (108 SMs) because it knows
// no device's SM count, so a store trained for 80 (or an H100's 132) is neither warned about nor
// re-banked; it predicts with the count it was trained for.
TEST(Store, ALoadedProfileKeepsItsOwnSmCountWithoutAWarning) {
  const std::string bytes = encode_profile(trained());
  const LoadedProfile loaded = decode_profile(bytes, "p", PredictorConfig{.sm_count = 132});
  EXPECT_EQ(loaded.warning, std::nullopt);
  EXPECT_EQ(loaded.predictor.config().sm_count, 80u);
  EXPECT_EQ(loaded.predictor.kernel_count(), 2u);
}

TEST(Store, MissingFile) {
  const testing::TempDir dir;
  expect_empty(load_profile(dir.path() / "absent.gqp", {}), "absent.gqp: no such file");
}

TEST(Store, TruncatedFile) {
  const std::string bytes = encode_profile(trained());
  expect_empty(decode_profile(bytes.substr(0, bytes.size() - 100), "p", {}), "p: truncated or padded: the header says");
  expect_empty(decode_profile(bytes.substr(0, 20), "p", {}), "truncated: 20 bytes, shorter than the header");
  expect_empty(decode_profile("", "p", {}), "truncated: 0 bytes");
}

TEST(Store, CorruptBody) {
  std::string bytes = encode_profile(trained());
  bytes[bytes.size() / 2] = char(bytes[bytes.size() / 2] ^ 0x5a);
  expect_empty(decode_profile(bytes, "p", {}), "checksum mismatch");
}

TEST(Store, ForeignOrNewerFile) {
  std::string bytes = encode_profile(trained());
  std::string foreign = bytes;
  foreign[0] = 'X';
  expect_empty(decode_profile(foreign, "p", {}), "not a gpuqos predictor profile");
  std::string newer = bytes;
  newer[8] = 2;
  expect_empty(decode_profile(newer, "p", {}), "unsupported profile version 2");
}

// A store's path pointed at another kind of file is told from a store, whole or damaged, so that
// it is neither moved aside nor saved over.
TEST(Store, AFileThatIsPlainlyNotAStoreIsToldApartFromADamagedOne) {
  const testing::TempDir dir;
  const std::string store = encode_profile(trained());
  const struct {
    std::string name, content;
    std::optional<std::string> what;  // a part of what foreign_file() says, or nullopt: not foreign
  } cases[] = {
      {"profile.jsonl", "{\"format\":\"gpuqos-profile\",\"version\":1}\n{\"kind\":\"copy\"}\n",
       "a gpuqos profile of measurements (`gpuqos train --from"},
      {"workload.json", "  {\"ops\": []}", "JSON text"},
      {"config.toml", "[policy]\nname = \"baymax\"\n", "JSON or TOML text"},
      {"junk.bin", std::string("\x7f""ELF\x02\x01\x01\0\0\0", 10), "a file of another format"},
      {"store.gqp", store, std::nullopt},
      {"truncated.gqp", store.substr(0, 20), std::nullopt},
      {"short.gqp", "GPUQ", std::nullopt},  // a store cut short inside its magic
      {"corrupt.gqp", "GPUQOSPF but then garbage", std::nullopt},
      {"empty.gqp", "", std::nullopt},
      // A store with one bit of its magic flipped is a damaged store, not another format (an audit:
      // gpuqosd refused to start over it).
      {"flipped.gqp", std::string(1, static_cast<char>(store[0] ^ 1)) + store.substr(1), std::nullopt},
      {"three_flipped.gqp", "FQUQOSPG" + store.substr(8), std::nullopt},
  };
  for (const auto& c : cases) {
    const auto path = dir.write(c.name, c.content);
    const auto what = foreign_file(path);
    ASSERT_EQ(what.has_value(), c.what.has_value()) << c.name << ": " << what.value_or("(a store)");
    if (what) {
      EXPECT_NE(what->find(*c.what), std::string::npos) << c.name << ": " << *what;
    }
  }
  EXPECT_EQ(foreign_file(dir.path() / "absent.gqp"), std::nullopt);
  EXPECT_EQ(foreign_file(dir.path()), std::nullopt);  // not a regular file: load_profile says so
}

// A well-formed envelope around a body whose content is wrong.
std::string envelope(const std::string& json_text) {
  uLongf length = compressBound(uLong(json_text.size()));
  std::string body(length, '\0');
  compress2(reinterpret_cast<Bytef*>(body.data()), &length, reinterpret_cast<const Bytef*>(json_text.data()), uLong(json_text.size()), 6);
  body.resize(length);
  std::string out = "GPUQOSPF";
  auto put = [&out](std::uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out.push_back(char((v >> (8 * i)) & 0xff));
  };
  put(1, 4);
  put(0, 4);
  put(body.size(), 8);
  put(json_text.size(), 8);
  put(crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(body.data()), uInt(body.size())), 4);
  put(0, 4);
  return out + body;
}

// The JSON body of an encoded profile.
nlohmann::json body_of(const std::string& bytes) {
  std::uint64_t json_bytes = 0;
  for (int i = 0; i < 8; ++i) json_bytes |= std::uint64_t(static_cast<unsigned char>(bytes[24 + std::size_t(i)])) << (8 * i);
  std::string text(json_bytes, '\0');
  uLongf length = uLongf(json_bytes);
  uncompress(reinterpret_cast<Bytef*>(text.data()), &length, reinterpret_cast<const Bytef*>(bytes.data() + 40), uLong(bytes.size() - 40));
  return nlohmann::json::parse(text);
}

TEST(Store, InvalidContent) {
  expect_empty(decode_profile(envelope("{not json"), "p", {}), "invalid content");
  expect_empty(decode_profile(envelope("[1, 2]"), "p", {}), "the body is not a JSON object");
  const nlohmann::json good = body_of(encode_profile(trained()));
  nlohmann::json bad = good;
  bad["config"]["knn_max_distance"] = nullptr;  // what a NaN becomes in JSON
  expect_empty(decode_profile(envelope(bad.dump()), "p", {}), "config.knn_max_distance: null is not a finite number");
  bad = good;
  bad["kernels"][0]["samples"][0][0] = {0, 1, 1};
  expect_empty(decode_profile(envelope(bad.dump()), "p", {}), "grid[0]: 0 is not an integer in 1..4294967295");
  bad = good;
  bad["copies"]["classes"].erase(0);
  expect_empty(decode_profile(envelope(bad.dump()), "p", {}), "copies: expected 12 class lines");
  bad = good;
  bad["kernels"][1].erase("sums");
  expect_empty(decode_profile(envelope(bad.dump()), "p", {}), "invalid content");
  EXPECT_EQ(decode_profile(envelope(good.dump()), "p", PredictorConfig{.sm_count = 80}).warning, std::nullopt);
}

// Sizes a file can claim are checked before anything that large is allocated: the header's JSON
// size is outside the CRC, and a count read as unsigned would wrap -1 to 4294967295.
TEST(Store, ImplausibleSizesAreRefusedBeforeAllocating) {
  std::string bytes = encode_profile(trained());
  for (int i = 0; i < 8; ++i) bytes[24 + std::size_t(i)] = char(i < 4 ? 0xff : 0);  // 4 GiB - 1 of JSON
  expect_empty(decode_profile(bytes, "p", {}), "the header says 4294967295 bytes of JSON, more than a store can hold");
  nlohmann::json bad = body_of(encode_profile(trained()));
  bad["config"]["stats_window"] = -1;
  expect_empty(decode_profile(envelope(bad.dump()), "p", {}), "config.stats_window: -1 is not an integer in 1..1048576");
  bad["config"]["stats_window"] = 1.5;
  expect_empty(decode_profile(envelope(bad.dump()), "p", {}), "config.stats_window: 1.5 is not an integer");
}

// A review: values the loader passed became inf on conversion (a log2 duration of 1e39, a finite
// double, as a float; exp2 of 1e300 as a prediction), or made LogMoments::add divide by zero (a
// global count of -1). Such a store predicted inf and its next save wrote null, which the load
// after refused: the whole store was lost.
TEST(Store, ValuesThatWouldBecomeInfiniteAreRefusedWithTheirPlace) {
  const nlohmann::json good = body_of(encode_profile(trained()));
  nlohmann::json bad = good;
  bad["kernels"][0]["samples"][2][4] = 1e39;
  expect_empty(decode_profile(envelope(bad.dump()), "p", {}),
               "p: invalid content: kernels[0] \"gemm\" samples[2] log2_ns: 1e+39 is not the log2 of a duration (-1074..1023)");
  bad = good;
  bad["kernels"][1]["recent_log2_ns"][5] = 1e39;
  expect_empty(decode_profile(envelope(bad.dump()), "p", {}), "kernels[1] \"small\" recent_log2_ns[5]: 1e+39 is not the log2");
  bad = good;
  bad["copies"]["classes"][0]["residuals"] = {1e39};
  expect_empty(decode_profile(envelope(bad.dump()), "p", {}), "copies.classes[0] residuals[0]: 1e+39 is not the log2");
  bad = good;
  bad["global_log2_ns"][1] = 1e300;
  expect_empty(decode_profile(envelope(bad.dump()), "p", {}), "global_log2_ns[1]: 1e+300 is not the log2 of a duration");
  bad = good;
  bad["global_log2_ns"][0] = -1;
  expect_empty(decode_profile(envelope(bad.dump()), "p", {}), "global_log2_ns[0]: -1 is not a count");
}

// A review: a grid of ["a",1,1] said only "type must be number, but is string", [1e20,1,1] "zero
// grid or block dimension" (an undefined conversion), and [-1,1,1] or observations -5 loaded as
// 4294967295. Each is refused, naming where it is.
TEST(Store, InvalidContentNamesWhereItIs) {
  const nlohmann::json good = body_of(encode_profile(trained()));
  const auto refused = [&good](const std::function<void(nlohmann::json&)>& change, const std::string& why) {
    nlohmann::json bad = good;
    change(bad);
    expect_empty(decode_profile(envelope(bad.dump()), "p", {}), "p: invalid content: " + why + "; starting with an empty model");
  };
  refused([](auto& b) { b["kernels"][0]["samples"][3][0] = {"a", 1, 1}; },
          "kernels[0] \"gemm\" samples[3] grid[0]: \"a\" is not an integer in 1..4294967295");
  refused([](auto& b) { b["kernels"][0]["samples"][3][0] = {1e20, 1, 1}; },
          "kernels[0] \"gemm\" samples[3] grid[0]: 1e+20 is not an integer in 1..4294967295");
  refused([](auto& b) { b["kernels"][0]["samples"][3][1] = {256, -1, 1}; },
          "kernels[0] \"gemm\" samples[3] block[1]: -1 is not an integer in 1..4294967295");
  refused([](auto& b) { b["kernels"][0]["samples"][3][3] = {64, 2.5}; },
          "kernels[0] \"gemm\" samples[3] args[1]: 2.5 is not an integer in 0..18446744073709551615");
  refused([](auto& b) { b["kernels"][1]["observations"] = -5; },
          "kernels[1] \"small\" observations: -5 is not an integer in 0..18446744073709551615");
  refused([](auto& b) { b["kernels"][1].erase("sums"); }, "kernels[1] \"small\": key 'sums' not found");
  refused([](auto& b) { b["kernels"] = 5; }, "kernels: 5 is not an array");
  refused([](auto& b) { b["copies"]["classes"][0]["sizes"] = {{5}}; },
          "copies.classes[0] sizes[0]: expected [bytes, [log2 durations]]");
  refused([](auto& b) { b["copies"]["directions"][1]["sizes"] = {{-4096, {12.0}}}; },
          "copies.directions[1] sizes[0][0]: -4096 is not an integer in 0..18446744073709551615");
}

// A review: a score's count of 2^64 - 1 loaded, wrapped to 0 at the next observation and made the
// mean NaN, and every save after was refused ("not a finite number"); a negative mean error pinned
// its candidate as the best, and a default duration of 0 or less made every op never seen free.
TEST(Store, ScoresAndDefaultsAreBoundedAndAFullCountSaturates) {
  const nlohmann::json good = body_of(encode_profile(trained()));
  ASSERT_TRUE(good["kernels"][0]["scores"].is_object() && !good["kernels"][0]["scores"].empty());
  const std::string candidate = good["kernels"][0]["scores"].begin().key();
  nlohmann::json full = good;
  full["kernels"][0]["scores"][candidate][1] = std::numeric_limits<std::uint64_t>::max();
  LoadedProfile loaded = decode_profile(envelope(full.dump()), "p", {});
  ASSERT_EQ(loaded.warning, std::nullopt);
  loaded.predictor.observe(KernelFeatures{"gemm", shape(40, 80)}, 3100.0);
  const LoadedProfile again = decode_profile(encode_profile(loaded.predictor), "p", {});
  EXPECT_EQ(again.warning, std::nullopt) << "saved and loaded after the observation";

  nlohmann::json bad = good;
  bad["kernels"][0]["scores"][candidate][0] = -0.5;
  expect_empty(decode_profile(envelope(bad.dump()), "p", {}),
               "kernels[0] \"gemm\" scores \"" + candidate + "\" score[0]: -0.5 is not a mean error (>= 0)");
  for (const char* key : {"default_kernel_ns", "default_copy_latency_ns"}) {
    bad = good;
    bad["config"][key] = 0.0;
    expect_empty(decode_profile(envelope(bad.dump()), "p", {}), std::string("config.") + key + ": 0.0 is not a duration (> 0 ns)");
  }
}

// A review: a store's config allowed max_samples_per_kernel and stats_window up to 2^20, and each
// kernel's sample store allocates its capacity (a 14 KB store took 3.3 GB); max_kernels 0 dropped
// every kernel silently and learned none after. The memory bounds are cut to the loader's, 0 is
// refused, and what the cut drops is said.
TEST(Store, AStoresMemoryBoundsAreCutToTheLoadersAndWhatThatDropsIsSaid) {
  const Predictor original = trained();
  nlohmann::json big = body_of(encode_profile(original));
  for (const char* key : {"max_samples_per_kernel", "max_kernels", "stats_window"}) big["config"][key] = 1 << 20;
  const LoadedProfile loaded = decode_profile(envelope(big.dump()), "p", {});
  EXPECT_EQ(loaded.warning, std::nullopt);
  EXPECT_EQ(loaded.predictor.config().max_samples_per_kernel, 256u);
  EXPECT_EQ(loaded.predictor.config().max_kernels, 4096u);
  EXPECT_EQ(loaded.predictor.config().stats_window, 64u);
  EXPECT_EQ(loaded.predictor.stored_samples(), original.stored_samples());

  nlohmann::json none = body_of(encode_profile(original));
  none["config"]["max_kernels"] = 0;
  expect_empty(decode_profile(envelope(none.dump()), "p", {}), "config.max_kernels: 0 is not an integer in 1..1048576");

  const std::string bytes = encode_profile(original);
  const LoadedProfile one = decode_profile(bytes, "p", PredictorConfig{.max_kernels = 1});
  EXPECT_EQ(one.warning, "p: dropped 1 kernel name beyond max_kernels (1); the rest of the store is loaded");
  EXPECT_FALSE(one.unreadable);
  EXPECT_EQ(one.predictor.kernel_names(), std::vector<std::string>{"gemm"});
  const LoadedProfile few = decode_profile(bytes, "p", PredictorConfig{.max_samples_per_kernel = 10});
  const std::size_t over = original.kernel("gemm")->store().size() + original.kernel("small")->store().size() - 20;
  EXPECT_EQ(few.warning, "p: dropped " + std::to_string(over) + " shapes beyond max_samples_per_kernel (10); the rest of the store is loaded");
  EXPECT_EQ(few.predictor.stored_samples(), 20u);
}

// A well-formed envelope whose header claims `json_bytes` of JSON for `body`.
std::string claiming(std::string body, std::uint64_t json_bytes) {
  std::string out = envelope("{}");
  out.resize(40);
  for (int i = 0; i < 8; ++i) out[16 + std::size_t(i)] = char((body.size() >> (8 * i)) & 0xff);
  for (int i = 0; i < 8; ++i) out[24 + std::size_t(i)] = char((json_bytes >> (8 * i)) & 0xff);
  const auto crc = crc32(crc32(0L, Z_NULL, 0), reinterpret_cast<const Bytef*>(body.data()), uInt(body.size()));
  for (int i = 0; i < 4; ++i) out[32 + std::size_t(i)] = char((crc >> (8 * i)) & 0xff);
  return out + body;
}

// A review: a 261 KB file inflated to 256 MiB of "[0,0,...", and parse() built all of it (4.46 GB,
// 19 s in gpuqosd's start) before anything was checked. A body is refused beyond what the largest
// store inflates to (356 MB), and its parse past what a store of the loader's limits holds.
TEST(Store, ABodyLargerThanAnyStoreIsRefusedBeforeItIsBuilt) {
  const std::string compressed = encode_profile(trained()).substr(40);
  std::string body;
  while (body.size() < 600'000) body += compressed;  // enough that 1032:1 allows the claim
  expect_empty(decode_profile(claiming(body, (std::uint64_t{512} << 20) + 1), "p", {}),
               "the header says 536870913 bytes of JSON, more than a store can hold (536870912)");

  std::string zeros = "[0";
  for (int i = 0; i < 10'000; ++i) zeros += ",0";
  zeros += "]";
  expect_empty(decode_profile(envelope(zeros), "p", {}),
               "p: invalid content: an array or object of more than 8192 elements, more than any of a store holds");
  std::string thousand = "[0";
  for (int i = 1; i < 1000; ++i) thousand += ",0";
  thousand += "]";
  std::string arrays = "[" + thousand;
  for (int i = 1; i < 80; ++i) arrays += "," + thousand;  // 80,081 values, in arrays none too long
  arrays += "]";
  const PredictorConfig small{.max_samples_per_kernel = 1, .max_kernels = 1, .stats_window = 1};
  expect_empty(decode_profile(envelope(arrays), "p", small),
               "p: invalid content: more than 66596 JSON values, more than a store of max_kernels 1 and max_samples_per_kernel 1 holds");
  expect_empty(decode_profile(envelope(std::string(100, '[') + std::string(100, ']')), "p", {}), "nested deeper than 16 levels");
}

// A review: a JSON length one too large said "corrupt compressed body (zlib error 0)".
TEST(Store, AJsonLengthTheBodyDoesNotInflateToIsToldAsSuch) {
  const std::string text = body_of(encode_profile(trained())).dump();
  const std::string body = envelope(text).substr(40);
  expect_empty(decode_profile(claiming(body, text.size() + 1), "p", {}),
               "the header says " + std::to_string(text.size() + 1) + " bytes of JSON, the body inflates to " + std::to_string(text.size()));
  expect_empty(decode_profile(claiming(body, text.size() - 1), "p", {}),
               "the body inflates to more than the " + std::to_string(text.size() - 1) + " bytes of JSON the header says");
}

// What gpuqosd may do with the file: move aside one whose content is unusable; leave alone one it
// cannot read at all (it may be fine); a missing one is neither.
TEST(Store, AFileWithUnusableContentIsUnreadableOneThatCannotBeReadIsInaccessible) {
  const testing::TempDir dir;
  const LoadedProfile missing = load_profile(dir.path() / "absent.gqp", {});
  EXPECT_FALSE(missing.unreadable || missing.inaccessible);
  const auto corrupt = dir.path() / "corrupt.gqp";
  std::ofstream(corrupt, std::ios::binary) << "GPUQOSPF garbage";
  const LoadedProfile garbage = load_profile(corrupt, {});
  EXPECT_TRUE(garbage.unreadable && !garbage.inaccessible);
  const LoadedProfile directory = load_profile(dir.path(), {});
  expect_empty(directory, "not a regular file");
  EXPECT_TRUE(directory.inaccessible && !directory.unreadable);
  const auto path = dir.path() / "good.gqp";
  ASSERT_EQ(save_profile(trained(), path), std::nullopt);
  const LoadedProfile good = load_profile(path, PredictorConfig{.sm_count = 80});
  EXPECT_FALSE(good.unreadable || good.inaccessible);
}

// A model holding a NaN or an infinity (a fault: no load accepts one) is not saved over a good
// store: nlohmann wrote it as null, and every later gpuqosd started with an empty model.
TEST(Store, AModelWithANonFiniteNumberIsNotSavedOverAGoodStore) {
  const testing::TempDir dir;
  const auto path = dir.path() / "profile.gqp";
  ASSERT_EQ(save_profile(trained(), path), std::nullopt);
  const std::string good = read_file(path);
  for (const double fault : {std::numeric_limits<double>::quiet_NaN(), std::numeric_limits<double>::infinity()}) {
    Predictor::State state = trained().state();
    state.global_log2_ns.mean = fault;
    const auto error = save_profile(Predictor::restore(state), path);
    ASSERT_TRUE(error.has_value());
    EXPECT_THAT(*error, HasSubstr("global_log2_ns"));
    EXPECT_THAT(*error, HasSubstr("is not a finite number"));
    EXPECT_EQ(read_file(path), good) << "the good store is left as it was";
  }
  EXPECT_FALSE(load_profile(path, PredictorConfig{.sm_count = 80}).unreadable);
}

// gpuqosd saves over its store only if it is still the file it read or last wrote, checked in the
// same step as the replacement: a store trained between its check and its rename (gpuqos train
// --out) was replaced, silently (a review).
TEST(Store, ASaveOverAStoreReplacesOnlyTheFileItWasToldOf) {
  const testing::TempDir dir;
  const auto path = dir.path() / "store.gqp";
  ASSERT_EQ(save_profile(trained(), path), std::nullopt);
  const FileIdentity read = identity_of(path);
  ASSERT_TRUE(read.exists);
  ASSERT_EQ(save_profile(Predictor(), path), std::nullopt);  // another writer, since
  const std::string theirs = read_file(path);
  const auto changed = save_profile(trained(), path, SaveAs::store, {}, &read);
  ASSERT_TRUE(changed.has_value());
  EXPECT_EQ(*changed, kStoreChanged);
  EXPECT_EQ(read_file(path), theirs) << "theirs stays";
  const FileIdentity now = identity_of(path);
  FileIdentity saved;
  ASSERT_EQ(save_profile(trained(), path, SaveAs::store, {}, &now, &saved), std::nullopt);
  EXPECT_EQ(read_file(path), encode_profile(trained()));
  EXPECT_EQ(saved, identity_of(path)) << "the file saved, as it is at the path";
  // Told there was none: one there is another's; none there is written.
  const FileIdentity none;
  EXPECT_EQ(save_profile(Predictor(), path, SaveAs::store, {}, &none).value_or(""), kStoreChanged);
  EXPECT_EQ(save_profile(Predictor(), dir.path() / "new.gqp", SaveAs::store, {}, &none), std::nullopt);
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 2u) << "no temporary left";
}

// A file system without renameat2's flags (NFS, most FUSE file systems, kernels before 3.15) says
// EINVAL to both. A store not there yet was then never saved (a review: gpuqosd lost all it learned
// at each exit); now a new store is put there by link(), and one there by a checked rename.
int no_rename_flags(int, const char*, int, const char*, unsigned) {
  errno = EINVAL;
  return -1;
}

TEST(Store, WithoutRenameFlagsAStoreIsStillPutOnlyWhereItWasToldOf) {
  const testing::TempDir dir;
  const auto path = dir.path() / "store.gqp";
  const auto write = [&](const std::string& name, const std::string& text) {
    std::ofstream(dir.path() / name) << text;
    return (dir.path() / name).string();
  };
  const FileIdentity none;
  ASSERT_EQ(replace_if_still(write("t1", "first"), path, none, no_rename_flags), 0) << std::strerror(errno);
  EXPECT_EQ(read_file(path), "first");
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "t1")) << "its temporary name is gone";
  // Told there was none, but one is there: left as it is, and ours at its temporary name.
  EXPECT_EQ(replace_if_still(write("t2", "second"), path, none, no_rename_flags), -1);
  EXPECT_EQ(errno, EEXIST);
  EXPECT_EQ(read_file(path), "first");
  EXPECT_EQ(read_file(dir.path() / "t2"), "second");
  // Told of the one there: replaced; told of another: EEXIST, nothing replaced.
  const FileIdentity first = identity_of(path);
  ASSERT_EQ(replace_if_still(dir.path() / "t2", path, first, no_rename_flags), 0) << std::strerror(errno);
  EXPECT_EQ(read_file(path), "second");
  EXPECT_EQ(replace_if_still(write("t3", "third"), path, first, no_rename_flags), -1);
  EXPECT_EQ(errno, EEXIST);
  EXPECT_EQ(read_file(path), "second");
  // A link() that NFS retried after its reply was lost says EEXIST for our own link: saved. A
  // symbolic link planted at the name, to our temporary file, is not ours.
  const auto fresh = dir.path() / "fresh.gqp";
  ASSERT_EQ(::link(write("t4", "fourth").c_str(), fresh.c_str()), 0);
  EXPECT_EQ(replace_if_still(dir.path() / "t4", fresh, none, no_rename_flags), 0) << std::strerror(errno);
  EXPECT_EQ(read_file(fresh), "fourth");
  EXPECT_FALSE(std::filesystem::exists(dir.path() / "t4"));
  const auto planted = dir.path() / "planted.gqp";
  std::filesystem::create_symlink(write("t5", "fifth"), planted);
  EXPECT_EQ(replace_if_still(dir.path() / "t5", planted, none, no_rename_flags), -1);
  EXPECT_EQ(errno, EEXIST);
  EXPECT_TRUE(std::filesystem::is_symlink(planted));
  EXPECT_EQ(read_file(dir.path() / "t5"), "fifth") << "ours left at its temporary name";
}

TEST(Store, SaveReplacesAtomicallyAndLeavesNoTemporaries) {
  const testing::TempDir dir;
  const auto path = dir.path() / "profile.gqp";
  ASSERT_EQ(save_profile(Predictor(), path), std::nullopt);
  const Predictor p = trained();
  ASSERT_EQ(save_profile(p, path), std::nullopt);
  EXPECT_EQ(read_file(path), encode_profile(p));
  std::size_t files = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator(dir.path())) ++files;
  EXPECT_EQ(files, 1u);
  const auto error = save_profile(p, dir.path() / "no-such-dir" / "profile.gqp");
  ASSERT_TRUE(error.has_value());
  EXPECT_THAT(*error, HasSubstr("cannot create"));
}

// The store's directory may be writable by others (a user test: a root gpuqosd overwrote a 0600
// root file through a link another user planted at <store>.tmp.<pid>). No name the save writes
// through can be planted in advance.
TEST(Store, SaveNeverWritesThroughALinkPlantedAtATemporaryName) {
  const testing::TempDir dir;
  const auto victim = dir.path() / "victim.txt";
  std::ofstream(victim) << "precious";
  const auto path = dir.path() / "profile.gqp";
  std::filesystem::create_symlink(victim, path.string() + ".tmp." + std::to_string(::getpid()));
  const Predictor p = trained();
  ASSERT_EQ(save_profile(p, path), std::nullopt);
  EXPECT_EQ(read_file(victim), "precious");
  EXPECT_EQ(read_file(path), encode_profile(p));
  EXPECT_EQ(std::filesystem::status(path).permissions() & std::filesystem::perms::others_read,
            std::filesystem::perms::others_read);
}

// A link another user planted at the store itself is not followed, and not replaced either: the
// save is refused with the reason (gpuqosd then saves beside it).
TEST(Store, ALinkAnotherUserPlantedAtTheStoreIsNotFollowed) {
  if (::geteuid() != 0) GTEST_SKIP() << "only root can make a link of another user's";
  const testing::TempDir dir;
  const auto victim = dir.path() / "victim.txt";
  std::ofstream(victim) << "precious";
  const auto path = dir.path() / "profile.gqp";
  std::filesystem::create_symlink(victim, path);
  ASSERT_EQ(::lchown(path.c_str(), 65534, 65534), 0) << "nobody's link";
  EXPECT_EQ(save_target(path), path);
  const auto error = save_profile(trained(), path);
  ASSERT_TRUE(error.has_value());
  EXPECT_THAT(*error, HasSubstr("is a link that is not followed"));
  EXPECT_EQ(read_file(victim), "precious");
  EXPECT_TRUE(std::filesystem::is_symlink(path));
}

// A review: a link of root's own into a directory another user can change (here: one that anyone
// may write, not sticky) let that user choose where root wrote, by swapping a directory on the way.
// Such a link is not followed. And `..` after a linked directory is where the kernel takes it, not
// where the path's text says: a decoy at the textual place was replaced.
TEST(Store, ALinkIsFollowedOnlyThroughDirectoriesNoOneElseCanChangeAndAsTheKernelResolvesIt) {
  const testing::TempDir dir;
  const auto open_to_all = dir.path() / "open";
  std::filesystem::create_directory(open_to_all);
  std::filesystem::permissions(open_to_all, std::filesystem::perms(0777));
  std::filesystem::create_symlink(open_to_all / "v3.gqp", dir.path() / "current.gqp");
  EXPECT_EQ(save_target(dir.path() / "current.gqp"), dir.path() / "current.gqp");
  EXPECT_THAT(save_profile(trained(), dir.path() / "current.gqp").value_or(""), HasSubstr("is a link that is not followed"));
  EXPECT_FALSE(std::filesystem::exists(open_to_all / "v3.gqp"));

  // srv/gq -> data/gq, and data/gq/current.gqp -> ../models/v3.gqp: data/models/v3.gqp, not srv/models/v3.gqp.
  for (const char* made : {"data/gq", "data/models", "srv/models"}) std::filesystem::create_directories(dir.path() / made);
  std::filesystem::create_directory_symlink(dir.path() / "data" / "gq", dir.path() / "srv" / "gq");
  std::filesystem::create_symlink("../models/v3.gqp", dir.path() / "data" / "gq" / "current.gqp");
  std::ofstream(dir.path() / "srv" / "models" / "v3.gqp") << "a decoy";
  const Predictor p = trained();
  ASSERT_EQ(save_profile(p, dir.path() / "srv" / "gq" / "current.gqp"), std::nullopt);
  EXPECT_EQ(read_file(dir.path() / "data" / "models" / "v3.gqp"), encode_profile(p));
  EXPECT_EQ(read_file(dir.path() / "srv" / "models" / "v3.gqp"), "a decoy");
}

// A review: in a directory others can add to, a 0666 store another user planted before root's
// first save stayed theirs (and writable) once root saved over it, keeping its owner and mode.
TEST(Store, AStoreAnotherUserPlantedInASharedDirectoryBecomesTheSaversAndWritableByNoOneElse) {
  if (::geteuid() != 0) GTEST_SKIP() << "only root can make a file of another user's";
  const testing::TempDir dir;
  const auto shared = dir.path() / "shared";
  std::filesystem::create_directory(shared);
  std::filesystem::permissions(shared, std::filesystem::perms(01777));
  const auto path = shared / "profile.gqp";
  std::ofstream(path) << "GPUQOSPF";
  ASSERT_EQ(::chown(path.c_str(), 65534, 65534), 0);
  std::filesystem::permissions(path, std::filesystem::perms(0666));
  ASSERT_EQ(save_profile(trained(), path), std::nullopt);
  struct stat info{};
  ASSERT_EQ(::stat(path.c_str(), &info), 0);
  EXPECT_EQ(info.st_uid, 0u);
  EXPECT_EQ(info.st_mode & 0777, 0644u);
}

// A user test: a store at `current.gqp -> v3.gqp` (the user's own link) became a plain file at
// each save, v3.gqp untouched; a 0640 store became 0644; /dev/null, a FIFO and a read-only store
// were replaced by a store file.
TEST(Store, SaveWritesWhereTheUsersOwnLinkPointsAndKeepsTheModeItReplaces) {
  const testing::TempDir dir;
  std::filesystem::create_directory(dir.path() / "models");
  const auto version = dir.path() / "models" / "v3.gqp";
  ASSERT_EQ(save_profile(Predictor(), version), std::nullopt);
  std::filesystem::permissions(version, std::filesystem::perms(0640));
  const auto current = dir.path() / "current.gqp";
  std::filesystem::create_symlink("models/v3.gqp", current);
  const auto chained = dir.path() / "latest.gqp";
  std::filesystem::create_symlink("current.gqp", chained);
  EXPECT_EQ(save_target(chained), version);
  const Predictor p = trained();
  ASSERT_EQ(save_profile(p, chained), std::nullopt);
  EXPECT_TRUE(std::filesystem::is_symlink(current));
  EXPECT_TRUE(std::filesystem::is_symlink(chained));
  EXPECT_EQ(read_file(version), encode_profile(p));
  EXPECT_EQ(std::filesystem::status(version).permissions(), std::filesystem::perms(0640));
  // A link to a store not there yet: made where it points.
  const auto dangling = dir.path() / "next.gqp";
  std::filesystem::create_symlink("models/v4.gqp", dangling);
  ASSERT_EQ(save_profile(p, dangling), std::nullopt);
  EXPECT_TRUE(std::filesystem::is_symlink(dangling));
  EXPECT_EQ(read_file(dir.path() / "models" / "v4.gqp"), encode_profile(p));
}

// A review: a link of the user's own to a store in a directory not made yet was refused as "a link
// that is not followed (another user's, ...)"; the reason is the missing directory.
TEST(Store, ALinkIntoADirectoryThatDoesNotExistSaysSo) {
  const testing::TempDir dir;
  const auto link = dir.path() / "current.gqp";
  std::filesystem::create_symlink("models/v3.gqp", link);
  EXPECT_EQ(save_profile(trained(), link),
            link.string() + " is a link to a file in " + (dir.path() / "models").string() + ", which does not exist: nothing is saved over it");
  EXPECT_TRUE(std::filesystem::is_symlink(link));
}

TEST(Store, SaveRefusesWhatIsNotARegularFileAndWhatIsReadOnly) {
  const testing::TempDir dir;
  const auto fifo = dir.path() / "fifo.gqp";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0644), 0);
  const auto error = save_profile(trained(), fifo);
  ASSERT_TRUE(error.has_value());
  EXPECT_THAT(*error, HasSubstr("is a FIFO, not a store file: nothing is saved over it"));
  EXPECT_TRUE(std::filesystem::is_fifo(fifo));
  EXPECT_THAT(why_not_saved_over(dir.path()).value_or(""), HasSubstr("is a directory"));
  EXPECT_EQ(why_not_saved_over(dir.path() / "none.gqp"), std::nullopt) << "nothing there: a new store";
  const auto loop = dir.path() / "loop.gqp";
  std::filesystem::create_symlink("loop-back.gqp", loop);
  std::filesystem::create_symlink("loop.gqp", dir.path() / "loop-back.gqp");
  EXPECT_THAT(save_profile(trained(), loop).value_or(""), HasSubstr("loop.gqp: too many levels of symbolic links"));
  EXPECT_TRUE(std::filesystem::is_symlink(loop)) << "the loop is left as it was";

  const auto kept = dir.path() / "kept.gqp";
  ASSERT_EQ(save_profile(Predictor(), kept), std::nullopt);
  const std::string before = read_file(kept);
  std::filesystem::permissions(kept, std::filesystem::perms(0444));  // its owner's word, root's too
  const auto refused = save_profile(trained(), kept);
  ASSERT_TRUE(refused.has_value());
  EXPECT_THAT(*refused, HasSubstr("is read-only (mode 0444"));
  EXPECT_EQ(read_file(kept), before);
}

}  // namespace
}  // namespace gpuqos::predictor
