// safetensors: mmap, header validation, sharded checkpoints, writing.
//
// The header is untrusted input (downloads get truncated, hand-edited indexes go stale), so every
// field is checked before a pointer into the mapping is handed out, and every failure is one line
// naming the file, the tensor and what was expected: a loader that says exactly what is wrong saves
// hours of chasing garbage logits.
#include "io/safetensors.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/error.h"
#include "io/json_text.h"

namespace dsv4 {
namespace {

using json = nlohmann::json;
namespace fs = std::filesystem;

// The format's own limit (the reference reader refuses larger headers): anything bigger is corruption,
// and refusing it early keeps a bad length from making us parse hundreds of MB of tensor bytes as JSON.
constexpr uint64_t kMaxHeaderBytes = 100'000'000;

using json_text::describe;
using json_text::printable;

std::string range_str(uint64_t b, uint64_t e) { return cat('[', b, ", ", e, ']'); }

// Bytes taken by a tensor of `shape` and `bits` per element, packed 4-bit types rounded up to whole
// bytes. False when the count does not fit in 64 bits (such a shape can never match a real file).
bool payload_bytes(const Shape& shape, int bits, uint64_t* out) {
  uint64_t n = 1;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, uint64_t(d), &n)) return false;
  if (n > uint64_t(std::numeric_limits<int64_t>::max())) return false;  // numel() is int64
  uint64_t total_bits;
  if (__builtin_mul_overflow(n, uint64_t(bits), &total_bits)) return false;
  *out = total_bits / 8 + (total_bits % 8 != 0);
  return true;
}

std::string known_dtypes() {
  std::string s;
  for (DType t : {DType::F32, DType::F16, DType::BF16, DType::F64, DType::F8_E4M3, DType::F8_E8M0, DType::F4_E2M1,
                  DType::I8, DType::U8, DType::I16, DType::I32, DType::I64, DType::BOOL})
    s += cat(s.empty() ? "" : " ", dtype_name(t));
  return s;
}

struct Range {
  uint64_t begin, end;
  size_t index;  // into the entry list, for the message
};

