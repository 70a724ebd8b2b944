// Small input/output helpers shared by the commands.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dsv4::cli {

// The whole content of `path` ("-" = stdin); dsv4::Error "<path>: cannot open" when unreadable.
std::string read_input_file(const std::string& path);
// Ids separated by spaces, or as a JSON array, then a newline, on stdout.
void print_ids(const std::vector<int32_t>& ids, bool json);
// `text` on stdout exactly as it is; on a terminal a newline follows when it does not end in one (so
// the shell's prompt starts on its own line), never when piped.
void write_text(const std::string& text);

}  // namespace dsv4::cli
