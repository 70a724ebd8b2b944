// Pack / unpack of the compact KV records (layouts: core/kv_record_layout.h; the contract with its
// proofs: docs/kv-records.md). CPU twins of backend/cuda/kv_record.h, bit for bit.
//
// pack is the official numerics' real quantization of a row: the nope dims are act_quant_fp8 in
// 64-blocks (core/quant.h: power-of-two scale from the block's amax, e4m3 codes RNE), the rope dims
// f32_to_bf16 (RNE); the indexer key is act_quant_fp4 in 32-blocks. So for any finite row x,
//   unpack(pack(x)) == QuantSim::kv(x, nope) on the nope dims, round_bf16 on the rope dims
//   unpack(pack(k)) == fp4_sim(k)                      (k already Hadamard-rotated)
// and for a row already on the official grid (QuantSim's output: what the model attends over)
// unpack(pack(x)) == x exactly. Padding bytes are written as zero. unpack reads any bytes (codes 0x7F /
// 0xFF and scale 0xFF decode to NaN); it is exact (every value is code * 2^k, representable in fp32).
#pragma once
#include <cstdint>

#include "core/kv_record_layout.h"

namespace dsv4::cpu {

struct PackKvEntriesParams {
  const float* x = nullptr;   // [rows, head_dim], row r at r * x_stride (floats)
  uint8_t* records = nullptr; // [rows, layout.bytes()] contiguous records
  int64_t rows = 0, x_stride = 0;
  KvEntryLayout layout;       // kv_entry_layout(head_dim, rope_dim)
};
void pack_kv_entries(const PackKvEntriesParams& p);

struct UnpackKvEntriesParams {
  const uint8_t* records = nullptr;  // [rows, layout.bytes()]
  float* x = nullptr;                // [rows, head_dim], row stride x_stride
  int64_t rows = 0, x_stride = 0;
  KvEntryLayout layout;
};
void unpack_kv_entries(const UnpackKvEntriesParams& p);

struct PackIndexerKeysParams {
  const float* x = nullptr;   // [rows, dim] Hadamard-rotated keys, row stride x_stride
  uint8_t* records = nullptr; // [rows, layout.bytes()]
  int64_t rows = 0, x_stride = 0;
  IndexerKeyLayout layout;    // indexer_key_layout(dim)
};
void pack_indexer_keys(const PackIndexerKeysParams& p);

struct UnpackIndexerKeysParams {
  const uint8_t* records = nullptr;  // [rows, layout.bytes()]
  float* x = nullptr;                // [rows, dim], row stride x_stride
  int64_t rows = 0, x_stride = 0;
  IndexerKeyLayout layout;
};
void unpack_indexer_keys(const UnpackIndexerKeysParams& p);

}  // namespace dsv4::cpu