// One header entry {dtype, shape, data_offsets}, checked against a data buffer of `buffer_bytes`.
TensorEntry parse_entry(const std::string& file, const std::string& name, const json& v, const uint8_t* buffer,
                        uint64_t buffer_bytes, Range* range) {
  const std::string where = cat(file, ": tensor '", printable(name), "': ");
  if (!v.is_object()) fail(where, "expected an object {dtype, shape, data_offsets}, found ", describe(v));

  auto dt_it = v.find("dtype");
  if (dt_it == v.end()) fail(where, "missing 'dtype'");
  if (!dt_it->is_string()) fail(where, "'dtype' must be a string, found ", describe(*dt_it));
  const auto& dt_name = dt_it->get_ref<const std::string&>();
  std::optional<DType> dtype = dtype_from_name(dt_name);
  if (!dtype) fail(where, "unknown dtype '", printable(dt_name), "' (known: ", known_dtypes(), ")");

  auto sh_it = v.find("shape");
  if (sh_it == v.end()) fail(where, "missing 'shape'");
  if (!sh_it->is_array()) fail(where, "'shape' must be an array of non-negative integers, found ", describe(*sh_it));
  Shape shape;
  for (const json& d : *sh_it) {
    if (!d.is_number_unsigned() || d.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
      fail(where, "'shape' must be an array of non-negative integers, found ", describe(*sh_it));
    shape.push_back(int64_t(d.get<uint64_t>()));
  }

  auto off_it = v.find("data_offsets");
  if (off_it == v.end()) fail(where, "missing 'data_offsets'");
  const json& off = *off_it;
  if (!off.is_array() || off.size() != 2 || !off[0].is_number_unsigned() || !off[1].is_number_unsigned())
    fail(where, "'data_offsets' must be two non-negative integers [begin, end], found ", describe(off));
  uint64_t b = off[0].get<uint64_t>(), e = off[1].get<uint64_t>();
  if (b > e) fail(where, "data_offsets ", range_str(b, e), " end before they begin");

  uint64_t need;
  if (!payload_bytes(shape, dtype_bits(*dtype), &need))
    fail(where, "shape ", shape_str(shape), " of ", dt_name, " is too large to address");
  if (e - b != need)
    fail(where, "data_offsets ", range_str(b, e), " hold ", e - b, " bytes but shape ", shape_str(shape), " of ",
         dt_name, " needs ", need);
  if (e > buffer_bytes)
    fail(where, "data_offsets ", range_str(b, e), " run past the end of the data buffer (", buffer_bytes,
         " bytes after the header)");

  *range = Range{b, e, 0};
  TensorEntry t;
  t.name = name;
  t.file = file;
  t.view.dtype = *dtype;
  t.view.shape = std::move(shape);
  t.view.data = buffer + b;
  t.view.nbytes = size_t(e - b);
  return t;
}

// Reads a whole small text file (the index), or fails naming it.
std::string read_text(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  if (!in) fail(p.string(), ": cannot open (", std::strerror(errno), ")");
  std::ostringstream os;
  os << in.rdbuf();
  return os.str();
}

// model.safetensors.index.json -> weight_map (tensor name -> shard file name).
std::map<std::string, std::string> read_weight_map(const fs::path& index) {
  const std::string file = index.string();
  json j;
  try {
    j = json::parse(read_text(index));
  } catch (const json::parse_error& e) {
    fail(file, ": malformed JSON at byte ", e.byte, ": ", json_text::reason(e));
  } catch (const json::exception& e) {
    fail(file, ": malformed JSON: ", json_text::reason(e));
  }
  if (!j.is_object()) fail(file, ": expected a JSON object with 'weight_map', found ", describe(j));
  auto wm = j.find("weight_map");
  if (wm == j.end()) fail(file, ": field 'weight_map': expected an object {tensor: shard}, found nothing");
  if (!wm->is_object()) fail(file, ": field 'weight_map': expected an object {tensor: shard}, found ", describe(*wm));
  std::map<std::string, std::string> out;
  for (auto it = wm->begin(); it != wm->end(); ++it) {
    if (!it->is_string())
      fail(file, ": weight_map entry for tensor '", printable(it.key()), "': expected a shard file name, found ",
           describe(*it));
    out[it.key()] = it->get<std::string>();
  }
  return out;
}

}  // namespace

