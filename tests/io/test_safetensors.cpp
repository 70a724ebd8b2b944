// Reading the real fixture checkpoints, and write_safetensors -> read round trips.
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "io/safetensors.h"
#include "support/test_paths.h"
#include "temp_dir.h"

namespace dsv4 {
namespace {

namespace fs = std::filesystem;

#define REQUIRE_SHARED() \
  if (!test::have_shared()) GTEST_SKIP() << "no shared/fixtures folder"

// The first bytes of a tensor, as hex (what `xxd` shows): checks the data pointer, independent of any
// decoder. The expected strings were read from the files with a separate script.
std::string head_hex(const TensorEntry& t, size_t n = 8) {
  static const char* digits = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n && i < t.view.nbytes; ++i) {
    s += digits[t.view.data[i] >> 4];
    s += digits[t.view.data[i] & 15];
  }
  return s;
}

// The byte count after the header, read independently of the parser.
uint64_t data_buffer_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  uint8_t len[8] = {};
  in.read(reinterpret_cast<char*>(len), 8);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | len[i];
  return fs::file_size(path) - 8 - n;
}

const TensorEntry& get(const Checkpoint& ck, const std::string& name) {
  const TensorEntry* t = ck.find(name);
  if (!t) throw std::runtime_error("tensor not found: " + name);
  return *t;
}

void expect_tensor(const Checkpoint& ck, const std::string& name, DType dtype, const Shape& shape,
                   const std::string& hex) {
  SCOPED_TRACE(name);
  const TensorEntry* t = ck.find(name);
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(dtype_name(t->view.dtype), dtype_name(dtype));
  EXPECT_EQ(t->view.shape, shape);
  EXPECT_EQ(head_hex(*t), hex);
}

void expect_sorted_and_whole(const Checkpoint& ck, const std::string& file, size_t count) {
  ASSERT_EQ(ck.all().size(), count);
  for (size_t i = 1; i < ck.all().size(); ++i) EXPECT_LT(ck.all()[i - 1]->name, ck.all()[i]->name);
  // These files pack tensors without gaps, so the payloads add up to the whole data buffer.
  EXPECT_EQ(ck.total_bytes(), data_buffer_bytes(file));
  for (const TensorEntry* t : ck.all()) {
    EXPECT_EQ(t->file, file);
    EXPECT_EQ(int64_t(t->view.nbytes), t->view.numel() * dtype_bits(t->view.dtype) / 8) << t->name;
  }
}

TEST(SafetensorsFixtures, TinyQOfficialFormat) {
  REQUIRE_SHARED();
  const std::string dir = test::fixture_dir("tiny-q") + "/model";
  auto ck = Checkpoint::open(dir);
  ASSERT_EQ(ck->files().size(), 1u);
  EXPECT_EQ(ck->files()[0]->metadata().at("format"), "pt");
  expect_sorted_and_whole(*ck, dir + "/model.safetensors", 427);
  expect_tensor(*ck, "layers.0.attn.wq_a.weight", DType::F8_E4M3, {128, 256}, "f0e2576c4461c1e3");
  expect_tensor(*ck, "layers.0.attn.wq_a.scale", DType::F8_E8M0, {1, 2}, "7575");
  expect_tensor(*ck, "layers.0.ffn.experts.0.w1.weight", DType::I8, {256, 128}, "2b63216350c251c0");
  expect_tensor(*ck, "layers.0.ffn.experts.0.w1.scale", DType::F8_E8M0, {256, 8}, "7a7a7a7b7a7a7a7a");
  expect_tensor(*ck, "layers.0.ffn.gate.tid2eid", DType::I64, {512, 2}, "0600000000000000");
  expect_tensor(*ck, "embed.weight", DType::BF16, {512, 256}, "1e3f743fe73f983f");
  expect_tensor(*ck, "mtp.0.e_proj.weight", DType::F8_E4M3, {256, 256}, "eed8d9e2d6675b3a");
  expect_tensor(*ck, "hc_head_fn", DType::F32, {4, 1024}, "a1c382bc699e033d");
  expect_tensor(*ck, "layers.1.attn.attn_sink", DType::F32, {4}, "7bb9d43dd65dcdbe");
  EXPECT_EQ(ck->find("layers.0.attn.nonexistent"), nullptr);
  // The e8m0 scale byte 0x75 decodes to 2^(0x75 - 127) = 2^-10.
  float s;
  to_f32(DType::F8_E8M0, get(*ck, "layers.0.attn.wq_a.scale").view.data, 0, 1, &s);
  EXPECT_EQ(s, 1.0f / 1024);
}

