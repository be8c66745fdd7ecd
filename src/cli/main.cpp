// loom: train GPT-style models. See `loom --help`.
#include <cstdio>
#include <exception>

#include "cli/commands.h"
#include "core/check.h"

int main(int argc, char** argv) {
  using namespace loom;
  cli::Args args(argv + 1, argv + argc);
  try {
    if (args.empty() || args[0] == "-h" || args[0] == "--help" || args[0] == "help") {
      cli::print_help();
      return 0;
    }
    std::string cmd = args[0];
    cli::Args rest(args.begin() + 1, args.end());
    if (cmd == "train") return cli::cmd_train(rest);
    if (cmd == "bench") return cli::cmd_bench(rest);
    std::fprintf(stderr, "loom: unknown command '%s' (try loom --help)\n", cmd.c_str());
    return 2;
  } catch (const UserError& e) {
    std::fprintf(stderr, "loom: error: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "loom: internal error: %s\n", e.what());
    return 1;
  }
}
