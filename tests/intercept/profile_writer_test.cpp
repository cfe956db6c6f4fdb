// The profile file's lines (a contract with `gpuqos train`) and its atomic writing.
#include "profile_writer.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "gpuqos/testing/temp_dir.h"

namespace gpuqos::intercept {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

std::string read_file(const fs::path& path) {
  std::ifstream in(path);
  return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

TEST(ProfileLines, KernelLineHasEveryFieldInTheDocumentedOrder) {
  ipc::OpDescriptor launch{};
  launch.device = 1;
  launch.grid[0] = 564, launch.grid[1] = 2, launch.grid[2] = 1;
  launch.block[0] = 128, launch.block[1] = 1, launch.block[2] = 1;
  launch.shared_bytes = 4096;
  launch.arg_count = 3;
  launch.args[0] = 3136, launch.args[1] = 0, launch.args[2] = 18446744073709551615ull;
  EXPECT_EQ(kernel_line("gq_0_indexSelect", launch, 100, 3236),
            R"({"kind":"kernel","name":"gq_0_indexSelect","device":1,"grid":[564,2,1],"block":[128,1,1],)"
            R"("shared_bytes":4096,"args":[3136,0,18446744073709551615],"start_ns":100,"end_ns":3236})");
  launch.arg_count = 0;
  EXPECT_EQ(json::parse(kernel_line("k", launch, 1, 2)).at("args"), json::array());
}

TEST(ProfileLines, CopyAndMemsetLines) {
  EXPECT_EQ(copy_line(ipc::CopyDirection::h2d, ipc::HostMemory::pinned, 1048576, 5, 43948),
            R"({"kind":"copy","direction":"h2d","host_memory":"pinned","bytes":1048576,"start_ns":5,"end_ns":43948})");
  EXPECT_EQ(copy_line(ipc::CopyDirection::d2h, ipc::HostMemory::pageable, 1, 0, 2000),
            R"({"kind":"copy","direction":"d2h","host_memory":"pageable","bytes":1,"start_ns":0,"end_ns":2000})");
  EXPECT_EQ(copy_line(ipc::CopyDirection::d2d, ipc::HostMemory::none, 8, 1, 2),
            R"({"kind":"copy","direction":"d2d","host_memory":"none","bytes":8,"start_ns":1,"end_ns":2})");
  EXPECT_EQ(memset_line(4096, 10, 2013), R"({"kind":"memset","bytes":4096,"start_ns":10,"end_ns":2013})");
}

TEST(ProfileLines, NamesAreEscapedSoEveryLineIsJson) {
  const std::string name = "void f<\"q\">(a\\b)\n\t\x01 caf\xc3\xa9";
  EXPECT_EQ(json_escaped(name), "void f<\\\"q\\\">(a\\\\b)\\u000a\\u0009\\u0001 caf\xc3\xa9");
  const json line = json::parse(kernel_line(name, ipc::OpDescriptor{}, 1, 2));
  EXPECT_EQ(line.at("name"), name);
}

TEST(ProfileWriter, TheFileAppearsWholeOnlyAtCommit) {
  gpuqos::testing::TempDir dir("profile-writer-test");
  const fs::path path = dir.path() / "p.jsonl";
  ProfileWriter writer;
  std::string why;
  ASSERT_TRUE(writer.open(path.string(), "bert \"serve\"", 42, why)) << why;
  writer.write_line(memset_line(1, 2, 3));
  EXPECT_FALSE(fs::exists(path));  // a reader never sees half a profile
  EXPECT_TRUE(fs::exists(path.string() + ".tmp.42"));
  ASSERT_TRUE(writer.commit(why)) << why;
  EXPECT_FALSE(fs::exists(path.string() + ".tmp.42"));
  EXPECT_EQ(writer.records(), 1u);
  EXPECT_EQ(read_file(path), "{\"format\":\"gpuqos-profile\",\"version\":1,\"job\":\"bert \\\"serve\\\"\",\"pid\":42}\n"
                             "{\"kind\":\"memset\",\"bytes\":1,\"start_ns\":2,\"end_ns\":3}\n");
}

// Every process of a job writes the same GPUQOS_PROFILE (ranks, a shell's commands one after the
// other): each adds its records, none replaces another's. A file there that is not a profile is
// left alone, and the records go beside it.
// In a shared directory another user may plant a link at <path>.tmp.<pid> (the job's own file would
// be written through it), and a killed process of the same pid may have left its records there: the
// writer takes the next free name and writes through neither.
TEST(ProfileWriter, ATakenTemporaryNameIsNeitherWrittenThroughNorOver) {
  gpuqos::testing::TempDir dir("profile-writer-test");
  const fs::path path = dir.path() / "p.jsonl";
  const fs::path victim = dir.path() / "victim.txt";
  std::ofstream(victim) << "precious";
  fs::create_symlink(victim, path.string() + ".tmp.42");
  std::ofstream(path.string() + ".tmp.42-1") << "a killed process's records";
  ProfileWriter writer;
  std::string why;
  ASSERT_TRUE(writer.open(path.string(), "job", 42, why)) << why;
  EXPECT_EQ(writer.temp_path(), path.string() + ".tmp.42-2");
  writer.write_line(memset_line(1, 2, 3));
  ASSERT_TRUE(writer.commit(why)) << why;
  EXPECT_EQ(read_file(victim), "precious");
  EXPECT_EQ(read_file(path.string() + ".tmp.42-1"), "a killed process's records");
  EXPECT_FALSE(fs::exists(path.string() + ".tmp.42-2"));
  EXPECT_EQ(writer.records(), 1u);
  EXPECT_NE(read_file(path).find("\"memset\""), std::string::npos);
}

// The profile itself: a link another user planted at its path is not written through (the records
// go beside it, as beside another tool's file); a link of the job's own user is followed.
TEST(ProfileWriter, APlantedLinkAtTheProfileIsNotFollowedButTheUsersOwnIs) {
  gpuqos::testing::TempDir dir("profile-writer-test");
  const fs::path victim = dir.path() / "victim.txt";
  const fs::path own_target = dir.path() / "real.jsonl";
  const fs::path own = dir.path() / "own.jsonl";
  fs::create_symlink(own_target, own);
  ProfileWriter mine;
  std::string why;
  ASSERT_TRUE(mine.open(own.string(), "job", 43, why)) << why;
  mine.write_line(memset_line(1, 2, 3));
  ASSERT_TRUE(mine.commit(why)) << why;
  EXPECT_NE(read_file(own_target).find("\"memset\""), std::string::npos) << "the user's own link is followed";
  if (::geteuid() != 0) GTEST_SKIP() << "needs root to give a link to another user";
  std::ofstream(victim) << "";  // empty: a profile would be written into it whole
  const fs::path planted = dir.path() / "p.jsonl";
  fs::create_symlink(victim, planted);
  ASSERT_EQ(::lchown(planted.c_str(), 4242, 4242), 0);
  ProfileWriter writer;
  ASSERT_TRUE(writer.open(planted.string(), "job", 42, why)) << why;
  writer.write_line(memset_line(1, 2, 3));
  ASSERT_TRUE(writer.commit(why)) << why;
  EXPECT_EQ(read_file(victim), "");
  EXPECT_EQ(writer.written_to(), planted.string() + ".42");
  EXPECT_NE(read_file(planted.string() + ".42").find("\"memset\""), std::string::npos);
}

TEST(ProfileWriter, EachProcessAddsItsRecordsToTheProfile) {
  gpuqos::testing::TempDir dir("profile-writer-test");
  const fs::path path = dir.path() / "p.jsonl";
  const auto commit_one = [&](int pid, std::uint64_t bytes) {
    ProfileWriter writer;
    std::string why;
    EXPECT_TRUE(writer.open(path.string(), "job", pid, why)) << why;
    writer.write_line(memset_line(bytes, 2, 3));
    EXPECT_TRUE(writer.commit(why)) << why;
    EXPECT_EQ(writer.written_to(), path.string());
    return writer.added();
  };
  EXPECT_FALSE(commit_one(1, 10)) << "the first writes the file";
  EXPECT_TRUE(commit_one(2, 20)) << "the second adds to it";
  EXPECT_EQ(read_file(path), "{\"format\":\"gpuqos-profile\",\"version\":1,\"job\":\"job\",\"pid\":1}\n"
                             "{\"kind\":\"memset\",\"bytes\":10,\"start_ns\":2,\"end_ns\":3}\n"
                             "{\"kind\":\"memset\",\"bytes\":20,\"start_ns\":2,\"end_ns\":3}\n");

  const fs::path other = dir.path() / "notes.txt";
  std::ofstream(other) << "someone else's file\n";
  ProfileWriter writer;
  std::string why;
  ASSERT_TRUE(writer.open(other.string(), "job", 7, why)) << why;
  writer.write_line(memset_line(1, 2, 3));
  ASSERT_TRUE(writer.commit(why)) << why;
  EXPECT_EQ(writer.written_to(), other.string() + ".7");
  EXPECT_EQ(read_file(other), "someone else's file\n");
  EXPECT_NE(read_file(other.string() + ".7").find("\"bytes\":1,"), std::string::npos);
}

// A profiled process stopped while it holds the profile's lock (SIGSTOP, a debugger) must not hang
// another's exit: once the file has not grown for the wait, the records go beside it, and the
// file is left to its holder. While it grows (another process adding its records) the wait goes on.
TEST(ProfileWriter, AProfileLockedTooLongGetsTheRecordsBesideIt) {
  gpuqos::testing::TempDir dir("profile-writer-test");
  const fs::path path = dir.path() / "p.jsonl";
  std::ofstream(path) << "{\"format\":\"gpuqos-profile\",\"version\":1,\"job\":\"job\",\"pid\":1}\n";
  const int holder = ::open(path.c_str(), O_WRONLY | O_APPEND | O_CLOEXEC);  // another open file: flock conflicts
  ASSERT_GE(holder, 0);
  ASSERT_EQ(::flock(holder, LOCK_EX), 0);
  ProfileWriter writer;
  writer.set_lock_wait(std::chrono::milliseconds(200));
  std::string why;
  ASSERT_TRUE(writer.open(path.string(), "job", 9, why)) << why;
  writer.write_line(memset_line(5, 2, 3));
  // The holder adds a line every 100 ms for 600 ms, then stops, still holding the lock.
  std::thread adding([holder] {
    for (int i = 0; i < 6; ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
      (void)!::write(holder, "{}\n", 3);
    }
  });
  const auto started = std::chrono::steady_clock::now();
  const bool committed = writer.commit(why);
  const auto waited = std::chrono::steady_clock::now() - started;
  adding.join();
  ::close(holder);
  ASSERT_TRUE(committed) << why;
  EXPECT_GE(waited, std::chrono::milliseconds(600)) << "waited while the file grew";
  EXPECT_LT(waited, std::chrono::seconds(5));
  EXPECT_EQ(writer.written_to(), path.string() + ".9");
  EXPECT_TRUE(writer.lock_timed_out());
  EXPECT_NE(read_file(path.string() + ".9").find("\"bytes\":5,"), std::string::npos);
  EXPECT_EQ(read_file(path).find("\"bytes\":5,"), std::string::npos) << "the locked file is left alone";
  EXPECT_EQ(ProfileWriter::kLockWait, std::chrono::seconds(30));
}

TEST(ProfileWriter, DiscardLeavesNothingAndABadDirectoryIsExplained) {
  gpuqos::testing::TempDir dir("profile-writer-test");
  ProfileWriter writer;
  std::string why;
  ASSERT_TRUE(writer.open((dir.path() / "p.jsonl").string(), "job", 7, why));
  writer.discard();
  EXPECT_TRUE(fs::is_empty(dir.path()));
  ProfileWriter nowhere;
  EXPECT_FALSE(nowhere.open((dir.path() / "missing" / "p.jsonl").string(), "job", 7, why));
  EXPECT_NE(why.find("No such file or directory"), std::string::npos) << why;
  EXPECT_FALSE(nowhere.commit(why));
  ProfileWriter onto_a_directory;  // its rename at exit would fail, after a whole profiled run
  EXPECT_FALSE(onto_a_directory.open(dir.path().string(), "job", 7, why));
  EXPECT_EQ(why, dir.path().string() + " is a directory, not a file to write");
  EXPECT_TRUE(fs::is_empty(dir.path()));
}

// A FIFO nobody reads at the profile's path hung the process at exit, writing the records into it
// (an audit). Refused at open; one made there during the run gets the records beside it.
TEST(ProfileWriter, AFifoAtThePathNeverBlocksTheProcess) {
  gpuqos::testing::TempDir dir("profile-writer-test");
  const fs::path path = dir.path() / "p.jsonl";
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  ProfileWriter refused;
  std::string why;
  EXPECT_FALSE(refused.open(path.string(), "job", 7, why));
  EXPECT_EQ(why, path.string() + " is not a regular file (a FIFO or a device): a profile is a file `gpuqos train` reads");
  fs::remove(path);
  ProfileWriter writer;
  ASSERT_TRUE(writer.open(path.string(), "job", 7, why)) << why;
  for (int i = 0; i < 2000; ++i) writer.write_line(memset_line(5, 2, 3));  // more than a pipe holds
  ASSERT_EQ(::mkfifo(path.c_str(), 0600), 0);
  ASSERT_TRUE(writer.commit(why)) << why;
  EXPECT_EQ(writer.written_to(), path.string() + ".7");
  EXPECT_NE(read_file(path.string() + ".7").find("\"bytes\":5,"), std::string::npos);
  EXPECT_TRUE(fs::is_fifo(path));
}

}  // namespace
}  // namespace gpuqos::intercept
