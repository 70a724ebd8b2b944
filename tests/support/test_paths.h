// Paths the tests use: the shared/ folder with the golden fixtures, the project root, the dsv4 binary.
#pragma once
#include <string>

namespace dsv4::test {

std::string shared_dir();                         // ../shared (or $DSV4_SHARED)
std::string fixture_dir(const std::string& name); // shared/fixtures/<name>
std::string source_dir();                         // the project root (or $DSV4_SOURCE_DIR: a copy elsewhere)
std::string bundled_model_dir();                  // source_dir()/models/tiny-shakespeare
std::string dsv4_binary();                        // the built dsv4 executable
bool have_shared();                               // shared/fixtures exists

}  // namespace dsv4::test
