// The backend interface the one forward (src/model/forward.cpp) is written against (docs/architecture.md).
//
// A backend owns the device storage of the weights (bound once by io::bind_weights), the per-sequence
// state of its slots (window rings, compressor partial windows with the CSA overlap, compressed entries,
// indexer keys) and the activations of the current call. The forward drives it with coarse ops, one
// call per step of the model (MODEL.md §2-§8), coarse enough that a backend fuses inside them.
//
// A call: begin(batch) validates and uploads the batch; execute(shape, body) runs the forward's ops
// for it (the CUDA backend captures a decode shape into a CUDA graph once and replays it: every op
// reads ids / positions / slots from device buffers filled by begin); then the outputs are read
// (logits, sampled ids, streams).
//
// Activations of a call with T tokens (the ops name them implicitly):
//   X [T, n, D]  the residual streams (bf16 on the official path)
//   u [T, D]     the current sub-layer's input (mHC pre + collapse, then the sub-layer's RMSNorm)
//   y [T, D]     the current sub-layer's output
// and the attention's and MoE's intermediates between their ops (Q, this call's KV, top-k, routing).
//
// Layers: 0 .. num_layers-1 are the main stack; num_layers + k is MTP block k (its own weights and
// window ring in every slot, routed top-k). Heads: 0 is the main head, 1 + k MTP block k's.
//
// Positions are the caller's: the tokens of a run are consecutive positions of one sequence; a run
// starting at position 0 starts a fresh sequence in its slot (a backend resets what it must). The
// runner (runtime/) checks slots and positions before begin.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include "core/tensor.h"
#include "io/config.h"

