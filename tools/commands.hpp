// Each subcommand registers its options and its callback on the CLI app.
#pragma once

#include <CLI/CLI.hpp>

namespace eldr::cli {

// The callbacks store their exit code here (CLI11 callbacks return void).
extern int g_exit_code;

void register_fit_commands(CLI::App& app);  // fit, inspect, import, synth
void register_route_command(CLI::App& app);
void register_bench_command(CLI::App& app);
void register_demo_command(CLI::App& app);
void register_sim_command(CLI::App& app);
void register_status_commands(CLI::App& app);  // status, reload (eldrd)
void register_loadgen_command(CLI::App& app);
void register_table_commands(CLI::App& app);                   // table publish, table show (NATS)
void register_bench_ring_command(CLI::App& bench);             // bench ring, under `bench`
void register_bench_ring_throughput_command(CLI::App& bench);  // bench ring-throughput
void register_bench_decode_command(CLI::App& bench);           // bench decode
void register_bench_pool_command(CLI::App& bench);             // bench pool
void register_bench_prompt_command(CLI::App& bench);           // bench prompt

}  // namespace eldr::cli
