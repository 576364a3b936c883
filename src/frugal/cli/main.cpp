// The `frugal` binary: parses the command line and runs one subcommand. A usage error (an unknown
// command or option, a missing or malformed argument) is one line naming it and the --help to
// read, exit code 2. Errors from the library
// (frugal::Error) are printed as one line and give exit code 1; so does output that could not be
// written (io/stdout.h): SIGPIPE is ignored, a closed pipe is the write error EPIPE; and so do the
// standard library's file-system and out-of-memory errors, which the library reports itself
// where it can. Under mpirun an error on one rank ends the whole job (the others would wait for
// it), its line prefixed with the rank.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <csignal>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <new>
#include <string>
#include <string_view>
#include <vector>

#include "frugal/cli/commands.h"
#include "frugal/core/error.h"
#include "frugal/core/threading.h"
#include "frugal/io/stdout.h"
#include "frugal/parallel/world.h"

namespace {
// "rank R: " before an error of one rank of a multi-process run (it ends every rank).
std::string rank_prefix(frugal::parallel::World& world) {
  return world.parallel() ? fmt::format("rank {}: ", world.group().rank()) : "";
}

constexpr int kUsageErrorExitCode = 2;  // as getopt-style tools exit on a bad command line

// Every command's name: "train, config, ...".
std::string command_names(const CLI::App& app) {
  std::vector<std::string> names;
  for (const CLI::App* sub : app.get_subcommands([](const CLI::App*) { return true; }))
    names.push_back(sub->get_name());
  return fmt::format("{}", fmt::join(names, ", "));
}

// A usage error: "error: MESSAGE; see `frugal [COMMAND] --help`" on stderr (one line), exit code 2.
int usage_error(const CLI::App& app, std::string message) {
  std::string help = "frugal";
  if (const std::vector<CLI::App*> parsed = app.get_subcommands(); !parsed.empty())
    help += " " + parsed.back()->get_name();
  for (char& c : message)
    if (c == '\n') c = ' ';
  fmt::print(stderr, "error: {}; see `{} --help`\n", message, help);
  return kUsageErrorExitCode;
}

// Parses the command line and runs the command it names. --help and --version print to stdout
// and return 0; a usage error returns 2.
int parse_and_run(CLI::App& app, int argc, char** argv) {
  try {
    app.parse(argc, argv);
    return 0;
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == static_cast<int>(CLI::ExitCodes::Success)) return app.exit(e);  // --help, --version
    if (!app.get_subcommands().empty()) return usage_error(app, e.what());
    // No command was recognised: name the word that is not one (CLI11 says "A subcommand is required").
    const std::vector<std::string> rest = app.remaining();
    if (rest.empty()) return usage_error(app, fmt::format("no command given; the commands are {}", command_names(app)));
    return usage_error(app, fmt::format("unknown {} '{}'; the commands are {}",
                                        rest.front().starts_with('-') ? "option" : "command", rest.front(),
                                        command_names(app)));
  }
}
}  // namespace

int main(int argc, char** argv) {
  frugal::reexec_with_default_omp_wait_policy(argv);
  frugal::parallel::World& world = frugal::parallel::World::join(&argc, &argv);
  std::signal(SIGPIPE, SIG_IGN);
  CLI::App app{"frugal: cheap transformer pretraining"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "frugal " FRUGAL_VERSION);
  frugal::cli::add_train_command(app);
  frugal::cli::add_config_command(app);
  frugal::cli::add_bench_command(app);
  frugal::cli::add_prepare_command(app);
  frugal::cli::add_tokenize_commands(app);
  frugal::cli::add_tokenizer_command(app);
  frugal::cli::add_export_command(app);
  frugal::cli::add_import_command(app);
  frugal::cli::add_report_command(app);
  frugal::cli::add_sample_command(app);
  frugal::cli::add_fill_mask_command(app);
  frugal::cli::add_eval_command(app);
  frugal::cli::add_experiment_command(app);
  int rc = 0;
  try {
    // Under mpirun only training and its benchmark divide work between the ranks; any other
    // command would run N times over the same files.
    if (world.parallel() && argc > 1 && std::string_view(argv[1]) != "train" && std::string_view(argv[1]) != "bench")
      frugal::fail("frugal {} runs in one process: start it without mpirun (only train and bench run "
                   "over several processes)", argv[1]);
    rc = parse_and_run(app, argc, argv);  // --help text goes to stdout too
    frugal::io::flush_stdout();
  } catch (const frugal::CollectiveError& e) {
    fmt::print(stderr, "error: {}{}\n", rank_prefix(world), e.what());
    return world.fail_together(1);
  } catch (const frugal::Error& e) {
    fmt::print(stderr, "error: {}{}\n", rank_prefix(world), e.what());
    return world.fail(1);
  } catch (const std::filesystem::filesystem_error& e) {
    fmt::print(stderr, "error: {}{}: {}{}; check that the path is right, is a file or directory as "
               "needed, and is writable\n", rank_prefix(world), e.code().message(), e.path1().string(),
               e.path2().empty() ? "" : " and " + e.path2().string());
    return world.fail(1);
  } catch (const std::bad_alloc&) {
    // What sizes the memory: the run config for the commands that train, the command's own
    // options otherwise.
    const std::vector<CLI::App*> parsed = app.get_subcommands();
    const std::string command = parsed.empty() ? "" : parsed.back()->get_name();
    const bool trains = command == "train" || command == "bench" || command == "experiment";
    fmt::print(stderr, "error: {}out of memory; {} or free memory\n", rank_prefix(world),
               trains ? "make the model or the batch smaller (model.*, train.batch_size, train.seq_len)"
                      : fmt::format("use smaller sizes in frugal {}'s options (see frugal {} --help)",
                                    command, command));
    return world.fail(1);
  } catch (const std::exception& e) {
    fmt::print(stderr, "error: {}{}\n", rank_prefix(world), e.what());
    return world.fail(1);
  }
  return rc;
}
