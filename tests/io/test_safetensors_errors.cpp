// Malformed safetensors files and checkpoints: each must fail with one line naming the file, the tensor
// (where there is one) and what was expected.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/error.h"
#include "io/safetensors.h"
#include "temp_dir.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

// Whether `s` contains `sub`, showing `s` when it does not (gmock's HasSubstr without linking gmock).
::testing::AssertionResult Contains(const std::string& s, const std::string& sub) {
  if (s.find(sub) != std::string::npos) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << "\"" << s << "\"\n  does not contain \"" << sub << "\"";
}

// A file laid out by hand: 8-byte length (`len`, or the header's real length), header text, data.
std::string raw_file(const std::string& header, const std::string& data, std::optional<uint64_t> len = {}) {
  uint64_t n = len ? *len : header.size();
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[size_t(i)] = char(uint8_t(n >> (8 * i)));
  return out + header + data;
}

// The message of the dsv4::Error thrown by opening `path` as a checkpoint ("no error" if none); also
// checks the one-line promise.
std::string open_error(const std::string& path) {
  try {
    Checkpoint::open(path);
  } catch (const Error& e) {
    std::string m = e.what();
    EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    return m;
  }
  return "no error";
}

// Writes a file with this header and `data_bytes` zero bytes of data, then opens it.
class BadHeader : public ::testing::Test {
 protected:
  std::string error_for_text(const std::string& header, size_t data_bytes = 64) {
    tmp_.write("x.safetensors", raw_file(header, std::string(data_bytes, '\0')));
    return open_error(path_);
  }
  std::string error_for(const json& header, size_t data_bytes = 64) {
    return error_for_text(header.dump(), data_bytes);
  }
  test::TempDir tmp_;
  const std::string path_ = tmp_.file("x.safetensors");  // set before any EXPECT_EQ evaluates it
};

json entry(const std::string& dtype, const json& shape, uint64_t b, uint64_t e) {
  return {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {b, e}}};
}

TEST_F(BadHeader, TruncatedAtManyPoints) {
  // A valid file, then every interesting prefix of it.
  const float w[16] = {};
  const std::string good = tmp_.file("good.safetensors");
  write_safetensors(good, {{"layers.0.attn.wq_a.weight",
                            TensorView{DType::F32, {4, 4}, reinterpret_cast<const uint8_t*>(w), sizeof w}}});
  std::ifstream in(good, std::ios::binary);
  const std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t header_end = bytes.size() - sizeof w;
  for (size_t cut : {size_t(0), size_t(1), size_t(7), size_t(8), size_t(12), header_end / 2, header_end - 1, header_end,
                     header_end + 1, bytes.size() - 1}) {
    SCOPED_TRACE(cut);
    const std::string p = tmp_.write("cut.safetensors", bytes.substr(0, cut));
    const std::string m = open_error(p);
    EXPECT_TRUE(Contains(m, p + ": "));
    if (cut < 8)
      EXPECT_EQ(m, p + ": file is " + std::to_string(cut) + " bytes, too short for the 8-byte header length");
    else if (cut < header_end)
      EXPECT_TRUE(Contains(m, "does not fit in the file (" + std::to_string(cut) + " bytes"));
    else
      EXPECT_TRUE(Contains(m,
                           "tensor 'layers.0.attn.wq_a.weight': data_offsets [0, 64] run past the end of the "
                           "data buffer (" +
                               std::to_string(cut - header_end) + " bytes after the header)"));
  }
}

TEST_F(BadHeader, HeaderLength) {
  tmp_.write("x.safetensors", raw_file("{}", "", 1000));
  EXPECT_EQ(open_error(path_), path_ + ": header length 1000 does not fit in the file (10 bytes, so at most 2)");
  tmp_.write("x.safetensors", raw_file("{}", "", 1));
  EXPECT_TRUE(Contains(open_error(path_), ": header length 1 is too small"));
  tmp_.write("x.safetensors", raw_file("{}", "", ~uint64_t(0)));
  EXPECT_TRUE(Contains(open_error(path_), ": header length 18446744073709551615 does not fit in the file"));
  tmp_.write("x.safetensors", "");
  EXPECT_EQ(open_error(path_), path_ + ": file is 0 bytes, too short for the 8-byte header length");
}

