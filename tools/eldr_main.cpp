// eldr: expert-locality-aware decode routing, command line.
#include <cstdio>

#include "commands.hpp"

namespace eldr::cli {
int g_exit_code = 0;
}

int main(int argc, char** argv) {
  CLI::App app{"eldr: expert-locality-aware decode routing for MoE serving"};
  app.require_subcommand(1);
  eldr::cli::register_fit_commands(app);
  eldr::cli::register_route_command(app);
  eldr::cli::register_bench_command(app);
  eldr::cli::register_demo_command(app);
  eldr::cli::register_sim_command(app);
  eldr::cli::register_status_commands(app);
  eldr::cli::register_loadgen_command(app);
  eldr::cli::register_table_commands(app);
  eldr::cli::register_bench_ring_command(*app.get_subcommand("bench"));
  eldr::cli::register_bench_ring_throughput_command(*app.get_subcommand("bench"));
  eldr::cli::register_bench_decode_command(*app.get_subcommand("bench"));
  eldr::cli::register_bench_pool_command(*app.get_subcommand("bench"));
  eldr::cli::register_bench_prompt_command(*app.get_subcommand("bench"));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e);
  }
  return eldr::cli::g_exit_code;
}
