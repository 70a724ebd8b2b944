// dsv4: one binary, one subcommand per task. Errors from user input end in a one-line message and
// exit code 1, never an abort.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>

#include "cli/commands.h"

namespace dsv4::cli {

std::string default_model_dir() {
  if (const char* env = std::getenv("DSV4_MODEL_DIR"); env && *env) return env;
  return std::string(DSV4_SOURCE_DIR) + "/models/tiny-shakespeare";
}

}  // namespace dsv4::cli

int main(int argc, char** argv) {
  CLI::App app{"dsv4 - a DeepSeek-V4 inference engine"};
  app.require_subcommand(1);
  dsv4::cli::register_run(app);
  dsv4::cli::register_chat(app);
  dsv4::cli::register_perplexity(app);
  dsv4::cli::register_serve(app);
  dsv4::cli::register_bench(app);
  dsv4::cli::register_inspect(app);
  dsv4::cli::register_logits(app);
  dsv4::cli::register_tokenize(app);
  dsv4::cli::register_template(app);
  try {
    app.parse(argc, argv);
  } catch (const CLI::Error& e) {
    return app.exit(e);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dsv4: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
