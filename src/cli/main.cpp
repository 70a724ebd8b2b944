// dsv4: one binary, one subcommand per task. Every error — a bad flag as much as a bad model file —
// ends in one line "dsv4: error: <what>" and exit code 1, never an abort (cli/flags.h).
#include <CLI/CLI.hpp>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>

#include "cli/commands.h"
#include "cli/flags.h"
#include "dsv4_git.h"

namespace dsv4::cli {

std::string default_model_dir() {
  if (const char* env = std::getenv("DSV4_MODEL_DIR"); env && *env) return env;
  return std::string(DSV4_SOURCE_DIR) + "/models/tiny-shakespeare";
}

std::string version_string() {
#if DSV4_HAVE_CUDA
  const char* cuda = "on";
#else
  const char* cuda = "off";
#endif
  return std::string("dsv4 ") + DSV4_VERSION + " (git " + DSV4_GIT_COMMIT + ", CUDA " + cuda + ")";
}

}  // namespace dsv4::cli

int main(int argc, char** argv) {
  CLI::App app{"dsv4 - a DeepSeek-V4 inference engine", "dsv4"};
  app.require_subcommand(1);
  app.set_version_flag("--version", dsv4::cli::version_string(), "Print the version, git commit and CUDA on/off");
  app.footer("Run 'dsv4 COMMAND --help' for a command's options.");
  dsv4::cli::register_run(app);
  dsv4::cli::register_chat(app);
  dsv4::cli::register_perplexity(app);
  dsv4::cli::register_serve(app);
  dsv4::cli::register_bench(app);
  dsv4::cli::register_inspect(app);
  dsv4::cli::register_logits(app);
  dsv4::cli::register_tokenize(app);
  dsv4::cli::register_template(app);
  if (argc == 1) {  // `dsv4` alone: what it can do
    std::fputs(app.help().c_str(), stdout);
    return 0;
  }
  if (const std::string cmd = dsv4::cli::unknown_command(app, argc, argv); !cmd.empty()) {
    std::string names;
    for (const CLI::App* sub : app.get_subcommands({})) names += (names.empty() ? "" : ", ") + sub->get_name();
    std::fprintf(stderr, "dsv4: error: unknown %s '%s' (commands: %s)\n", cmd[0] == '-' ? "option" : "command",
                 cmd.c_str(), names.c_str());
    return 1;
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::Success& e) {  // --help, --version
    return app.exit(e);
  } catch (const CLI::RuntimeError& e) {  // a command's own exit status (inspect: a check failed)
    return e.get_exit_code();
  } catch (const CLI::Error& e) {
    std::fprintf(stderr, "dsv4: error: %s\n", dsv4::cli::parse_error_message(app, e).c_str());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dsv4: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