TEST_F(BadHeader, NotJson) {
  std::string m = error_for_text("{\"a\": [1, 2}");
  EXPECT_TRUE(Contains(m, path_ + ": header is not valid JSON (at byte "));
  EXPECT_TRUE(Contains(m, "of the 12-byte header)"));
  EXPECT_TRUE(Contains(error_for_text("\x01\x02 binary"), ": header is not valid JSON"));
  EXPECT_TRUE(Contains(error_for_text("{\"a\": 1e999}"), ": header is not valid JSON"));
  EXPECT_TRUE(
      Contains(error_for_text(std::string("{}\0\0", 4), 0), ": header is not valid JSON"));  // padding must be spaces
  EXPECT_EQ(open_error(tmp_.write("y.safetensors", raw_file("{}      ", ""))), "no error");
}

TEST_F(BadHeader, NotAnObject) {
  EXPECT_EQ(error_for_text("[1, 2, 3]"),
            path_ + ": header is a JSON array, expected an object {name: {dtype, shape, data_offsets}}");
  EXPECT_TRUE(Contains(error_for_text("\"text\""), ": header is a JSON string, expected an object"));
  EXPECT_EQ(error_for(json{{"w", 5}}),
            path_ + ": tensor 'w': expected an object {dtype, shape, data_offsets}, found number 5");
}

TEST_F(BadHeader, Dtype) {
  std::string m = error_for(json{{"layers.0.w", entry("F7", {4}, 0, 4)}});
  EXPECT_TRUE(Contains(m, path_ + ": tensor 'layers.0.w': unknown dtype 'F7' (known: F32 F16 BF16"));
  EXPECT_TRUE(Contains(m, "F8_E8M0"));
  json no_dtype = {{"w", {{"shape", {4}}, {"data_offsets", {0, 16}}}}};
  EXPECT_EQ(error_for(no_dtype), path_ + ": tensor 'w': missing 'dtype'");
  EXPECT_EQ(error_for(json{{"w", {{"dtype", 4}, {"shape", {4}}, {"data_offsets", {0, 16}}}}}),
            path_ + ": tensor 'w': 'dtype' must be a string, found number 4");
}

TEST_F(BadHeader, Shape) {
  EXPECT_EQ(error_for(json{{"w", entry("F32", {4, -1}, 0, 16)}}),
            path_ + ": tensor 'w': 'shape' must be an array of non-negative integers, found array [4,-1]");
  EXPECT_TRUE(Contains(error_for(json{{"w", entry("F32", {2.5}, 0, 16)}}), "tensor 'w': 'shape' must be an array"));
  EXPECT_TRUE(Contains(error_for(json{{"w", entry("F32", "4", 0, 16)}}), "found string \"4\""));
  EXPECT_TRUE(Contains(error_for(json{{"w", entry("F32", {uint64_t(1) << 40, uint64_t(1) << 40}, 0, 16)}}),
                       "tensor 'w': shape [1099511627776, 1099511627776] of F32 is too large to address"));
}

TEST_F(BadHeader, SizeMismatch) {
  EXPECT_EQ(error_for(json{{"layers.0.attn.wq_a.weight", entry("F32", {16, 8}, 0, 100)}}, 600),
            path_ +
                ": tensor 'layers.0.attn.wq_a.weight': data_offsets [0, 100] hold 100 bytes but shape [16, 8] "
                "of F32 needs 512");
  // Packed FP4: 5 codes take 3 bytes.
  EXPECT_EQ(error_for(json{{"e", entry("F4", {5}, 0, 2)}}),
            path_ + ": tensor 'e': data_offsets [0, 2] hold 2 bytes but shape [5] of F4 needs 3");
  EXPECT_EQ(error_for(json{{"e", entry("F4", {5}, 0, 3)}}), "no error");
}

TEST_F(BadHeader, Offsets) {
  EXPECT_EQ(error_for(json{{"w", entry("F32", {4}, 60, 76)}}),
            path_ +
                ": tensor 'w': data_offsets [60, 76] run past the end of the data buffer (64 bytes after the "
                "header)");
  EXPECT_EQ(error_for(json{{"w", entry("F32", {4}, 16, 0)}}),
            path_ + ": tensor 'w': data_offsets [16, 0] end before they begin");
  EXPECT_TRUE(Contains(error_for(json{{"w", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0}}}}}),
                       "tensor 'w': 'data_offsets' must be two non-negative integers [begin, end], found array [0]"));
  EXPECT_TRUE(Contains(error_for(json{{"w", {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {-16, 0}}}}}),
                       "tensor 'w': 'data_offsets' must be two non-negative integers"));
  EXPECT_TRUE(
      Contains(error_for(json{{"w", {{"dtype", "F32"}, {"shape", {4}}}}}), "tensor 'w': missing 'data_offsets'"));
  EXPECT_TRUE(
      Contains(error_for(json{{"w", {{"dtype", "F32"}, {"data_offsets", {0, 16}}}}}), "tensor 'w': missing 'shape'"));
}