namespace dsv4 {

namespace comm {
class Communicator;  // backend/comm/communicator.h
}

// reference: float32 everywhere, matches transformers. official: DeepSeek's QAT numerics (bf16
// rounding, FP8 activation / KV and FP4 indexer quantization).
enum class Numerics : uint8_t { Reference, Official };
Numerics parse_numerics(const std::string& s);  // "reference" | "official"
const char* numerics_name(Numerics n);

// The GPU's two kernel tiers of the official numerics (docs/cuda.md "Kernel tiers"): Exact is
// bit-identical to the CPU; Fast uses tensor cores with a free summation order. The CPU has one tier.
enum class KernelTier : uint8_t { Exact, Fast };
KernelTier parse_kernel_tier(const std::string& s);  // "exact" | "fast"
const char* kernel_tier_name(KernelTier t);

// What a backend allocates for. The CPU grows as needed and only checks max_ctx.
struct Capacity {
  int64_t max_seqs = 1;      // slots
  int64_t max_ctx = 4096;    // positions per sequence
  int64_t max_tokens = 256;  // tokens per call (a prefill chunk, a decode batch)
  // Pages of the KV page pool (backend/kv_pages.h, docs/kv-pages.md), shared by all slots and snapshots.
  // 0: the CPU grows the pool as needed; the GPU takes max_seqs + 1 full contexts' worth.
  int64_t kv_pages = 0;
};

enum class Device : uint8_t { Cpu, Cuda };

struct BackendOptions {
  Device device = Device::Cpu;
  Numerics numerics = Numerics::Official;  // cuda: official only
  KernelTier kernels = KernelTier::Exact;  // cuda: the linears' tier (the CLI defaults to fast)
  Capacity capacity;
  bool graphs = true;               // cuda: decode calls through CUDA graphs (false: plain launches)
  // cuda: the independent steps of a layer on side streams (the compressors and the indexer beside the
  // queries, the shared expert beside the routed ones); false: one stream. The same bits either way.
  bool overlap = true;
  // cuda: FP4 routed experts of calls above kExactLinearMaxTokens tokens on the tensor cores; false:
  // the per-(token, pick) GEMVs at any size (bit-identical to the CPU, slow for long prompts).
  bool grouped_moe_prefill = true;
  int gpu = 0;                      // cuda: device ordinal
  // Expert parallelism (docs/multi-gpu.md): this backend is rank comm->rank() of comm->size(). It holds
  // every dense weight and the routed experts [rank * E/N, (rank+1) * E/N); the MoE sends each token
  // row to the ranks of its picked experts and combines what comes back in ascending expert order (so
  // the logits equal one rank's bit for bit). Every rank calls every op of every call in step with the
  // others: a rank with no tokens runs calls of 0 tokens. Null: one rank. Not owned.
  comm::Communicator* comm = nullptr;
  // One-line notices of the load (cuda: the memory plan it checked before any weight moved); empty: none.
  std::function<void(const std::string&)> report = {};
};

// One call's tokens: runs of `run_len` consecutive tokens, each run one sequence (decode: run_len 1,
// one token of each of B sequences; a prefill chunk: one run of T tokens).
struct Batch {
  std::vector<int32_t> ids;        // [T] token ids
  std::vector<int32_t> positions;  // [T] position of each token in its sequence
  std::vector<int32_t> slots;      // [T] state slot of each token's sequence
  int64_t run_len = 1;             // T % run_len == 0
  int64_t size() const { return int64_t(ids.size()); }
};

enum class SubLayer : uint8_t { Attention, Ffn };
struct SubLayerRef {
  int64_t layer = 0;
  SubLayer sub = SubLayer::Attention;
};
// The step between two sub-layers: X = mHC post of `post` (X, y) (none before the first), then
// u = norm(mHC pre + collapse of `pre` (X)) (none after the last). One op so a backend can fuse the
// post of one sub-layer with the pre, norm and activation quantization of the next.
struct MhcStep {
  std::optional<SubLayerRef> post;
  std::optional<SubLayerRef> pre;
};

enum class CompressorKind : uint8_t { Main, Indexer };

// One row's parameters of the backend's sampler (Philox(seed, step) draw; temperature <= 0: greedy).
// Penalties are the host Sampler's (runtime/sampler.h). A grammar's allowed-token bitmask (constrained
// decoding, docs/structured-output.md) is applied here: only the ids it allows are candidates (as if
// every other logit were absent), so greedy is the first maximum among them and top-k / top-p / min-p
// cut the allowed ids' distribution. A row without a mask reads none and pays nothing for it.
struct SampleRow {
  float temperature = 0;
  int32_t top_k = 0;  // 0 = off
  float top_p = 1, min_p = 0;
  uint64_t seed = 0, step = 0;
  // Bit id%32 of word id/32: id allowed ((vocab + 31) / 32 words); null: every id. The caller keeps it
  // alive until the call's sampled() ids are read. A mask allowing no id draws -1.
  const uint32_t* mask = nullptr;
};

// The shape of a call's work: what execute() may capture once and replay.
struct StepShape {
  int64_t tokens = 0, run_len = 1;
  int64_t layers = -1;                 // main layers run (-1: all); benchmarks time prefixes
  int64_t head = 0;                    // which head (0 main, 1 + k MTP block k)
  int64_t head_first = 0, head_rows = 0;  // logits of X rows [head_first, head_first + head_rows)
  bool sample = false;                 // sample the head rows (parameters from set_sampling)
  bool mtp = false;                    // an MTP call (mtp_input instead of embed)
  bool graph = true;                   // may be captured (false: the body reads outputs between ops)
  auto key() const { return std::tuple(tokens, run_len, layers, head, head_first, head_rows, sample, mtp); }
};

// What a backend holds, for reports (`dsv4 bench`).
struct BackendInfo {
  std::string device;         // the device's name ("NVIDIA H200"; "cpu")
  uint64_t weight_bytes = 0;  // the weights' storage there
  uint64_t free_bytes = 0;    // device memory still free (0: not reported)
};

// The KV page pool of a backend (docs/kv-pages.md): what admission by pages reads.
struct KvPageInfo {
  int64_t page_tokens = 0;   // tokens of context per page
  int64_t capacity = 0;      // pages in the pool (0: grows as needed)
  int64_t used = 0;          // pages held by slots and snapshots
  int64_t paged_groups = 0;  // page tables per sequence that take pages (main stack, compressed MTP blocks)
  int64_t page_bytes = 0;    // storage of one page (0: not reported)
  std::string storage;       // what a page holds ("compact records", "float32 rows"; empty: not reported)
  // KV bytes one token of context takes in the pages of every paged group (0: not reported).
  double bytes_per_token() const { return page_tokens > 0 ? double(paged_groups * page_bytes) / double(page_tokens) : 0; }
  // Tokens of context the whole pool holds for one sequence (-1: unbounded; 0 pages per token: -1).
  int64_t capacity_tokens() const {
    return capacity == 0 || paged_groups == 0 ? -1 : capacity / paged_groups * page_tokens;
  }
  int64_t free_pages() const { return capacity == 0 ? -1 : capacity - used; }  // -1: unbounded
  // Pages a sequence holds after `tokens` tokens of context.
  int64_t pages_needed(int64_t tokens) const {
    return page_tokens > 0 ? paged_groups * ((tokens + page_tokens - 1) / page_tokens) : 0;
  }
};

// A slot's whole state at a position, as a backend keeps it (opaque above the backend): what a prefix
// cache keeps at 128-token boundaries and what speculative decoding restores after rejected drafts.
// It shares the complete KV pages of the slot (reference counts) and copies the rest: the rings, the
// compressor partial windows, the partial last page.
class SlotSnapshot {
 public:
  virtual ~SlotSnapshot() = default;
  // Memory it holds, for a cache's budget: its copies plus the pages it shares, each counted whole.
  virtual uint64_t bytes() const = 0;
  virtual uint64_t copied_bytes() const { return bytes(); }  // its copies alone: O(window), any context
  virtual int64_t shared_pages() const { return 0; }          // KV pages it holds a reference to
  // Which pages those are: the pool's ids (pool names the pool: ids of two pools differ) and one page's
  // storage, so that a holder of several snapshots sharing pages counts each page once. Empty ids: not
  // reported (a holder then counts bytes() whole).
  struct PageList {
    const void* pool = nullptr;
    std::vector<int32_t> ids;
    uint64_t page_bytes = 0;
  };
  virtual PageList page_list() const { return {}; }
  int64_t pos = 0;                     // the main position the slot was at
  int64_t mtp_pos = 0;                 // the MTP blocks' position
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const ModelConfig& config() const = 0;
  virtual const Capacity& capacity() const = 0;
  virtual Numerics numerics() const = 0;
  virtual std::string name() const = 0;  // "cpu", "cuda (fast kernels)", ... for messages
  virtual int64_t num_mtp() const = 0;   // MTP blocks with weights
  virtual BackendInfo info() const { return BackendInfo{.device = name()}; }

