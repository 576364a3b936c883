// Subcommands of the `frugal` binary. Each lives in its own cmd_*.cpp and registers itself on the
// CLI11 app; main.cpp only wires them up. Commands are thin: the work is in the library.
#pragma once
#include <CLI/CLI.hpp>

namespace frugal::cli {

void add_train_command(CLI::App& app);
void add_config_command(CLI::App& app);
void add_bench_command(CLI::App& app);
void add_prepare_command(CLI::App& app);
void add_tokenize_commands(CLI::App& app);  // tokenize + detokenize
void add_tokenizer_command(CLI::App& app);  // tokenizer train
void add_export_command(CLI::App& app);
void add_import_command(CLI::App& app);
void add_report_command(CLI::App& app);
void add_sample_command(CLI::App& app);
void add_fill_mask_command(CLI::App& app);
void add_eval_command(CLI::App& app);
void add_experiment_command(CLI::App& app);

}  // namespace frugal::cli
