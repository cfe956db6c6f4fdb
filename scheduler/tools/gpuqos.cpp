// gpuqos: the command-line tool. `gpuqos status` asks the daemon (`gpuqos top`: live); `gpuqos run`
// starts a managed job; `gpuqos train` / `gpuqos eval` build and check the duration predictor's profile.
#include <sys/un.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <string_view>

#include "cli_checks.h"
#include "version_text.h"
#include "gpuqos/intercept/settings.h"
#include "gpuqos/predictor/commands.h"
#include "gpuqos/scheduler/run_command.h"
#include "gpuqos/scheduler/status.h"
#include "gpuqos/scheduler/top_command.h"
#include "gpuqos/scheduler/unix_socket.h"

namespace {

constexpr int kUsageError = 2;

// 0 once stdout took everything; else 1, said (a script writing to a full disk must not get an
// empty file and a success).
int written(const char* command) {
  if (std::cout.flush()) return 0;
  std::cerr << command << ": cannot write its output (a closed pipe, or a full disk?)\n";
  return 1;
}

int show_status(const std::string& socket, bool json) {
  auto text = gpuqos::scheduler::request_status(socket);
  if (!text) {
    std::cerr << "gpuqos status: " << gpuqos::scheduler::status_error_text(text.error(), socket) << "\n";
    return 1;
  }
  // Checked with --json too: a script reading it must not get garbage and a success (a review).
  auto parsed = nlohmann::json::parse(text.value(), nullptr, false);
  if (parsed.is_discarded() || !parsed.is_object()) {
    std::cerr << "gpuqos status: the daemon's answer is not " << (parsed.is_discarded() ? "JSON" : "a JSON object")
              << "\n";
    return 1;
  }
  if (json) {
    std::cout << text.value() << "\n";  // as the daemon wrote it
    return written("gpuqos status");
  }
  try {
    std::cout << gpuqos::scheduler::render_status_table(parsed);
  } catch (const nlohmann::json::exception& e) {
    std::cerr << "gpuqos status: unexpected answer from gpuqosd: " << e.what() << "\n";
    return 1;
  }
  return written("gpuqos status");
}

// An input that must exist; a missing profile whose processes were all killed (so that only their
// `<profile>.tmp.<pid>` files are there) is told where its records are.
const CLI::Validator kMeasurementFile(
    [](std::string& path) {
      std::string error = CLI::ExistingFile(path);
      if (error.empty()) return error;
      const std::vector<std::string> left = gpuqos::predictor::unfinished_profiles(path);
      if (!left.empty()) {
        error += " (but " + left.front() +
                 (left.size() > 1 ? " and " + std::to_string(left.size() - 1) + " more beside it hold" : " beside it holds") +
                 " the records of its job's processes that were killed: give them)";
      }
      return error;
    },
    "FILE");

// `gpuqos train` and `gpuqos eval`: the duration predictor's tools (predictor/README.md).
std::pair<CLI::App*, CLI::App*> add_predictor_commands(CLI::App& app, gpuqos::predictor::TrainOptions& train,
                                                       gpuqos::predictor::EvalOptions& eval) {
  auto* t = app.add_subcommand("train", "Learn a predictor profile from measurements (gpuqos profiles, Kineto traces, CSV)");
  t->add_option("--from", train.inputs, "Measurement files")->required()->check(kMeasurementFile);
  t->add_option("--out", train.out, "The profile file to write")->required();
  t->add_option("--csv-args", train.csv_args, "CSV columns that are the kernels' scalar args, in order (e.g. B,M,N,K)")->delimiter(',');
  // A GPU's SM count: H100 132, B200 148; far more is a typo (it would scale every wave count).
  t->add_option("--sms", train.sms, "SMs of the measured GPU")->check(CLI::Range(1, 4096))->capture_default_str();
  auto* e = app.add_subcommand("eval", "Prediction errors on held-out measurements");
  e->add_option("--train", eval.train, "Measurement files to train on")->required()->check(kMeasurementFile);
  e->add_option("--test", eval.test, "Measurement files to test on")->check(kMeasurementFile);
  e->add_option("--cv", eval.cv_folds, "K-fold cross-validation over the --train files instead of --test");
  e->add_option("--split-by-work,--extrapolate", eval.split_by_work,
                "Train on this fraction of the --train rows with the least work (B*M*N*K; copies: bytes), test on the rest");
  e->add_option("--csv-args", eval.csv_args, "CSV columns that are the kernels' scalar args, in order")->delimiter(',');
  e->add_option("--sms", eval.sms, "SMs of the measured GPU")->check(CLI::Range(1, 4096))->capture_default_str();
  e->add_option("--min-copy-bytes", eval.min_copy_bytes, "Score only copies and memsets at least this large");
  e->add_flag("--json", eval.json, "One JSON object: kernels, copies (median_ape, mape, p90_ape, count), per kernel");
  e->add_flag("!--summary", eval.per_kernel, "Text output: totals only, no line per kernel");
  return {t, e};
}

// What the shim would refuse or change of the options `run` hands it (a warning from each process,
// and a job renamed or run unmanaged): said once, here, before anything starts.
std::string run_option_problem(const gpuqos::scheduler::RunOptions& options) {
  if (options.job && !gpuqos::intercept::is_valid_job_name(*options.job)) {
    return "--job '" + *options.job + "': must be 1 to 63 characters of A-Z a-z 0-9 . _ -";
  }
  // (The priority: --priority's is checked by the parser, an inherited one by
  // lower_a_bad_inherited_priority.)
  const auto parsed = gpuqos::intercept::parse_settings(
      [&](const char* variable) -> const char* {
        if (std::string_view(variable) == "GPUQOS_JOB") return options.job ? options.job->c_str() : nullptr;
        if (std::string_view(variable) == "GPUQOS_SOCKET") return options.socket ? options.socket->c_str() : nullptr;
        return nullptr;
      },
      "gpuqos");
  for (const std::string& problem : parsed.problems) {
    if (problem.starts_with("GPUQOS_SOCKET=")) return "--socket " + *options.socket + ": must be at most 107 bytes";
  }
  return {};
}

// An inherited GPUQOS_PRIORITY the shim would refuse (`HIGH`, `urgent`): the job still runs, as the
// shim would run it, at low priority, said once here rather than by every process it starts. (It
// was refused with exit 2, and a service wrapper that inherited it did not start at all.)
void lower_a_bad_inherited_priority(gpuqos::scheduler::RunOptions& options) {
  if (options.priority) return;  // the parser checked it
  const char* inherited = std::getenv("GPUQOS_PRIORITY");
  if (inherited == nullptr || *inherited == '\0') return;
  const auto parsed = gpuqos::intercept::parse_settings(
      [&](const char* variable) -> const char* {
        return std::string_view(variable) == "GPUQOS_PRIORITY" ? inherited : nullptr;
      },
      "gpuqos");
  const bool refused = std::any_of(parsed.problems.begin(), parsed.problems.end(),
                                   [](const std::string& problem) { return problem.starts_with("GPUQOS_PRIORITY="); });
  if (!refused) return;
  std::cerr << "gpuqos run: warning: GPUQOS_PRIORITY='" << inherited
            << "' in the environment is neither high nor low: the job runs at low priority (give --priority high "
               "or low)\n";
  options.priority = "low";
}

std::optional<std::filesystem::path> find_shim() {
  std::error_code error;
  const auto self = std::filesystem::read_symlink("/proc/self/exe", error);
  if (error) {
    std::cerr << "gpuqos run: warning: cannot find this executable (/proc/self/exe: " << error.message()
              << "), nor the shim next to it; the job runs unmanaged\n";
    return std::nullopt;
  }
  auto shim = gpuqos::scheduler::shim_next_to(self);
  if (!std::filesystem::exists(shim, error)) {
    std::cerr << "gpuqos run: warning: " << shim.string() << " not found; the job runs unmanaged\n";
    return std::nullopt;
  }
  return shim;
}

// What CLI11 says too vaguely, said plainly: a command that is not one (it says a subcommand is
// required; a command missing a required option of its own gets CLI11's message, which names it),
// a run command not behind "--" (it says an argument was not expected), an option given twice (it
// says "At Most 1 required"). "" otherwise.
// `reversed_args` is what the parser got (reversed).
std::string usage_problem(const CLI::App& app, const CLI::ParseError& error, const std::vector<std::string>& reversed_args,
                          const CLI::App& run) {
  if (run.parsed() && dynamic_cast<const CLI::ExtrasError*>(&error) != nullptr) {
    // An option run does not have (a typo of --priority) is named, not taken for the command; a
    // command without "--" before it (`run ls -l`) is said as such, its own options included.
    const std::vector<std::string> extras = run.remaining();
    if (!extras.empty() && extras.front().size() > 1 && extras.front().starts_with('-')) {
      return "gpuqos run: unknown option '" + extras.front().substr(0, extras.front().find('=')) +
             "' (run's options: --priority, --job, --socket; the command goes after --)";
    }
    return "gpuqos run: the command goes after --: gpuqos run [options] -- CMD ARGS...";
  }
  // An option given twice (`--job a --job b`): CLI11 says "--job: At Most 1 required but received 2".
  if (dynamic_cast<const CLI::ArgumentMismatch*>(&error) != nullptr) {
    const std::string what = error.what();
    const auto colon = what.find(": At Most 1 required");
    if (colon == std::string::npos || !what.starts_with("--")) return "";
    std::string program = "gpuqos";
    for (const CLI::App* command : app.get_subcommands({})) {
      if (command->parsed()) program += " " + command->get_name();
    }
    return program + ": " + what.substr(0, colon) + " is given more than once: give it once";
  }
  if (dynamic_cast<const CLI::RequiredError*>(&error) == nullptr) return "";
  std::string known;
  for (const CLI::App* command : app.get_subcommands({})) known += (known.empty() ? "" : ", ") + command->get_name();
  if (reversed_args.empty()) return "gpuqos: a command is required (commands: " + known + ")";
  const std::string& first = reversed_args.back();
  if (first.starts_with('-')) return "";
  // A command that is one, missing an option of its own: CLI11's message names the option.
  for (const CLI::App* command : app.get_subcommands({})) {
    if (command->check_name(first)) return "";
  }
  return "gpuqos: unknown command '" + first + "' (commands: " + known + ")";
}

// `gpuqos run --help`'s usage line ends with the command, which main() takes from after "--"
// before CLI11 parses (CLI11 2.1 has no usage text of its own to set).
class RunUsage : public CLI::Formatter {
 public:
  std::string make_usage(const CLI::App* app, std::string name) const override {
    std::string usage = CLI::Formatter::make_usage(app, std::move(name));
    if (!usage.empty() && usage.back() == '\n') usage.pop_back();
    return usage + " -- CMD [ARGS...]\n";
  }
};

}  // namespace