std::vector<TensorEntry> parse_safetensors(const uint8_t* data, size_t size, const std::string& file,
                                           std::map<std::string, std::string>* metadata) {
  if (size < 8) fail(file, ": file is ", size, " bytes, too short for the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | data[i];  // little-endian on every host
  if (n < 2) fail(file, ": header length ", n, " is too small (the empty header '{}' is 2 bytes)");
  if (n > size - 8)
    fail(file, ": header length ", n, " does not fit in the file (", size, " bytes, so at most ", size - 8, ")");
  if (n > kMaxHeaderBytes) fail(file, ": header length ", n, " exceeds the format's limit of ", kMaxHeaderBytes);

  // nlohmann stops at a NUL byte as if the input ended there, which would let NUL padding or anything
  // after a NUL through; the format (and its reference reader) allows only JSON and trailing spaces.
  if (const void* nul = std::memchr(data + 8, 0, n))
    fail(file, ": header is not valid JSON: NUL byte at byte ", static_cast<const uint8_t*>(nul) - (data + 8),
         " of the ", n, "-byte header (padding must be spaces)");

  // nlohmann keeps the last of two equal keys silently; a header that names a tensor twice is corrupt,
  // so watch the top-level keys as they are parsed.
  std::set<std::string> seen;
  std::string duplicate;
  auto on_event = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::key && depth == 1 && duplicate.empty() && parsed.is_string()) {
      const auto& k = parsed.get_ref<const std::string&>();
      if (!seen.insert(k).second) duplicate = k;
    }
    return true;
  };
  json h;
  try {
    h = json::parse(data + 8, data + 8 + n, on_event);
  } catch (const json::parse_error& e) {
    fail(file, ": header is not valid JSON (at byte ", e.byte, " of the ", n, "-byte header): ", json_text::reason(e));
  } catch (const json::exception& e) {  // e.g. out_of_range: a number too large for a double
    fail(file, ": header is not valid JSON: ", json_text::reason(e));
  }
  if (!h.is_object())
    fail(file, ": header is a JSON ", h.type_name(), ", expected an object {name: {dtype, shape, data_offsets}}");
  if (!duplicate.empty()) fail(file, ": tensor '", printable(duplicate), "' appears twice in the header");

  const uint8_t* buffer = data + 8 + n;
  const uint64_t buffer_bytes = size - 8 - n;
  std::vector<TensorEntry> out;
  std::vector<Range> ranges;
  for (auto it = h.begin(); it != h.end(); ++it) {  // object keys iterate sorted: entries come out by name
    if (it.key() == "__metadata__") {
      if (!it->is_object()) fail(file, ": '__metadata__' must be an object of strings, found ", describe(*it));
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string())
          fail(file, ": '__metadata__' entry '", printable(m.key()), "' must be a string, found ", describe(*m));
        if (metadata) (*metadata)[m.key()] = m->get<std::string>();
      }
      continue;
    }
    Range r{};
    out.push_back(parse_entry(file, it.key(), *it, buffer, buffer_bytes, &r));
    r.index = out.size() - 1;
    if (r.end > r.begin) ranges.push_back(r);  // an empty tensor occupies no bytes, so overlaps nothing
  }

  // Two tensors sharing bytes would alias silently; sorted by begin, a range overlaps an earlier one
  // exactly when it starts before the furthest end seen so far.
  std::sort(ranges.begin(), ranges.end(), [](const Range& a, const Range& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end != b.end ? a.end < b.end : a.index < b.index;
  });
  for (size_t i = 1, far = 0; i < ranges.size(); ++i) {
    const Range& r = ranges[i];
    if (r.begin < ranges[far].end) {
      const Range& o = ranges[far];
      fail(file, ": tensor '", printable(out[r.index].name), "' data_offsets ", range_str(r.begin, r.end),
           " overlap tensor '", printable(out[o.index].name), "' data_offsets ", range_str(o.begin, o.end));
    }
    if (r.end > ranges[far].end) far = i;
  }
  return out;
}

std::unique_ptr<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) fail(path, ": cannot open (", std::strerror(errno), ")");
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    int err = errno;
    ::close(fd);
    fail(path, ": cannot stat (", std::strerror(err), ")");
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    fail(path, ": not a regular file");
  }
  std::unique_ptr<SafetensorsFile> f(new SafetensorsFile());
  f->path_ = path;
  if (st.st_size > 0) {  // mmap of 0 bytes is EINVAL; an empty file fails the length check below
    void* m = ::mmap(nullptr, size_t(st.st_size), PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);
    if (m == MAP_FAILED) fail(path, ": cannot mmap ", st.st_size, " bytes (", std::strerror(err), ")");
    f->map_ = m;
    f->size_ = size_t(st.st_size);
  } else {
    ::close(fd);
  }
  f->tensors_ = parse_safetensors(static_cast<const uint8_t*>(f->map_), f->size_, path, &f->metadata_);
  return f;
}