TEST(SafetensorsFixtures, TinyQWideAndShakespeareFp8) {
  REQUIRE_SHARED();
  auto wide = Checkpoint::open(test::fixture_dir("tiny-q-wide") + "/model");
  EXPECT_EQ(wide->all().size(), 427u);
  EXPECT_EQ(get(*wide, "layers.0.attn.wq_a.weight").view.dtype, DType::F8_E4M3);

  const std::string dir = test::fixture_dir("tiny-shakespeare-fp8") + "/model";
  auto ck = Checkpoint::open(dir);
  expect_sorted_and_whole(*ck, dir + "/model.safetensors", 498);
  expect_tensor(*ck, "layers.2.attn.wq_a.weight", DType::F8_E4M3, {128, 256}, "63e5ee6358e2d95f");
  expect_tensor(*ck, "layers.2.attn.wq_a.scale", DType::F8_E8M0, {1, 2}, "7474");
  expect_tensor(*ck, "layers.0.ffn.experts.7.w2.weight", DType::I8, {256, 64}, "02c92a003a22d090");
  expect_tensor(*ck, "layers.0.ffn.experts.7.w2.scale", DType::F8_E8M0, {256, 4}, "7a79797979797979");
}

TEST(SafetensorsFixtures, TransformersNumericsModels) {
  REQUIRE_SHARED();
  const std::string a = test::fixture_dir("tiny-a") + "/model";
  auto ck = Checkpoint::open(a);
  expect_sorted_and_whole(*ck, a + "/model.safetensors", 304);
  expect_tensor(*ck, "embed.weight", DType::BF16, {512, 128}, "c3bf40bf27bfcebf");
  expect_tensor(*ck, "layers.0.ffn.gate.tid2eid", DType::I32, {512, 2}, "0700000000000000");
  expect_tensor(*ck, "layers.0.attn.wq_a.weight", DType::BF16, {64, 128}, "053e893d2abe0cbe");
  expect_tensor(*ck, "hc_head_fn", DType::F32, {4, 512}, "0a5593bdc01e3d3e");

  // A path to the file itself works as well as its directory.
  const std::string b = test::fixture_dir("tiny-b") + "/model/model.safetensors";
  auto ckb = Checkpoint::open(b);
  expect_sorted_and_whole(*ckb, b, 323);
  expect_tensor(*ckb, "embed.weight", DType::BF16, {1000, 192}, "85bf6b3fa7bf8ebf");
  expect_tensor(*ckb, "layers.0.ffn.gate.tid2eid", DType::I32, {1000, 3}, "000000000a000000");
}

TEST(SafetensorsFixtures, BundledShakespeare) {
  REQUIRE_SHARED();
  const std::string dir = test::shared_dir() + "/models/tiny-shakespeare";
  auto ck = Checkpoint::open(dir);
  expect_sorted_and_whole(*ck, dir + "/model.safetensors", 304);
  expect_tensor(*ck, "embed.weight", DType::BF16, {1026, 256}, "e93a7b3bf9bcb13c");
  expect_tensor(*ck, "layers.0.ffn.gate.tid2eid", DType::I64, {1026, 2}, "0400000000000000");
  expect_tensor(*ck, "layers.0.attn.wq_a.weight", DType::BF16, {128, 256}, "43bc0e3d543c4fbc");
}

TEST(SafetensorsFixtures, GoldenFiles) {
  REQUIRE_SHARED();
  struct Case {
    std::string fixture;
    size_t count;
  };
  for (const Case& c : {Case{"tiny-a", 14}, Case{"tiny-b", 13}, Case{"tiny-q", 9}, Case{"tiny-q-wide", 9},
                        Case{"tiny-shakespeare-fp8", 5}}) {
    SCOPED_TRACE(c.fixture);
    const std::string file = test::fixture_dir(c.fixture) + "/golden.safetensors";
    auto ck = Checkpoint::open(file);
    expect_sorted_and_whole(*ck, file, c.count);
    const TensorEntry& ids = get(*ck, "input_ids");
    EXPECT_EQ(ids.view.dtype, DType::I32);
    EXPECT_EQ(ids.view.shape.size(), 1u);
  }
  auto a = Checkpoint::open(test::fixture_dir("tiny-a") + "/golden.safetensors");
  expect_tensor(*a, "input_ids", DType::I32, {200}, "cb00000053010000");
  expect_tensor(*a, "hidden_0", DType::F32, {200, 4, 128}, "000093be000015be");
  expect_tensor(*a, "logits_full", DType::F32, {200, 512}, "35891b3f0eef98bf");
  auto q = Checkpoint::open(test::fixture_dir("tiny-q") + "/golden.safetensors");
  expect_tensor(*q, "mtp_streams", DType::F32, {159, 4, 256}, "0000c4be000030be");
  expect_tensor(*q, "logits_steps", DType::F32, {91, 512}, "c29992bf5f6e14bf");
}

