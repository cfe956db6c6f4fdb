// gpuqos-bench's results folder (benchmarks/qos/output_dir.h): one bench per folder, no earlier
// run's results left to pass for this one's, and result files written whole or not at all.
#include <gtest/gtest.h>

#include <signal.h>
#include <sys/resource.h>

#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>

#include "gpuqos/testing/temp_dir.h"
#include "output_dir.h"

namespace gpuqos::qos {
namespace {

namespace fs = std::filesystem;

std::string read(const fs::path& path) {
  std::ifstream in(path);
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

TEST(QosOutputDir, ASecondBenchOnTheSameFolderIsRefused) {
  // A review: two benches with the same --out overwrote each other's runs/<run>.json and logs.
  testing::TempDir dir("qos-output-dir-test");
  const fs::path out = dir.path() / "results";
  {
    const OutDirLock first(out);
    EXPECT_TRUE(fs::is_directory(out)) << "the folder is created";
    try {
      const OutDirLock second(out);
      ADD_FAILURE() << "a second bench took the same folder";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("another gpuqos-bench is writing to " + out.string()), std::string::npos)
          << e.what();
    }
  }
  EXPECT_NO_THROW(const OutDirLock again(out)) << "released with the first";
}

TEST(QosOutputDir, TheLastRunsResultsAreRemovedAndNothingElse) {
  // A review: a run that failed or was cut short left the previous run's qos.json, qos.md and
  // plots in place, to be read as its own.
  testing::TempDir dir("qos-output-dir-test");
  for (const char* name : {"qos.json", "qos.md", "qos_p99_over_target.png", "weights.json"}) dir.write(name, "old");
  fs::create_directories(dir.path() / "logs");
  dir.write("logs/plot.png", "kept: not directly in the folder");
  const std::vector<std::string> removed = remove_previous_results(dir.path(), {"qos.json", "qos.md"}, ".png");
  EXPECT_EQ(removed.size(), 3u);
  EXPECT_FALSE(fs::exists(dir.path() / "qos.json"));
  EXPECT_FALSE(fs::exists(dir.path() / "qos.md"));
  EXPECT_FALSE(fs::exists(dir.path() / "qos_p99_over_target.png"));
  EXPECT_TRUE(fs::exists(dir.path() / "weights.json")) << "another benchmark's";
  EXPECT_TRUE(fs::exists(dir.path() / "logs" / "plot.png"));
  EXPECT_TRUE(remove_previous_results(dir.path(), {"qos.json"}, "").empty()) << "nothing there: nothing said";
}

TEST(QosOutputDir, BytesThatAreNotUtf8DoNotLoseTheReport) {
  // A review: a failed run's log tail (raw bytes) made dump() throw type_error 316, after the
  // std::ofstream had already emptied qos.json.
  const nlohmann::json document = {{"log_tail", std::string("simgpud: \xff\xfe bad bytes\n")}, {"n", 1}};
  std::string text;
  ASSERT_NO_THROW(text = json_text(document));
  EXPECT_NE(text.find("\xef\xbf\xbd"), std::string::npos) << "U+FFFD for each bad byte";
  EXPECT_EQ(nlohmann::json::parse(text)["n"], 1);
  EXPECT_EQ(text.back(), '\n');
}

TEST(QosOutputDir, AFileIsReplacedWholeOrLeftAsItWas) {
  testing::TempDir dir("qos-output-dir-test");
  const fs::path path = dir.write("qos.json", "old");
  write_file_whole(path, "new\n");
  EXPECT_EQ(read(path), "new\n");
  for (const fs::directory_entry& entry : fs::directory_iterator(dir.path()))
    EXPECT_EQ(entry.path().filename(), "qos.json") << "no temp file left";
  EXPECT_THROW(write_file_whole(dir.path() / "missing" / "qos.json", "x"), std::runtime_error);

  // A full disk, as a file size limit makes it (with SIGXFSZ ignored, the write fails with EFBIG):
  // the write must say so and leave the old file, where std::ofstream emptied it and said nothing.
  rlimit kept{};
  ASSERT_EQ(::getrlimit(RLIMIT_FSIZE, &kept), 0);
  const auto old_handler = ::signal(SIGXFSZ, SIG_IGN);
  rlimit small = kept;
  small.rlim_cur = 4096;
  ASSERT_EQ(::setrlimit(RLIMIT_FSIZE, &small), 0);
  bool threw = false;
  try {
    write_file_whole(path, std::string(1 << 20, 'x'));
  } catch (const std::runtime_error& e) {
    threw = true;
    EXPECT_NE(std::string(e.what()).find(path.string()), std::string::npos) << e.what();
  }
  ::setrlimit(RLIMIT_FSIZE, &kept);
  ::signal(SIGXFSZ, old_handler);
  EXPECT_TRUE(threw) << "a failed write passed";
  EXPECT_EQ(read(path), "new\n") << "the old file is kept";
  EXPECT_FALSE(fs::exists(dir.path() / ".qos.json.tmp"));
}

}  // namespace
}  // namespace gpuqos::qos