SafetensorsFile::~SafetensorsFile() {
  if (map_) ::munmap(map_, size_);
}

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  const fs::file_status st = fs::status(p, ec);
  if (!fs::exists(st)) fail(path, ": no such file or directory");
  auto ck = std::make_unique<Checkpoint>();

  // tensor name -> shard file name, when an index says where each tensor lives
  std::map<std::string, std::string> weight_map;
  const fs::path index = p / "model.safetensors.index.json";
  if (!fs::is_directory(st)) {
    ck->files_.push_back(SafetensorsFile::open(path));
  } else if (fs::exists(index)) {
    weight_map = read_weight_map(index);
    std::map<std::string, std::string> first_tensor;  // shard -> a tensor that names it (for the message)
    for (const auto& [name, shard] : weight_map) first_tensor.emplace(shard, name);
    for (const auto& [shard, name] : first_tensor) {
      const fs::path sp = p / shard;
      if (!fs::exists(sp))
        fail(index.string(), ": weight_map puts tensor '", printable(name), "' in shard '", printable(shard), "', but ",
             sp.string(), " does not exist");
      ck->files_.push_back(SafetensorsFile::open(sp.string()));
    }
  } else {
    std::vector<fs::path> shards;
    for (const auto& de : fs::directory_iterator(p, ec))
      if (de.path().extension() == ".safetensors" && de.is_regular_file()) shards.push_back(de.path());
    if (ec) fail(path, ": cannot list directory (", ec.message(), ")");
    if (shards.empty()) fail(path, ": no model.safetensors.index.json and no *.safetensors file in the directory");
    std::sort(shards.begin(), shards.end());
    for (const auto& s : shards) ck->files_.push_back(SafetensorsFile::open(s.string()));
  }

  for (const auto& f : ck->files_) {
    for (const TensorEntry& t : f->tensors()) {
      auto [it, fresh] = ck->by_name_.emplace(t.name, &t);
      if (!fresh) fail(path, ": tensor '", printable(t.name), "' is in two files: ", it->second->file, " and ", t.file);
    }
  }
  for (const auto& [name, shard] : weight_map) {
    auto it = ck->by_name_.find(name);
    const std::string shard_path = (p / shard).string();
    if (it == ck->by_name_.end() || it->second->file != shard_path)
      fail(index.string(), ": weight_map puts tensor '", printable(name), "' in shard '", printable(shard),
           "', but that file does not contain it",
           it == ck->by_name_.end() ? std::string() : cat(" (it is in ", it->second->file, ")"));
  }
  for (const auto& kv : ck->by_name_) ck->order_.push_back(kv.second);
  return ck;
}

const TensorEntry* Checkpoint::find(const std::string& name) const {
  auto it = by_name_.find(name);
  return it == by_name_.end() ? nullptr : it->second;
}

uint64_t Checkpoint::total_bytes() const {
  uint64_t n = 0;
  for (const TensorEntry* t : order_) n += t->view.nbytes;
  return n;
}

void write_safetensors(const std::string& path, const std::vector<std::pair<std::string, TensorView>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  json h = json::object();
  uint64_t offset = 0;
  for (const auto& [name, v] : tensors) {
    const std::string where = cat(path, ": cannot write tensor '", printable(name), "': ");
    if (name == "__metadata__" || h.contains(name)) fail(where, "the name is reserved or already used");
    for (int64_t d : v.shape)
      if (d < 0) fail(where, "negative dimension in shape ", shape_str(v.shape));
    uint64_t need;
    if (!payload_bytes(v.shape, dtype_bits(v.dtype), &need) || need != v.nbytes)
      fail(where, "the view holds ", v.nbytes, " bytes but shape ", shape_str(v.shape), " of ", dtype_name(v.dtype),
           " needs ", need);
    if (need > 0 && !v.data) fail(where, "the view has no data");
    h[name] = {
        {"dtype", std::string(dtype_name(v.dtype))}, {"shape", v.shape}, {"data_offsets", {offset, offset + need}}};
    offset += need;
  }
  if (!metadata.empty()) h["__metadata__"] = metadata;
  std::string header = h.dump(-1, ' ', false, json::error_handler_t::replace);
  header.append((8 - header.size() % 8) % 8, ' ');  // keeps the data buffer 8-byte aligned

  // Write beside the target and rename, so a reader that has the old file mapped never sees it shrink.
  const std::string tmp = cat(path, ".tmp.", ::getpid());
  std::FILE* out = std::fopen(tmp.c_str(), "wb");
  if (!out) fail(path, ": cannot create ", tmp, " (", std::strerror(errno), ")");
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(uint64_t(header.size()) >> (8 * i));
  bool ok = std::fwrite(len, 1, 8, out) == 8 && std::fwrite(header.data(), 1, header.size(), out) == header.size();
  for (const auto& [name, v] : tensors)
    if (ok && v.nbytes) ok = std::fwrite(v.data, 1, v.nbytes, out) == v.nbytes;
  int err = ok ? 0 : errno;
  if (std::fclose(out) != 0 && ok) {
    ok = false;
    err = errno;
  }
  if (ok && std::rename(tmp.c_str(), path.c_str()) != 0) {
    ok = false;
    err = errno;
  }
  if (!ok) {
    std::remove(tmp.c_str());
    fail(path, ": cannot write (", std::strerror(err), ")");
  }
}

}  // namespace dsv4