TEST_F(BadHeader, Overlap) {
  json h = {{"a", entry("F32", {4}, 0, 16)}, {"b", entry("F32", {8}, 16, 48)}, {"c", entry("F32", {2}, 40, 48)}};
  EXPECT_EQ(error_for(h), path_ + ": tensor 'c' data_offsets [40, 48] overlap tensor 'b' data_offsets [16, 48]");
  // A long tensor covering a later short one, with a tensor between them that overlaps neither start.
  json h2 = {{"big", entry("U8", {40}, 0, 40)}, {"mid", entry("U8", {2}, 4, 6)}, {"end", entry("U8", {4}, 40, 44)}};
  EXPECT_TRUE(Contains(error_for(h2), "tensor 'mid' data_offsets [4, 6] overlap tensor 'big' data_offsets [0, 40]"));
  // Same range twice, and empty tensors anywhere (they occupy no bytes).
  EXPECT_TRUE(Contains(error_for(json{{"p", entry("I8", {8}, 0, 8)}, {"q", entry("U8", {8}, 0, 8)}}),
                       "tensor 'q' data_offsets [0, 8] overlap tensor 'p' data_offsets [0, 8]"));
  EXPECT_EQ(error_for(json{{"p", entry("I8", {8}, 0, 8)}, {"e", entry("F32", {0, 3}, 4, 4)}}), "no error");
}

TEST_F(BadHeader, DuplicateNameInHeader) {
  const std::string e = entry("F32", {1}, 0, 4).dump();
  EXPECT_EQ(error_for_text("{\"w\":" + e + ",\"w\":" + e + "}"), path_ + ": tensor 'w' appears twice in the header");
}

TEST_F(BadHeader, Metadata) {
  EXPECT_EQ(error_for(json{{"__metadata__", {{"format", 1}}}}),
            path_ + ": '__metadata__' entry 'format' must be a string, found number 1");
  EXPECT_EQ(error_for(json{{"__metadata__", "pt"}}),
            path_ + ": '__metadata__' must be an object of strings, found string \"pt\"");
}

TEST_F(BadHeader, NamesAreKeptOnOneLine) {
  std::string m = error_for(json{{"bad\nname", entry("F7", {1}, 0, 4)}});
  EXPECT_TRUE(Contains(m, "tensor 'bad\\x0aname': unknown dtype"));
}

TEST_F(BadHeader, ParseBufferDirectly) {
  const std::string bytes = raw_file(json{{"w", entry("BF16", {2}, 0, 4)}}.dump(), "abcd");
  std::map<std::string, std::string> meta;
  auto t = parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size(), "mem", &meta);
  ASSERT_EQ(t.size(), 1u);
  EXPECT_EQ(t[0].file, "mem");
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(t[0].view.data), 4), "abcd");
  EXPECT_THROW(parse_safetensors(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size() - 1, "mem"), Error);
}

// ---- Checkpoints made of several files ----

class BadCheckpoint : public ::testing::Test {
 protected:
  // Writes shard `name` holding F32 tensors of 4 elements with the given names.
  void shard(const std::string& name, const std::vector<std::string>& tensors) {
    std::vector<std::pair<std::string, TensorView>> v;
    for (const auto& t : tensors)
      v.push_back({t, TensorView{DType::F32, {4}, reinterpret_cast<const uint8_t*>(data_), 16}});
    write_safetensors(tmp_.file(name), v);
  }
  void index(const json& weight_map) {
    tmp_.write("model.safetensors.index.json",
               json{{"metadata", {{"total_size", 0}}}, {"weight_map", weight_map}}.dump());
  }
  std::string dir() const { return tmp_.path().string(); }
  std::string index_path() const { return tmp_.file("model.safetensors.index.json"); }

  test::TempDir tmp_;
  float data_[4] = {1, 2, 3, 4};
};

TEST_F(BadCheckpoint, ValidIndexAndShards) {
  shard("model-00001-of-00002.safetensors", {"embed.weight", "layers.0.w"});
  shard("model-00002-of-00002.safetensors", {"head.weight"});
  index({{"embed.weight", "model-00001-of-00002.safetensors"},
         {"layers.0.w", "model-00001-of-00002.safetensors"},
         {"head.weight", "model-00002-of-00002.safetensors"}});
  auto ck = Checkpoint::open(dir());
  EXPECT_EQ(ck->files().size(), 2u);
  ASSERT_EQ(ck->all().size(), 3u);
  EXPECT_EQ(ck->all()[0]->name, "embed.weight");
  EXPECT_EQ(ck->find("head.weight")->file, tmp_.file("model-00002-of-00002.safetensors"));
  EXPECT_EQ(ck->total_bytes(), 48u);
}

