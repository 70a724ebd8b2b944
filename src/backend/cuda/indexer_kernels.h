// Explicit kernel choices of the lightning indexer (contracts of indexer_scores / indexer_topk in
// attn_ops.h), for the tests that compare the paths and for tuning. Auto is what the model uses.
//
// Scores:
// * Warp: one warp per (token, entry), the head dots lane-strided then a warp tree; any heads / dim.
// * Mma: bf16 tensor cores (mma.sync m16n8k16, fp32 accumulate): a block computes the [heads x 64
//   entries] dots of one token from shared memory, then one thread per entry sums the ReLU-weighted
//   head terms in head order. heads 64, dim 128 (Flash, Pro). Both kernels round the dot exactly like
//   the CPU twin whenever the fp32 dot of the Hadamard + FP4 values is exact (products of FP4-grid
//   values have a few bits; the model tests see 0 differences); otherwise they differ from the twin
//   and from each other in the dot's summation order only.
// Top-k:
// * Bitonic: one block sorts all of a token's (score, index) keys in shared memory: max_entries <= 16384.
// * Radix: one block per token selects the k-th key with four 8-bit radix passes over the scores,
//   compacts the winners (ties at the threshold to the lower index, in index order), then sorts only
//   those k: any max_entries (1M-token contexts: 262,144 CSA entries), k <= 4096.
// * RadixSplit: for few tokens over long lists (Auto: <= 32 tokens, >= 16,384 entries): blocks (token,
//   split) each radix-select and sort the k best of a chunk of >= 8,192 entries, one block per token
//   merges the splits' sorted candidates (<= 8,192 sort keys, in the context's workspace) by rank.
// All give the same list: best score first, ties to the lower index, -1 past min(k, visible).
#pragma once
#include "backend/cuda/attn_ops.h"

namespace dsv4::cuda {

enum class IndexerScoreKernel { Auto, Warp, Mma };
void indexer_scores_with(const DeviceContext& ctx, const IndexerScoreParams& p, IndexerScoreKernel kernel);
bool indexer_scores_mma_supported(const IndexerScoreParams& p);

enum class IndexerTopkKernel { Auto, Bitonic, Radix, RadixSplit };
void indexer_topk_with(const DeviceContext& ctx, const IndexerTopkParams& p, IndexerTopkKernel kernel);

}  // namespace dsv4::cuda
