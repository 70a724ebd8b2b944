// Each dsv4 subcommand registers itself on the CLI11 app; main() only wires them together.
#pragma once
#include <string>

namespace CLI {
class App;
}

namespace dsv4::cli {

void register_inspect(CLI::App& app);
void register_logits(CLI::App& app);
void register_tokenize(CLI::App& app);
void register_template(CLI::App& app);
void register_run(CLI::App& app);
void register_chat(CLI::App& app);
void register_perplexity(CLI::App& app);
void register_serve(CLI::App& app);
void register_bench(CLI::App& app);

// The bundled model directory (models/tiny-shakespeare next to the binary's source tree, or
// $DSV4_MODEL_DIR), used whenever -m is not given.
std::string default_model_dir();

}  // namespace dsv4::cli
