# Turns the chat page's files into C++ byte arrays (cmake -P, run by the build when a file changes):
#   cmake -DWEBUI_DIR=src/server/webui -DOUT=build/.../webui_assets.cpp -DFILES="index.html;app.js" -P embed.cmake
# The generated file defines webui_assets() of server/webui_assets.h. Bytes, not string literals, so that
# any file content (quotes, backslashes, non-ASCII) is carried exactly.
set(_arrays "")
set(_entries "")
set(_n 0)
string(REPEAT "0x[0-9a-f][0-9a-f]," 32 _row)  # CMake's regular expressions have no {n}
foreach(_name IN LISTS FILES)
  file(READ "${WEBUI_DIR}/${_name}" _hex HEX)
  string(LENGTH "${_hex}" _len)
  math(EXPR _size "${_len} / 2")
  # 0x..,0x..,... with a line break every 32 bytes (64 hex digits) to keep lines short.
  string(REGEX REPLACE "([0-9a-f][0-9a-f])" "0x\\1," _bytes "${_hex}")
  string(REGEX REPLACE "(${_row})" "\\1\n" _bytes "${_bytes}")
  # A trailing 0 keeps an empty file's array legal; the size excludes it.
  string(APPEND _arrays "const unsigned char file${_n}[] = {\n${_bytes}0};\n")
  string(APPEND _entries "      {\"${_name}\", {reinterpret_cast<const char*>(file${_n}), ${_size}}},\n")
  math(EXPR _n "${_n} + 1")
endforeach()
file(WRITE "${OUT}" "// Generated from src/server/webui/ by src/server/webui/embed.cmake: do not edit.
#include \"server/webui_assets.h\"

namespace dsv4::server {
namespace {
${_arrays}}  // namespace

const std::vector<WebAsset>& webui_assets() {
  static const std::vector<WebAsset> table = {
${_entries}  };
  return table;
}

}  // namespace dsv4::server
")
