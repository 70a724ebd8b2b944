// The command line's one error path: validators that say what a flag expects, and the translation of
// every CLI11 parse error into one line "dsv4: error: <what>" (exit code 1), naming the flag.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>

namespace CLI {
class App;
class Error;
class Validator;
}  // namespace CLI

namespace dsv4::cli {

// "expected an integer from LO to HI, got 'abc'" (hi = INT64_MAX: "an integer >= LO").
CLI::Validator int_in(int64_t lo, int64_t hi = INT64_MAX);
// "expected a number from LO to HI, got 'abc'".
CLI::Validator number_in(double lo, double hi);
// "expected one of a | b | c, got 'x'".
CLI::Validator one_of(std::initializer_list<const char*> values);
// "no such directory 'X'" (a model directory given with -m).
CLI::Validator existing_dir();

// The one-line message for a CLI11 parse error (without the "dsv4: error: " prefix). `app`: the root
// app, to name the subcommand whose flags were wrong.
std::string parse_error_message(const CLI::App& app, const CLI::Error& e);

// The first argument when it is neither a subcommand of `app` nor --help / --version ("" when fine).
std::string unknown_command(const CLI::App& app, int argc, char** argv);

}  // namespace dsv4::cli
