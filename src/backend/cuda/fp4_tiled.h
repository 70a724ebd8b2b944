// The tiled byte layout of an FP4 (e2m1) weight matrix for the routed-expert GEMV — a written contract
// (STYLE.md 8) with pack / unpack reference functions and a round-trip test (tests/backend/cuda).
//
// Checkpoint layout: bytes W[rows, K/2]; byte (r, i) holds k = 2i (low nibble) and k = 2i + 1 (high).
// Cut every row into 32-k blocks of 16 bytes and every block into 4 words of 4 bytes (word w holds
// k = 8w .. 8w + 7 of the block). The tiled layout stores word w of block b of row r at byte
//
//   (((r / 16) * (K / 128) + b / 4) * 2 + (r % 16) / 8) * 512 + ((r % 8) * 4 + w) * 16 + (b % 4) * 4
//
// that is: per 16-row tile and 128-k group, two 512-byte halves (rows 0-7, rows 8-15); in a half,
// lane L = (r % 8) * 4 + w of a warp owns 16 bytes = word w of the group's 4 blocks, which is exactly
// the slice of the m16n8k32 A fragment that lane feeds for those 4 blocks. So the GEMV reads 512
// contiguous bytes per warp load and needs no register shuffles. rows % 16 == 0, K % 128 == 0.
// The E8M0 scales keep the checkpoint layout [rows, K/32].
//
// The FP8 (e4m3) twin for fp4_grouped_decode's FP8 experts: bytes W[rows, K] cut the same way (16-row
// tiles, 128-k groups), each group 2 KiB = four 512-byte quarters q = 2 * ((r % 16) / 8) + (b % 4) / 2;
// in a quarter lane L = (r % 8) * 4 + (k % 32) / 8 owns 16 bytes: k 8t..8t+7 of block 2 * ((b % 4) / 2)
// then of the next block (t = (k % 32) / 8, b = k / 32), so a warp again loads 512 contiguous bytes per
// quarter and every lane holds its m64n8k32 A fragment bytes:
//
//   (((r / 16) * (K / 128) + k / 128) * 4 + q) * 512 + ((r % 8) * 4 + t) * 16 + (b % 2) * 8 + k % 8
#pragma once
#include <cstdint>

namespace dsv4::cuda {

// Byte offset of word `word` (0..3) of 32-k block `block` of row `row` in the tiled layout.
int64_t fp4_tiled_offset(int64_t row, int64_t block, int word, int64_t K);
// dst (rows * K / 2 bytes) = the tiled form of the checkpoint-layout src. Throws on bad shapes.
void pack_fp4_tiled(const uint8_t* src, int64_t rows, int64_t K, uint8_t* dst);
// The inverse: dst in the checkpoint layout.
void unpack_fp4_tiled(const uint8_t* src, int64_t rows, int64_t K, uint8_t* dst);

// Byte offset of FP8 element (row, k) in the FP8 tiled layout; pack / unpack as above (rows * K bytes).
int64_t fp8_tiled_offset(int64_t row, int64_t k, int64_t K);
void pack_fp8_tiled(const uint8_t* src, int64_t rows, int64_t K, uint8_t* dst);
void unpack_fp8_tiled(const uint8_t* src, int64_t rows, int64_t K, uint8_t* dst);

}  // namespace dsv4::cuda