TEST_F(BadCheckpoint, ShardsWithoutIndex) {
  shard("b.safetensors", {"y"});
  shard("a.safetensors", {"x"});
  tmp_.write("notes.txt", "not a shard");
  auto ck = Checkpoint::open(dir());
  ASSERT_EQ(ck->files().size(), 2u);
  EXPECT_EQ(ck->files()[0]->path(), tmp_.file("a.safetensors"));  // sorted
  EXPECT_NE(ck->find("y"), nullptr);
}

TEST_F(BadCheckpoint, IndexNamesMissingShard) {
  shard("model-00001-of-00002.safetensors", {"embed.weight"});
  index({{"embed.weight", "model-00001-of-00002.safetensors"}, {"head.weight", "model-00002-of-00002.safetensors"}});
  EXPECT_EQ(open_error(dir()), index_path() +
                                   ": weight_map puts tensor 'head.weight' in shard "
                                   "'model-00002-of-00002.safetensors', but " +
                                   tmp_.file("model-00002-of-00002.safetensors") + " does not exist");
}

TEST_F(BadCheckpoint, IndexNamesMissingTensor) {
  shard("model-00001-of-00001.safetensors", {"embed.weight"});
  index({{"embed.weight", "model-00001-of-00001.safetensors"}, {"head.weight", "model-00001-of-00001.safetensors"}});
  EXPECT_EQ(open_error(dir()), index_path() +
                                   ": weight_map puts tensor 'head.weight' in shard "
                                   "'model-00001-of-00001.safetensors', but that file does not contain it");
}

TEST_F(BadCheckpoint, IndexPointsAtWrongShard) {
  shard("s1.safetensors", {"a"});
  shard("s2.safetensors", {"b"});
  index({{"a", "s2.safetensors"}, {"b", "s2.safetensors"}, {"c", "s1.safetensors"}});
  std::string m = open_error(dir());
  EXPECT_TRUE(Contains(m, "tensor 'a' in shard 's2.safetensors', but that file does not contain it (it is in " +
                              tmp_.file("s1.safetensors") + ")"));
}

TEST_F(BadCheckpoint, DuplicateAcrossShards) {
  shard("a.safetensors", {"x", "layers.3.ffn.gate.bias"});
  shard("b.safetensors", {"layers.3.ffn.gate.bias"});
  EXPECT_EQ(open_error(dir()), dir() + ": tensor 'layers.3.ffn.gate.bias' is in two files: " +
                                   tmp_.file("a.safetensors") + " and " + tmp_.file("b.safetensors"));
  index({{"x", "a.safetensors"}, {"layers.3.ffn.gate.bias", "b.safetensors"}});
  EXPECT_TRUE(Contains(open_error(dir()), "tensor 'layers.3.ffn.gate.bias' is in two files"));
}

TEST_F(BadCheckpoint, BadIndexJson) {
  shard("a.safetensors", {"x"});
  tmp_.write("model.safetensors.index.json", "{\"weight_map\": {\"x\": ");
  EXPECT_TRUE(Contains(open_error(dir()), index_path() + ": malformed JSON at byte "));
  tmp_.write("model.safetensors.index.json", "{\"metadata\": {}}");
  EXPECT_EQ(open_error(dir()),
            index_path() + ": field 'weight_map': expected an object {tensor: shard}, found nothing");
  index({{"x", 3}});
  EXPECT_EQ(open_error(dir()),
            index_path() + ": weight_map entry for tensor 'x': expected a shard file name, found number 3");
}

TEST_F(BadCheckpoint, NothingToOpen) {
  EXPECT_EQ(open_error(dir()), dir() + ": no model.safetensors.index.json and no *.safetensors file in the directory");
  EXPECT_EQ(open_error(tmp_.file("nope")), tmp_.file("nope") + ": no such file or directory");
  fs::create_directory(tmp_.file("d.safetensors"));  // a directory named like a shard is not one
  EXPECT_TRUE(Contains(open_error(dir()), "no *.safetensors file"));
}

TEST_F(BadCheckpoint, CorruptShardIsNamed) {
  shard("a.safetensors", {"x"});
  tmp_.write("b.safetensors", raw_file("[]", ""));
  EXPECT_EQ(open_error(dir()), tmp_.file("b.safetensors") +
                                   ": header is a JSON array, expected an object {name: {dtype, shape, data_offsets}}");
}

}  // namespace
}  // namespace dsv4
