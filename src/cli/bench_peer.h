// `dsv4 bench --peer CMD`: in the same call, after dsv4's own rows, run a peer benchmark of the same
// shape (tools/hf-eager-bench: transformers eager, bf16, the Flash shape with random weights) and print
// dsv4's speedup over it per decode batch and prefill length, for each tier the call ran.
//
// The peer is run as `CMD --layers Lp --batch B1,B2 --prefill P1,P2 --context C --json FILE` (through
// /bin/sh; its standard output is discarded, its errors pass through), with Lp = min(dsv4's layers,
// --peer-layers): transformers keeps the model in bf16, so 20 Flash layers do not fit one GPU where dsv4's
// checkpoint formats do. Where Lp is below dsv4's layer count the comparison is at the peer's layer count:
// dsv4's decode step there is its embedding + head time plus Lp times its per-layer time (both measured:
// the bench's step of no layers and the per-layer difference), and its prefill time is scaled by Lp / L
// (the head of one position is negligible there); the output says so. A peer row with an "error" (out of
// memory, ...) is printed as that error, not compared.
//
// The peer's JSON: {"what", "layers", "device", "transformers"?, "decode": [{"batch", "step_ms"} | {"batch",
// "error"}], "prefill": [{"tokens", "ms", "tok_s"} | {"tokens", "error"}]}. The comparison goes to the
// bench's JSON as "peer": {"command", "layers", "result" (the peer's JSON), "decode": [{"batch", "peer_ms",
// "<tier>_ms", "<tier>_speedup", ...}], "prefill": [{"tokens", "peer_tok_s", "<tier>_tok_s",
// "<tier>_speedup", ...}]} with <tier> "dsv4" for a run of one tier, "fast" and "exact" for --kernels both;
// peer rows with an error carry "peer_error" instead.
#pragma once
#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace CLI {
class App;
}  // namespace CLI

namespace dsv4::cli {

struct BenchPeerArgs {
  std::string command;     // --peer: empty, none
  int64_t max_layers = 4;  // --peer-layers
};

void add_bench_peer_options(CLI::App& cmd, BenchPeerArgs& a);

// What dsv4's run asked for (passed on to the peer).
struct BenchPeerShape {
  std::vector<int64_t> batches, prefills;
  int64_t context = 0;
};

// Runs the peer and adds the comparison to `results` (one tier's JSON, or {"fast", "exact", ...} of
// --kernels both), printing it. Throws dsv4::Error with one line when the peer cannot run or its JSON is
// not the format above.
void run_bench_peer(const BenchPeerArgs& a, const BenchPeerShape& shape, nlohmann::ordered_json& results);

}  // namespace dsv4::cli