// The checkpoint shipped in the repository (no shared/ needed).
TEST(SafetensorsFixtures, RepositoryModel) {
  const std::string dir = test::bundled_model_dir();
  if (!fs::exists(dir + "/model.safetensors")) GTEST_SKIP() << "no bundled model";
  auto ck = Checkpoint::open(dir);
  EXPECT_EQ(ck->all().size(), 304u + 53u);  // the main model, then its trained MTP block mtp.0.*
  EXPECT_EQ(get(*ck, "embed.weight").view.shape, (Shape{1026, 256}));
  EXPECT_EQ(get(*ck, "mtp.0.e_proj.weight").view.shape, (Shape{256, 256}));
}

TEST(SafetensorsWrite, RoundTrip) {
  test::TempDir tmp;
  const float f32[6] = {1.5f, -2.0f, 0.0f, 3.25f, -0.5f, 1e-3f};
  const uint16_t bf16[4] = {0x3f80, 0xbf80, 0x4000, 0x0000};
  const uint8_t fp4[3] = {0x21, 0x43, 0x05};  // 5 codes, packed two per byte: 3 bytes
  const int8_t i8[2] = {-1, 7};
  std::vector<std::pair<std::string, TensorView>> in = {
      {"z.f32", TensorView{DType::F32, {2, 3}, reinterpret_cast<const uint8_t*>(f32), sizeof f32}},
      {"a.bf16", TensorView{DType::BF16, {4}, reinterpret_cast<const uint8_t*>(bf16), sizeof bf16}},
      {"m.fp4", TensorView{DType::F4_E2M1, {5}, fp4, sizeof fp4}},
      {"m.empty", TensorView{DType::F32, {0, 7}, nullptr, 0}},
      {"b.i8", TensorView{DType::I8, {1, 2}, reinterpret_cast<const uint8_t*>(i8), sizeof i8}},
  };
  const std::string path = tmp.file("out.safetensors");
  write_safetensors(path, in, {{"format", "pt"}, {"producer", "dsv4 test"}});

  // Header length is a multiple of 8, so the data buffer starts 8-byte aligned.
  std::ifstream raw(path, std::ios::binary);
  uint8_t len[8];
  raw.read(reinterpret_cast<char*>(len), 8);
  EXPECT_EQ(len[0] % 8, 0);

  auto f = SafetensorsFile::open(path);
  EXPECT_EQ(f->metadata().at("producer"), "dsv4 test");
  ASSERT_EQ(f->tensors().size(), in.size());
  EXPECT_EQ(f->tensors()[0].name, "a.bf16");  // sorted by name
  auto ck = Checkpoint::open(path);
  for (const auto& [name, v] : in) {
    SCOPED_TRACE(name);
    const TensorEntry& t = get(*ck, name);
    EXPECT_EQ(t.view.dtype, v.dtype);
    EXPECT_EQ(t.view.shape, v.shape);
    ASSERT_EQ(t.view.nbytes, v.nbytes);
    if (v.nbytes) {
      EXPECT_EQ(std::memcmp(t.view.data, v.data, v.nbytes), 0);
    }
  }
  EXPECT_EQ(ck->total_bytes(), sizeof f32 + sizeof bf16 + sizeof fp4 + sizeof i8);

  // Overwriting a file that is still mapped must not disturb the mapping (write goes through a rename).
  write_safetensors(path, {in[4]});
  EXPECT_EQ(std::memcmp(get(*ck, "z.f32").view.data, f32, sizeof f32), 0);
  EXPECT_EQ(Checkpoint::open(path)->all().size(), 1u);
  EXPECT_FALSE(fs::exists(path + ".tmp." + std::to_string(::getpid())));
}

TEST(SafetensorsWrite, EmptyFileHasEmptyHeader) {
  test::TempDir tmp;
  const std::string path = tmp.file("empty.safetensors");
  write_safetensors(path, {});
  auto f = SafetensorsFile::open(path);
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_EQ(f->size() % 8, 0u);
}

TEST(SafetensorsWrite, RejectsInconsistentViews) {
  test::TempDir tmp;
  const float x[4] = {};
  const std::string path = tmp.file("bad.safetensors");
  auto msg = [&](std::vector<std::pair<std::string, TensorView>> t) {
    try {
      write_safetensors(path, t);
    } catch (const Error& e) {
      return std::string(e.what());
    }
    return std::string("no error");
  };
  const auto* p = reinterpret_cast<const uint8_t*>(x);
  EXPECT_EQ(msg({{"w", TensorView{DType::F32, {2, 3}, p, 16}}}),
            path + ": cannot write tensor 'w': the view holds 16 bytes but shape [2, 3] of F32 needs 24");
  EXPECT_NE(msg({{"w", TensorView{DType::F32, {4}, p, 16}}, {"w", TensorView{DType::F32, {4}, p, 16}}})
                .find("tensor 'w': the name is reserved or already used"),
            std::string::npos);
  EXPECT_NE(msg({{"__metadata__", TensorView{DType::F32, {4}, p, 16}}}).find("reserved"), std::string::npos);
  EXPECT_FALSE(fs::exists(path));
}

}  // namespace
}  // namespace dsv4