  // ---- a call
  // Validates and uploads the batch (ids in the vocabulary, slots and positions within capacity).
  virtual void begin(const Batch& b) = 0;
  // Runs `body` (the ops of one call of this shape). The CUDA backend captures decode shapes into a
  // CUDA graph on first use and replays it; otherwise body() runs directly.
  virtual void execute(const StepShape& shape, const std::function<void()>& body) = 0;
  // Sampling parameters of the next call's head rows (before begin's execute; rows.size() = head_rows).
  virtual void set_sampling(const std::vector<SampleRow>& rows) = 0;

  // ---- the forward's ops (MODEL.md section in brackets)
  virtual void embed() = 0;                      // X[t, j] = embed[ids[t]] for every stream j (§2)
  virtual void mhc(const MhcStep& s) = 0;        // mHC post / pre + collapse + RMSNorm (§3)
  // Attention (§4) of layer `layer` on u: Q (wq_a, q_norm, wq_b, head norm, RoPE) and this call's KV
  // (wkv, kv_norm, RoPE, FP8 snap of the non-rope dims).
  virtual void attn_qkv(int64_t layer) = 0;
  // A compressor over u: pools the call's tokens into the slots' partial blocks and emits the entries
  // of every block that completes (norm, RoPE at the block start, KV grid or Hadamard + FP4 keys).
  virtual void compress(int64_t layer, CompressorKind c) = 0;
  virtual void index_topk(int64_t layer) = 0;    // the lightning indexer's top-k of each query (CSA)
  // Key lists (window + compressed entries or the top-k), sparse attention with sinks, inverse RoPE,
  // then the window ring takes this call's KV.
  virtual void attend(int64_t layer) = 0;
  virtual void attn_out(int64_t layer) = 0;      // grouped wo_a, wo_b: y
  virtual void moe_route(int64_t layer) = 0;     // router scores, hash / biased top-k, weights (§7)
  virtual void moe_experts(int64_t layer) = 0;   // routed experts + shared expert, combined: y
  // MTP block k's input (§8): X[t, j] = e_proj(enorm(embed[ids[t]])) + h_proj(hnorm(S[t, j])) with S
  // the streams set by set_streams.
  virtual void mtp_input(int64_t k) = 0;
  // hc_head collapse, final norm and logits of X rows [first, first + rows) into logits rows [0, rows).
  virtual void head(int64_t head, int64_t first, int64_t rows) = 0;
  virtual void sample(int64_t rows) = 0;         // the head rows' ids (parameters: set_sampling)

  // ---- slot state (outside a call)
  // A copy of everything `slot` carries (every layer's ring, compressor partial windows with the CSA
  // overlap, compressed entries, indexer keys; MTP blocks too). pos / mtp_pos: the caller's positions
  // the state is at (recorded, not checked).
  virtual std::shared_ptr<const SlotSnapshot> snapshot(int slot, int64_t pos, int64_t mtp_pos) = 0;
  // Makes `slot` carry exactly the snapshot's state (of this backend; another slot's is fine), so the
  // next call continues at snapshot.pos as the snapshotted sequence would have.
  virtual void restore(int slot, const SlotSnapshot& s) = 0;
  // Gives back the slot's KV pages (its next run starts at position 0 anyway).
  virtual void release(int slot) = 0;
  virtual KvPageInfo kv_pages() const = 0;

  // ---- outputs and inputs outside the ops (synchronize)
  virtual int64_t max_logit_rows() const = 0;    // rows one head op may produce
  virtual Tensor logits(int64_t rows) = 0;       // [rows, V] fp32
  virtual std::vector<int32_t> sampled(int64_t rows) = 0;
  virtual Tensor streams() = 0;                  // X [T, n, D] of the last call, as fp32
  virtual Tensor head_hidden(int64_t head, int64_t first, int64_t rows) = 0;  // [rows, D] after hc_head + norm
  virtual void set_streams(const Tensor& S) = 0; // S [T, n, D]: the MTP input of the next call
  // Milliseconds per call of fn: the median of `reps` calls after `warmup` (on the GPU a pair of device
  // events around each call, the calls queued back to back; `dsv4 bench`).
  virtual double time_ms(int64_t warmup, int64_t reps, const std::function<void()>& fn) = 0;
  // Kernel launches in the graph the last execute() replayed (cuda decode and verify calls: the kernel
  // nodes of its CUDA graph); -1 when the last call ran without one (`dsv4 bench`).
  virtual int64_t last_graph_kernels() const { return -1; }
};

}  // namespace dsv4
