// Scratch directories for checkpoints generated at test time by tools/variant-checkpoint, under the
// build directory (beside the dsv4 binary), removed when the test ends.
#pragma once
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <string>

#include "support/test_paths.h"

namespace dsv4::test {

class VariantDir {
 public:
  VariantDir() {
    static std::atomic<int> counter{0};
    path_ = std::filesystem::path(dsv4_binary()).parent_path() / "variant-checkpoints" /
            (std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~VariantDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  VariantDir(const VariantDir&) = delete;
  VariantDir& operator=(const VariantDir&) = delete;
  // DIR/<name>: a model directory for one generated checkpoint.
  std::string sub(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

}  // namespace dsv4::test