int main(int argc, char** argv) {
  // Everything after the first "--" is the command of `gpuqos run`, untouched by the parser.
  std::vector<std::string> args(argv + 1, argv + argc);
  std::vector<std::string> command;
  if (auto dashes = std::find(args.begin(), args.end(), "--"); dashes != args.end()) {
    command.assign(dashes + 1, args.end());
    args.erase(dashes, args.end());
  }
  std::reverse(args.begin(), args.end());  // CLI11 takes a reversed vector

  CLI::App app{"gpuqos: control the gpuqos GPU QoS daemon", "gpuqos"};
  app.set_version_flag("--version", gpuqos::tools::version_text("gpuqos"));
  app.require_subcommand(1);
  std::string socket = gpuqos::scheduler::kDefaultSocketPath;
  bool json = false;
  auto* status = app.add_subcommand("status", "Show the daemon, its policy and its clients");
  status->add_flag("--json", json, "Print the daemon's JSON answer");
  status->add_option("--socket", socket, "The daemon's socket")->envname("GPUQOS_SOCKET")->capture_default_str();
  gpuqos::scheduler::TopOptions top_options;
  auto* top = app.add_subcommand("top", "Show the jobs (latency against target, best-effort progress) live");
  top->add_option("--interval", top_options.interval_s, "Seconds between refreshes")
      ->check(gpuqos::tools::finite_in(0.001, 86400))
      ->capture_default_str();
  top->add_flag("--once", top_options.once, "Print one frame and exit");
  top->add_option("--socket", top_options.socket, "The daemon's socket")->envname("GPUQOS_SOCKET")->capture_default_str();

  gpuqos::scheduler::RunOptions run_options;
  std::string run_socket;
  std::string job;
  auto* run = app.add_subcommand("run", "Run a command as a gpuqos-managed job: gpuqos run [options] -- CMD ARGS...");
  std::string priority;
  run->add_option("--priority", priority, "high or low (default: GPUQOS_PRIORITY's, else low)")
      ->check(CLI::IsMember({"high", "low"}));
  run->add_option("--job", job, "Job name (default: the executable's name)");
  run->add_option("--socket", run_socket, "The daemon's socket (default: the shim's)");
  run->formatter(std::make_shared<RunUsage>());
  gpuqos::predictor::TrainOptions train_options;
  gpuqos::predictor::EvalOptions eval_options;
  const auto [train, eval] = add_predictor_commands(app, train_options, eval_options);
  const std::vector<std::string> given = args;  // parse() consumes it
  try {
    app.parse(args);
    if (run->parsed() && command.empty()) {
      std::cerr << "gpuqos run: no command: gpuqos run [options] -- CMD ARGS...\n";
      return kUsageError;
    }
    if ((status->parsed() || top->parsed() || train->parsed() || eval->parsed()) && !command.empty()) {
      throw CLI::ExtrasError({"--"});
    }
  } catch (const CLI::ParseError& e) {
    if (const std::string why = usage_problem(app, e, given, *run); !why.empty()) {
      std::cerr << why << "\nRun gpuqos --help for more information.\n";
      return kUsageError;
    }
    const int code = app.exit(e);
    return code == 0 ? 0 : kUsageError;
  }
  if (status->parsed()) return show_status(socket, json);
  if (top->parsed()) return gpuqos::scheduler::run_top(top_options, STDOUT_FILENO, std::cerr, ::isatty(STDOUT_FILENO) == 1);
  if (train->parsed()) return gpuqos::predictor::run_train(train_options, std::cout, std::cerr);
  if (eval->parsed()) return gpuqos::predictor::run_eval(eval_options, std::cout, std::cerr);
  if (run->count("--priority") > 0) run_options.priority = priority;
  if (run->count("--job") > 0) run_options.job = job;  // given empty: refused below, not the default
  if (run->count("--socket") > 0 && run_socket.empty()) {
    std::cerr << "gpuqos run: --socket '': must name a socket (leave it out for the shim's default)\n";
    return kUsageError;
  }
  // Made absolute here: the job may start in another directory than this command (cd in a shell -c).
  // A relative path in a directory that was removed has no absolute form (it aborted gpuqos run).
  if (!run_socket.empty()) {
    std::error_code error;
    const std::filesystem::path full = std::filesystem::absolute(run_socket, error);
    if (error) {
      std::cerr << "gpuqos run: --socket " << run_socket << ": cannot make it absolute (" << error.message()
                << "); give an absolute path\n";
      return kUsageError;
    }
    run_options.socket = full.lexically_normal().string();
  }
  // So is one the job inherits, when the absolute path still fits a socket's (never refused: it is
  // the shim's to take or say why not, as without gpuqos run).
  if (const char* inherited = ::getenv("GPUQOS_SOCKET");
      run_socket.empty() && inherited != nullptr && *inherited != '\0' && *inherited != '/') {
    std::error_code error;
    const std::string full = std::filesystem::absolute(inherited, error).lexically_normal().string();
    if (!error && full.size() < sizeof(sockaddr_un::sun_path)) run_options.socket = full;
  }
  if (const std::string problem = run_option_problem(run_options); !problem.empty()) {
    std::cerr << "gpuqos run: " << problem << "\n";
    return kUsageError;
  }
  lower_a_bad_inherited_priority(run_options);
  run_options.command = std::move(command);
  return gpuqos::scheduler::exec_managed(run_options, find_shim());
}
