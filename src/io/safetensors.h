// safetensors reader: mmap one file, or the shards listed by model.safetensors.index.json.
// Format: u64 little-endian header length N, N bytes of JSON {name: {dtype, shape, data_offsets:[b,e]},
// "__metadata__": {...}}, then the byte buffer; offsets are relative to the buffer start.
#pragma once
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace dsv4 {

struct TensorEntry {
  std::string name;
  std::string file;  // the shard it lives in (for messages)
  TensorView view;   // dtype, shape, data pointer into the mapping, nbytes
};

// Parses and validates a safetensors header against a buffer of `size` bytes starting at `data`
// (the whole file). Checks: header length within the file, valid JSON object, known dtype names,
// integer shapes, byte ranges equal to numel x element size, inside the buffer, not overlapping.
// Throws dsv4::Error naming `file` (and the tensor) on any violation. Entries are sorted by name.
std::vector<TensorEntry> parse_safetensors(const uint8_t* data, size_t size, const std::string& file,
                                           std::map<std::string, std::string>* metadata = nullptr);

// One memory-mapped safetensors file.
class SafetensorsFile {
 public:
  static std::unique_ptr<SafetensorsFile> open(const std::string& path);
  ~SafetensorsFile();
  SafetensorsFile(const SafetensorsFile&) = delete;
  SafetensorsFile& operator=(const SafetensorsFile&) = delete;

  const std::string& path() const { return path_; }
  const std::vector<TensorEntry>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  size_t size() const { return size_; }

 private:
  SafetensorsFile() = default;
  std::string path_;
  void* map_ = nullptr;
  size_t size_ = 0;
  std::vector<TensorEntry> tensors_;
  std::map<std::string, std::string> metadata_;
};

// All tensors of a checkpoint directory: `model.safetensors.index.json` (weight_map name -> shard) if
// present, else every *.safetensors file in the directory; a path to a single .safetensors also works.
// A tensor named in the index but missing from its shard, or present in two files, is an error.
class Checkpoint {
 public:
  static std::unique_ptr<Checkpoint> open(const std::string& path);

  const TensorEntry* find(const std::string& name) const;  // nullptr if absent
  const std::vector<const TensorEntry*>& all() const { return order_; }  // sorted by name
  const std::vector<std::unique_ptr<SafetensorsFile>>& files() const { return files_; }
  uint64_t total_bytes() const;  // sum of tensor payloads

 private:
  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, const TensorEntry*> by_name_;
  std::vector<const TensorEntry*> order_;
};

// Writes tensors to a new safetensors file (used by `dsv4 logits --out` and by tests that build
// malformed/synthetic checkpoints). Views are written in the given order, packed without gaps.
void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, TensorView>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

}  // namespace dsv4
