// dsv4 bench --peer (contract in bench_peer.h).
#include "cli/bench_peer.h"

#include <CLI/CLI.hpp>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>

#include "core/error.h"

namespace dsv4::cli {
namespace {

using json = nlohmann::ordered_json;

// The positive values of v, comma-separated (the bench's `--prefill ''` parses as {0}).
std::string join(const std::vector<int64_t>& v) {
  std::string s;
  for (int64_t x : v)
    if (x > 0) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

// `s` as one single-quoted shell word.
std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// One tier's rows: its name ("dsv4" for a run of one tier) and its JSON (dsv4's run, one tier or
// --kernels both).
struct Tier {
  std::string name;
  const json* rows;
};

std::vector<Tier> tiers_of(const json& results) {
  if (results.contains("fast") || results.contains("exact")) {
    std::vector<Tier> t;
    for (const char* name : {"fast", "exact"})
      if (results.contains(name) && results[name].is_object()) t.push_back({name, &results[name]});
    return t;
  }
  return {{"dsv4", &results}};
}

// The peer's description field `key` as text (a string as is, anything else as JSON; absent: `absent`).
std::string text(const json& j, const char* key, const std::string& absent) {
  if (!j.contains(key)) return absent;
  return j[key].is_string() ? j[key].get<std::string>() : j[key].dump();
}

double number(const json& row, const char* key, const char* what) {
  if (!row.contains(key) || !row[key].is_number()) fail("dsv4 bench --peer: the peer's ", what, " row lacks a number '", key, "'");
  return row[key].get<double>();
}

// The row of `rows` (an array, or absent) whose `key` is `value`.
const json* row_with(const json& holder, const char* section, const char* key, int64_t value) {
  if (!holder.contains(section)) return nullptr;
  const json& rows = holder[section];
  if (!rows.is_array()) return nullptr;
  for (const json& r : rows)
    if (r.is_object() && r.contains(key) && r[key].is_number_integer() && r[key].get<int64_t>() == value) return &r;
  return nullptr;
}

// Whether the peer's row p can be compared; else prints why (no row, or its error, which `row` keeps
// in `section`) and ends the printed line.
bool comparable(const json* p, json& row, json& section) {
  if (!p) {
    std::printf("(no peer row)\n");
    return false;
  }
  if (!p->contains("error")) return true;
  const std::string err = text(*p, "error", "");
  std::printf("peer error: %s\n", err.substr(0, 160).c_str());
  row["peer_error"] = err;
  section.push_back(row);
  return false;
}

json read_peer_json(const std::string& path, const std::string& command) {
  std::ifstream f(path);
  if (!f) fail("dsv4 bench --peer: '", command, "' wrote no JSON (", path, ")");
  json j;
  try {
    j = json::parse(f);
  } catch (const std::exception& e) {
    fail("dsv4 bench --peer: the peer's JSON does not parse: ", e.what());
  }
  if (!j.is_object() || !j.contains("decode") || !j["decode"].is_array() || !j.contains("prefill") ||
      !j["prefill"].is_array())
    fail("dsv4 bench --peer: the peer's JSON needs \"decode\" and \"prefill\" arrays (tools/hf-eager-bench's format)");
  return j;
}

}  // namespace

void add_bench_peer_options(CLI::App& cmd, BenchPeerArgs& a) {
  cmd.add_option("--peer", a.command,
                 "Also run this peer benchmark at the same batches and prefill lengths and print dsv4's speedup "
                 "over it, e.g. 'python3 tools/hf-eager-bench' (transformers eager)");
  cmd.add_option("--peer-layers", a.max_layers,
                 "The peer's layer count at most (bf16 transformers: 4 Flash layers fit one H100); below dsv4's, "
                 "dsv4 is compared at the peer's layer count")
      ->check(CLI::Range(int64_t(1), int64_t(1000)))
      ->capture_default_str();
}

void run_bench_peer(const BenchPeerArgs& a, const BenchPeerShape& shape, json& results) {
  if (a.command.empty()) return;
  const std::vector<Tier> tiers = tiers_of(results);
  if (tiers.empty() || !tiers[0].rows->contains("layers")) fail("dsv4 bench --peer: no dsv4 results to compare");
  const int64_t L = (*tiers[0].rows)["layers"].get<int64_t>();
  const int64_t Lp = std::min(L, a.max_layers);
  std::mt19937_64 rng{std::random_device{}()};
  const std::string out = (std::filesystem::temp_directory_path() /
                           ("dsv4-peer-" + std::to_string(::getpid()) + "-" + std::to_string(rng()) + ".json"))
                              .string();
  std::ostringstream cmd;
  cmd << a.command << " --layers " << Lp << " --batch " << shell_quote(join(shape.batches)) << " --prefill "
      << shell_quote(join(shape.prefills)) << " --context " << std::max<int64_t>(shape.context, 1) << " --json "
      << shell_quote(out) << " > /dev/null";
  std::printf("\npeer: %s --layers %lld ...\n", a.command.c_str(), (long long)Lp);
  std::fflush(stdout);
  const int rc = std::system(cmd.str().c_str());
  json peer;
  try {
    if (rc != 0) {
      if (rc > 0 && WIFEXITED(rc)) fail("dsv4 bench --peer: '", a.command, "' failed (exit code ", WEXITSTATUS(rc), ")");
      fail("dsv4 bench --peer: '", a.command, "' failed (status ", rc, ")");
    }
    peer = read_peer_json(out, a.command);
  } catch (...) {
    std::filesystem::remove(out);
    throw;
  }
  std::filesystem::remove(out);
  if (peer.contains("layers") && (!peer["layers"].is_number_integer() || peer["layers"].get<int64_t>() != Lp))
    fail("dsv4 bench --peer: the peer ran ", peer["layers"].dump(), " layers, asked for ", Lp);

  const bool scaled = Lp < L;
  const std::string version = text(peer, "transformers", "");
  std::printf("peer: %s%s, %lld layers, %s\n", text(peer, "what", "(no description)").c_str(),
              version.empty() ? "" : (", transformers " + version).c_str(), (long long)Lp,
              text(peer, "device", "?").c_str());
  if (scaled)
    std::printf("dsv4 at the peer's %lld layers: decode = embedding + head + %lld x its per-layer time, prefill = "
                "its %lld-layer time x %lld / %lld\n",
                (long long)Lp, (long long)Lp, (long long)L, (long long)Lp, (long long)L);
  json cmp;
  cmp["command"] = a.command;
  cmp["layers"] = Lp;
  cmp["scaled_from_layers"] = L;

  std::printf("%6s %10s", "batch", "peer ms");
  for (const Tier& t : tiers) std::printf(" %10s %9s", (t.name + " ms").c_str(), "speedup");
  std::printf("\n");
  for (int64_t B : shape.batches) {
    const json* p = row_with(peer, "decode", "batch", B);
    json row{{"batch", B}};
    std::printf("%6lld ", (long long)B);
    if (!comparable(p, row, cmp["decode"])) continue;
    const double peer_ms = number(*p, "step_ms", "decode");
    row["peer_ms"] = peer_ms;
    std::printf("%10.3f", peer_ms);
    for (const Tier& t : tiers) {
      const json* d = row_with(*t.rows, "decode", "batch", B);
      if (!d) {
        std::printf(" %10s %9s", "-", "-");
        continue;
      }
      const double ms = scaled ? ((*d)["embed_head_us"].get<double>() + double(Lp) * (*d)["layer_us"].get<double>()) * 1e-3
                               : (*d)["step_ms"].get<double>();
      row[t.name + "_ms"] = ms;
      row[t.name + "_speedup"] = peer_ms / ms;
      std::printf(" %10.3f %8.2fx", ms, peer_ms / ms);
    }
    std::printf("\n");
    cmp["decode"].push_back(row);
  }

  if (!join(shape.prefills).empty()) {
    std::printf("%6s %10s", "tokens", "peer tok/s");
    for (const Tier& t : tiers) std::printf(" %10s %9s", (t.name + " tok/s").c_str(), "speedup");
    std::printf("\n");
  }
  for (int64_t P : shape.prefills) {
    if (P <= 0) continue;
    const json* p = row_with(peer, "prefill", "tokens", P);
    json row{{"tokens", P}};
    std::printf("%6lld ", (long long)P);
    if (!comparable(p, row, cmp["prefill"])) continue;
    const double peer_ms = number(*p, "ms", "prefill");
    const double peer_tok_s = double(P) / (peer_ms * 1e-3);
    row["peer_tok_s"] = peer_tok_s;
    std::printf("%10.0f", peer_tok_s);
    for (const Tier& t : tiers) {
      const json* d = row_with(*t.rows, "prefill", "tokens", P);
      if (!d) {
        std::printf(" %10s %9s", "-", "-");
        continue;
      }
      const double ms = (*d)["ms"].get<double>() * double(Lp) / double(L);
      const double tok_s = double(P) / (ms * 1e-3);
      row[t.name + "_tok_s"] = tok_s;
      row[t.name + "_speedup"] = tok_s / peer_tok_s;
      std::printf(" %10.0f %8.2fx", tok_s, tok_s / peer_tok_s);
    }
    std::printf("\n");
    cmp["prefill"].push_back(row);
  }
  cmp["result"] = peer;
  results["peer"] = cmp;
}

}  // namespace dsv4::cli
