// Scratch directories for checkpoints generated at test time by tools/variant-checkpoint: under the
// build directory (beside the dsv4 binary, build/variant-checkpoints/), removed when the test ends.
#pragma once
#include <filesystem>
#include <string>

#include "io/temp_dir.h"
#include "support/test_paths.h"

namespace dsv4::test {

class VariantDir {
 public:
  VariantDir() : dir_(std::filesystem::path(dsv4_binary()).parent_path() / "variant-checkpoints", "") {}
  // DIR/<name>: a model directory for one generated checkpoint.
  std::string sub(const std::string& name) const { return dir_.file(name); }

 private:
  TempDir dir_;
};

}  // namespace dsv4::test
