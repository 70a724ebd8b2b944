#include "cli/flags.h"

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <regex>

namespace dsv4::cli {

namespace {

std::string got(const std::string& s) { return ", got '" + s + "'"; }

// The subcommand being parsed when the error was thrown ("dsv4 run"), or "dsv4".
std::string command_of(const CLI::App& app) {
  std::string name = "dsv4";
  for (const CLI::App* sub : app.get_subcommands()) name += " " + sub->get_name();
  return name;
}

}  // namespace

CLI::Validator int_in(int64_t lo, int64_t hi) {
  const std::string want = hi == INT64_MAX ? "an integer >= " + std::to_string(lo)
                                           : "an integer from " + std::to_string(lo) + " to " + std::to_string(hi);
  return CLI::Validator(
      [lo, hi, want](std::string& s) -> std::string {
        errno = 0;
        char* end = nullptr;
        const long long v = std::strtoll(s.c_str(), &end, 10);
        if (s.empty() || *end != '\0' || errno == ERANGE || v < lo || v > hi) return "expected " + want + got(s);
        return "";
      },
      hi == INT64_MAX ? ">= " + std::to_string(lo) : std::to_string(lo) + ".." + std::to_string(hi));
}

CLI::Validator number_in(double lo, double hi) {
  char buf[96];
  std::snprintf(buf, sizeof buf, "a number from %g to %g", lo, hi);
  const std::string want = buf;
  return CLI::Validator(
      [lo, hi, want](std::string& s) -> std::string {
        char* end = nullptr;
        const double v = std::strtod(s.c_str(), &end);
        if (s.empty() || *end != '\0' || !std::isfinite(v) || v < lo || v > hi) return "expected " + want + got(s);
        return "";
      },
      want.substr(std::string("a number from ").size()));
}

CLI::Validator one_of(std::initializer_list<const char*> values) {
  std::vector<std::string> v(values.begin(), values.end());
  std::string want;
  for (const auto& x : v) want += (want.empty() ? "" : " | ") + x;
  return CLI::Validator(
      [v, want](std::string& s) -> std::string {
        for (const auto& x : v)
          if (s == x) return "";
        return "expected " + want + got(s);
      },
      want);
}

CLI::Validator existing_dir() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        std::error_code ec;
        if (std::filesystem::is_directory(s, ec)) return "";
        if (std::filesystem::exists(s, ec)) return "expected a model directory, '" + s + "' is a file";
        return "no such directory '" + s + "'";
      },
      "DIR");
}

std::string parse_error_message(const CLI::App& app, const CLI::Error& e) {
  const std::string what = e.what(), cmd = command_of(app);
  std::smatch m;
  // CLI11's texts, reworded; validators (above) already say "<flag>: expected ..., got '...'".
  static const std::regex conversion(R"(Could not convert: (\S+) = (.*))"), missing(R"((\S+): \d+ required (\S+) missing)"),
      extras(R"(The following arguments? (?:was|were) not expected: (.*))"), excludes(R"((\S+) excludes (\S+))");
  if (std::regex_match(what, m, conversion)) return m[1].str() + ": not a valid value" + got(m[2].str());
  if (std::regex_match(what, m, missing)) return m[1].str() + ": expects a value (" + m[2].str() + ")";
  if (std::regex_match(what, m, extras)) {
    // CLI11 lists the extra arguments last first: name the first one.
    const std::string all = m[1].str(), arg = all.substr(all.rfind(' ') + 1);
    if (!arg.empty() && arg[0] == '-')
      return cmd + ": unknown option '" + arg + "' (" + cmd + " --help lists the options)";
    return cmd + ": unexpected argument '" + arg + "'";
  }
  if (std::regex_match(what, m, excludes)) return m[1].str() + " cannot be used with " + m[2].str();
  if (dynamic_cast<const CLI::RequiredError*>(&e) || dynamic_cast<const CLI::RequiresError*>(&e) ||
      dynamic_cast<const CLI::ArgumentMismatch*>(&e))
    return cmd + ": " + what;
  return what;
}

std::string unknown_command(const CLI::App& app, int argc, char** argv) {
  if (argc < 2) return "";
  const std::string a = argv[1];
  if (a[0] == '-') return a == "-h" || a == "--help" || a == "--version" ? "" : a;
  for (const CLI::App* sub : app.get_subcommands({}))
    if (sub->get_name() == argv[1]) return "";
  return argv[1];
}

}  // namespace dsv4::cli
