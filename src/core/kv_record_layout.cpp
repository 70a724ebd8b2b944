#include "core/kv_record_layout.h"

#include "core/error.h"

namespace dsv4 {
namespace {

constexpr int64_t kMaxRecordDim = 65536;  // keeps every offset well inside an int

}  // namespace

KvEntryLayout kv_entry_layout(int64_t head_dim, int64_t rope_dim) {
  if (head_dim <= 0 || head_dim > kMaxRecordDim)
    fail("KV entry record: head_dim must be in [1, ", kMaxRecordDim, "], got ", head_dim);
  if (rope_dim < 0 || rope_dim >= head_dim)
    fail("KV entry record: rope_dim must be in [0, head_dim = ", head_dim, "), got ", rope_dim);
  const int64_t nope = head_dim - rope_dim;
  if (nope % kFp8KvBlock != 0)
    fail("KV entry record: head_dim - rope_dim = ", head_dim, " - ", rope_dim, " = ", nope,
         " must be a multiple of the FP8 block of ", kFp8KvBlock);
  return {.head_dim = int(head_dim), .rope_dim = int(rope_dim)};
}

IndexerKeyLayout indexer_key_layout(int64_t dim) {
  if (dim <= 0 || dim > kMaxRecordDim) fail("indexer key record: dim must be in [1, ", kMaxRecordDim, "], got ", dim);
  if (dim % kFp4Block != 0)
    fail("indexer key record: dim ", dim, " must be a multiple of the FP4 block of ", kFp4Block);
  return {.dim = int(dim)};
}

void check_layout(const KvEntryLayout& l, const char* what) {
  try {
    kv_entry_layout(l.head_dim, l.rope_dim);
  } catch (const Error& e) {
    fail(what, ": ", e.what());
  }
}

void check_layout(const IndexerKeyLayout& l, const char* what) {
  try {
    indexer_key_layout(l.dim);
  } catch (const Error& e) {
    fail(what, ": ", e.what());
  }
}

}  // namespace dsv4
