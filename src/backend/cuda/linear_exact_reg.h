// The register-tiled path of exact_linear (linear_exact.h) for 2..512 tokens: same contract, same bits.
//
// cpu::matmul's association is eight chains (chain j: k = j mod 8, ascending k) and a fixed tree. Chain j
// of one output, step i, is k = 8i + j: a chain is an ordinary serial dot product over the transposed
// tile's rows k = j, j + 8, ... So one chain of many outputs is a small GEMM with a serial K loop, which
// a register-tiled outer product computes in order: thread (chain j, row group, token group) keeps
// R rows x TT tokens of accumulators of its chain; each step loads R weights and TT activations
// (exact fp32 values) from shared memory and does R x TT fmas (each product exact, so fma(w, x, acc) is
// the twin's acc + w * x). The 8 chains of an output sit in 8 adjacent lanes, so the tree is the
// xor-shuffles of the other kernels.
//
// Block: 8 x RG x TG threads, tile BM = RG * R rows x BN = TG * TT tokens; K in 64-wide slices: a
// cp.async ring of raw slices (e4m3 / bf16 bytes, 4 deep) and two fp32 slices in shared memory,
// transposed ([k][row], [k][token]), each value decoded once per block (code x scale, as the twin
// dequantizes). One block barrier per slice: slice s + 1 is decoded while slice s is multiplied.
// Zero padding (rows past out, tokens past T, K past in) adds +0 products to chains that are never -0.
#pragma once
#include "backend/cuda/linear_exact.h"

namespace dsv4::cuda::detail {

// Number of register-tile configurations (ExactLinearParams::reg_config indexes them).
int exact_reg_configs();
// "RxTT/BMxBN" of configuration c, for benchmarks.
const char* exact_reg_config_name(int c);
// The configuration Auto takes for p (p.reg_config < 0).
int exact_reg_pick(const ExactLinearParams& p, int sm_count);
void exact_reg(const DeviceContext& ctx, const ExactLinearParams& p);

}  // namespace dsv4::cuda::detail
