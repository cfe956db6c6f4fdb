// GPUQOS_* environment parsing: defaults, good values, and one clear message per bad value.
#include "gpuqos/intercept/settings.h"

#include <gtest/gtest.h>

#include <map>
#include <string>

namespace gpuqos::intercept {
namespace {

constexpr const char* kSocketAllowed = "a path, absolute or from the working directory, of at most 107 bytes";

ParsedSettings parse(const std::map<std::string, std::string>& env, std::string_view default_job = "trainer",
                     std::string_view working_directory = {}) {
  return parse_settings(
      [&](const char* name) {
        const auto it = env.find(name);
        return it == env.end() ? nullptr : it->second.c_str();
      },
      default_job, working_directory);
}

TEST(Settings, DefaultsAreLowPriorityAndTheExecutableName) {
  const ParsedSettings p = parse({});
  EXPECT_TRUE(p.problems.empty());
  EXPECT_EQ(p.settings.priority, Priority::low);
  EXPECT_EQ(p.settings.job, "trainer");
  EXPECT_EQ(p.settings.socket_path, kDefaultSocketPath);
  EXPECT_EQ(p.settings.log_level, LogLevel::warn);
  EXPECT_EQ(p.settings.debug_counts_path, "");
  EXPECT_EQ(p.settings.profile_path, "");  // no profiling
  EXPECT_EQ(p.settings.cupti_library, "");
}

TEST(Settings, ProfilePathAndCuptiLibraryAreTakenAsGivenAndDoNotChangeThePriority) {
  const ParsedSettings p = parse({{"GPUQOS_PRIORITY", "high"},
                                  {"GPUQOS_PROFILE", "runs/bert profile.jsonl"},
                                  {"GPUQOS_CUPTI_LIBRARY", "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so"}});
  EXPECT_TRUE(p.problems.empty());
  EXPECT_EQ(p.settings.profile_path, "runs/bert profile.jsonl");
  EXPECT_EQ(p.settings.cupti_library, "/usr/local/cuda/extras/CUPTI/lib64/libcupti.so");
  EXPECT_EQ(p.settings.priority, Priority::high);
}

TEST(Settings, EmptyMeansUnsetButAnEmptyJobNameIsSaid) {
  const ParsedSettings p = parse({{"GPUQOS_PRIORITY", ""}, {"GPUQOS_JOB", ""}, {"GPUQOS_SOCKET", ""}, {"GPUQOS_LOG", ""},
                                  {"GPUQOS_PROFILE", ""}});
  EXPECT_TRUE(p.problems.empty());
  EXPECT_EQ(p.settings.job, "trainer");
  EXPECT_EQ(p.settings.profile_path, "");
  // But an empty job name is said (GPUQOS_JOB=$NAME with NAME unset; `gpuqos run --job ''` refuses it).
  ASSERT_EQ(p.notes.size(), 1u);
  EXPECT_EQ(p.notes[0], "GPUQOS_JOB is set but empty: the job is named \"trainer\" after its executable");
}

TEST(Settings, GoodValuesAreTaken) {
  const ParsedSettings p = parse({{"GPUQOS_PRIORITY", "high"},
                                  {"GPUQOS_JOB", "resnet-serve_v1.2"},
                                  {"GPUQOS_SOCKET", "/tmp/x/gpuqosd.sock"},
                                  {"GPUQOS_LOG", "debug"},
                                  {"GPUQOS_DEBUG_COUNTS", "/tmp/counts"}});
  EXPECT_TRUE(p.problems.empty());
  EXPECT_EQ(p.settings.priority, Priority::high);
  EXPECT_EQ(p.settings.job, "resnet-serve_v1.2");
  EXPECT_EQ(p.settings.socket_path, "/tmp/x/gpuqosd.sock");
  EXPECT_EQ(p.settings.log_level, LogLevel::debug);
  EXPECT_EQ(p.settings.debug_counts_path, "/tmp/counts");
}

struct BadValue {
  const char* variable;
  std::string value;
  const char* allowed;
  const char* consequence = "this job runs as low priority";
};

constexpr const char* kUnmanaged = "this job runs unmanaged (no gpuqosd is asked)";

class SettingsBadValue : public ::testing::TestWithParam<BadValue> {};

// One message, naming the variable, the value and the allowed values; the job runs as low priority
// even when it asked for high. A bad socket: no daemon at all, not the default socket's, which may
// be another daemon than the one meant.
TEST_P(SettingsBadValue, GivesOneMessageAndRunsAsLow) {
  const BadValue& bad = GetParam();
  std::map<std::string, std::string> env = {{bad.variable, bad.value}};
  if (std::string(bad.variable) != "GPUQOS_PRIORITY") env["GPUQOS_PRIORITY"] = "high";
  const ParsedSettings p = parse(env);
  ASSERT_EQ(p.problems.size(), 1u);
  const std::string& message = p.problems[0];
  EXPECT_EQ(message, std::string(bad.variable) + "=\"" + bad.value + "\" is not valid (allowed: " + bad.allowed +
                         "); " + bad.consequence);
  EXPECT_EQ(p.settings.priority, Priority::low);
  EXPECT_EQ(p.settings.socket_path, std::string(bad.variable) == "GPUQOS_SOCKET" ? "" : kDefaultSocketPath);
}

INSTANTIATE_TEST_SUITE_P(
    EachVariable, SettingsBadValue,
    ::testing::Values(BadValue{"GPUQOS_PRIORITY", "urgent", "high, low"},
                      BadValue{"GPUQOS_PRIORITY", "HIGH", "high, low"},
                      BadValue{"GPUQOS_SOCKET", "relative/gpuqosd.sock", kSocketAllowed, kUnmanaged},  // no working directory known
                      BadValue{"GPUQOS_SOCKET", "/" + std::string(107, 's'), kSocketAllowed, kUnmanaged}));

// A relative socket is the one gpuqosd made from the same directory (its --socket is relative to
// its own): taken from the job's working directory, as `gpuqos run --socket` takes it. A typo is
// then a connect error at that path, and the job keeps its priority.
TEST(Settings, ARelativeSocketIsTakenFromTheWorkingDirectory) {
  const ParsedSettings p = parse({{"GPUQOS_PRIORITY", "high"}, {"GPUQOS_SOCKET", "run/gq.sock"}}, "trainer", "/home/u");
  EXPECT_TRUE(p.problems.empty());
  EXPECT_EQ(p.settings.socket_path, "/home/u/run/gq.sock");
  EXPECT_EQ(p.settings.priority, Priority::high);
  EXPECT_EQ(parse({{"GPUQOS_SOCKET", "gq.sock"}}, "trainer", "/").settings.socket_path, "/gq.sock");
  // Too long once resolved: a bad value, as an absolute one would be.
  const ParsedSettings long_one = parse({{"GPUQOS_SOCKET", std::string(100, 's')}}, "trainer", "/home/u");
  ASSERT_EQ(long_one.problems.size(), 1u);
  EXPECT_NE(long_one.problems[0].find(std::string(kSocketAllowed) + "; from /home/u it is 108)"), std::string::npos)
      << long_one.problems[0];
  EXPECT_EQ(long_one.settings.socket_path, "");
}

// How much the shim says never changes how the job is scheduled: a bad level is noted, the default
// kept, and a high-priority job stays high.
TEST(Settings, ABadLogLevelIsNotedAndDoesNotDemoteTheJob) {
  const ParsedSettings p = parse({{"GPUQOS_PRIORITY", "high"}, {"GPUQOS_LOG", "verbose"}});
  EXPECT_TRUE(p.problems.empty());
  ASSERT_EQ(p.notes.size(), 1u);
  EXPECT_EQ(p.notes[0],
            "GPUQOS_LOG=\"verbose\" is not valid (allowed: off, error, warn, info, debug (or trace, warning, critical)); "
            "logging at warn");
  EXPECT_EQ(p.settings.priority, Priority::high);
  EXPECT_EQ(p.settings.log_level, LogLevel::warn);
}

TEST(Settings, SpdlogsLevelNamesAreTaken) {
  const std::map<std::string, LogLevel> names = {{"trace", LogLevel::debug},   {"warning", LogLevel::warn},
                                                 {"critical", LogLevel::error}, {"err", LogLevel::error},
                                                 {"off", LogLevel::off},       {"info", LogLevel::info}};
  for (const auto& [name, level] : names) {
    const ParsedSettings p = parse({{"GPUQOS_PRIORITY", "high"}, {"GPUQOS_LOG", name}});
    EXPECT_TRUE(p.problems.empty() && p.notes.empty()) << name;
    EXPECT_EQ(p.settings.log_level, level) << name;
    EXPECT_EQ(p.settings.priority, Priority::high) << name;
  }
}

TEST(Settings, BadValuesKeepTheirDefaults) {
  const ParsedSettings p = parse({{"GPUQOS_PRIORITY", "urgent"}, {"GPUQOS_SOCKET", "x"}, {"GPUQOS_LOG", "loud"}});
  EXPECT_EQ(p.problems.size(), 2u);
  EXPECT_EQ(p.notes.size(), 1u);
  EXPECT_EQ(p.settings.priority, Priority::low);
  EXPECT_EQ(p.settings.socket_path, "");  // no daemon: the default socket may be another's
  EXPECT_EQ(p.settings.log_level, LogLevel::warn);
}

// A name that is not one is made one, as the executable's is, and said; the job keeps its priority
// claim (gpuqosd's [access] decides it): a typo in the name must not make an inference job run
// best-effort where gpuqosd never sees it claim high.
TEST(Settings, AnInvalidJobNameIsMadeOneAndKeepsThePriorityClaim) {
  const ParsedSettings p = parse({{"GPUQOS_PRIORITY", "high"}, {"GPUQOS_JOB", "bert infer/v2"}});
  EXPECT_TRUE(p.problems.empty());
  EXPECT_EQ(p.settings.priority, Priority::high);
  EXPECT_EQ(p.settings.job, "bert_infer_v2");
  ASSERT_EQ(p.notes.size(), 1u);
  EXPECT_EQ(p.notes[0], "GPUQOS_JOB=\"bert infer/v2\" is not valid (allowed: 1 to 63 characters of A-Z a-z 0-9 . _ -); "
                        "this job is named \"bert_infer_v2\" instead");
  const ParsedSettings long_name = parse({{"GPUQOS_PRIORITY", "high"}, {"GPUQOS_JOB", std::string(64, 'j')}});
  EXPECT_EQ(long_name.settings.job, std::string(63, 'j'));
  EXPECT_EQ(long_name.settings.priority, Priority::high);
  EXPECT_EQ(long_name.notes.size(), 1u);
  EXPECT_TRUE(is_valid_job_name(parse({{"GPUQOS_JOB", "\x01\xff"}}).settings.job));
  // A user test: GPUQOS_JOB=$'a\nb' split the warning over two lines of the job's stderr.
  const ParsedSettings split = parse({{"GPUQOS_JOB", "a\nb\"\\\x1b"}});
  ASSERT_EQ(split.notes.size(), 1u);
  EXPECT_EQ(split.notes[0].find('\n'), std::string::npos) << split.notes[0];
  EXPECT_EQ(split.notes[0].rfind("GPUQOS_JOB=\"a\\x0Ab\\\"\\\\\\x1B\" is not valid", 0), 0u) << split.notes[0];
}

TEST(Settings, TheDefaultJobIsMadeAValidName) {
  EXPECT_EQ(parse({}, "python3 serve.py").settings.job, "python3_serve.py");
  // Said when it had to change (a [[job]] entry must use the name made), and only then.
  const ParsedSettings odd = parse({}, "t weird+name(1)");
  ASSERT_EQ(odd.notes.size(), 1u);
  EXPECT_EQ(odd.notes[0], "no GPUQOS_JOB: the job is named \"t_weird_name_1_\" after its executable \"t weird+name(1)\" "
                          "(other characters than A-Z a-z 0-9 . _ - become _, at most 63)");
  EXPECT_TRUE(odd.problems.empty());
  EXPECT_TRUE(parse({}, "python3").notes.empty());
  EXPECT_TRUE(parse({{"GPUQOS_JOB", "serve"}}, "t weird+name(1)").notes.empty());
  EXPECT_EQ(parse({}, "").settings.job, "unknown");
  EXPECT_EQ(parse({}, std::string(100, 'x')).settings.job.size(), kMaxJobNameBytes);
  EXPECT_TRUE(is_valid_job_name(parse({}, "a b/c").settings.job));
}

// The longest name the shim takes is the longest registration carries (63 bytes and a NUL): a 64th
// byte, cut on the wire, would have matched no [[job]] and bypassed its allowed_priority.
TEST(Settings, TheLongestJobNameFitsRegistration) {
  EXPECT_TRUE(is_valid_job_name(std::string(63, 'j')));
  EXPECT_FALSE(is_valid_job_name(std::string(64, 'j')));
  EXPECT_EQ(parse({{"GPUQOS_JOB", std::string(63, 'j')}}).settings.job, std::string(63, 'j'));
}

}  // namespace
}  // namespace gpuqos::intercept
