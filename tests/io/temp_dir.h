// A scratch directory for one test (in the system's temp directory unless told otherwise), removed with everything in it when the test ends. The name holds
// the pid and a counter, because ctest runs each test in its own process, possibly in parallel.
#pragma once
#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <string>

namespace dsv4::test {

class TempDir {
 public:
  // A fresh directory under `parent` (default: the system's temp directory).
  explicit TempDir(const std::filesystem::path& parent = std::filesystem::temp_directory_path(),
                   const std::string& prefix = "dsv4_io_") {
    static std::atomic<int> counter{0};
    path_ = parent / (prefix + std::to_string(::getpid()) + "_" + std::to_string(counter++));
    std::filesystem::remove_all(path_);
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::filesystem::path& path() const { return path_; }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

  // Writes raw bytes to path()/name and returns the full path.
  std::string write(const std::string& name, const std::string& bytes) const {
    std::ofstream out(file(name), std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), std::streamsize(bytes.size()));
    return file(name);
  }

 private:
  std::filesystem::path path_;
};

}  // namespace dsv4::test
