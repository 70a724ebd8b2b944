// Bad tokenizer files: each gets one clear, one-line dsv4::Error naming the field.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/error.h"
#include "support/test_paths.h"
#include "tiny_json.h"
#include "tokenizer/tokenizer.h"

namespace {

using dsv4::Tokenizer;
using nlohmann::json;

// The message of the dsv4::Error that loading `text` throws ("" when it loads).
std::string load_error(const std::string& text, const std::string& config = "") {
  try {
    Tokenizer::from_json(text, config, "tok/tokenizer.json");
  } catch (const dsv4::Error& e) {
    return e.what();
  }
  return "";
}

void expect_error(const std::string& text, const std::string& needle, const std::string& config = "") {
  std::string msg = load_error(text, config);
  EXPECT_NE(msg.find(needle), std::string::npos) << "message: " << msg;
  EXPECT_EQ(msg.find('\n'), std::string::npos) << "not one line: " << msg;
}

TEST(TokenizerErrors, ValidTinyFileLoads) { EXPECT_EQ(load_error(dsv4::test::tiny_tokenizer_json().dump()), ""); }

TEST(TokenizerErrors, MalformedJson) {
  expect_error("{\"model\": {", "tok/tokenizer.json: malformed JSON");
  expect_error("[1, 2]", "expected a JSON object");
  expect_error("", "malformed JSON");
}

TEST(TokenizerErrors, UnknownModelType) {
  json j = dsv4::test::tiny_tokenizer_json();
  j["model"]["type"] = "WordPiece";
  expect_error(j.dump(), "model.type: unsupported model type \"WordPiece\"");
  j.erase("model");
  expect_error(j.dump(), "model: missing");
}

TEST(TokenizerErrors, UnknownPreTokenizerType) {
  json j = dsv4::test::tiny_tokenizer_json();
  j["pre_tokenizer"]["pretokenizers"][1] = {{"type", "Metaspace"}};
  expect_error(j.dump(), "pre_tokenizer[1]: unsupported pre-tokenizer type \"Metaspace\"");
  j["pre_tokenizer"] = {{"type", "Split"}, {"pattern", {{"Regex", "a"}}}, {"behavior", "Isolated"}};
  expect_error(j.dump(), "no ByteLevel step");
}

TEST(TokenizerErrors, InvalidRegex) {
  json j = dsv4::test::tiny_tokenizer_json();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(\\p{N}";
  expect_error(j.dump(), "pre_tokenizer[0]: invalid regex /(\\p{N}/");
  j = dsv4::test::tiny_tokenizer_json();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "\\p{NotAProperty}";
  expect_error(j.dump(), "invalid regex");
}

TEST(TokenizerErrors, BadSplitBehaviorAndPattern) {
  json j = dsv4::test::tiny_tokenizer_json();
  j["pre_tokenizer"]["pretokenizers"][0]["behavior"] = "Sideways";
  expect_error(j.dump(), "unknown split behavior \"Sideways\"");
  j = dsv4::test::tiny_tokenizer_json();
  j["pre_tokenizer"]["pretokenizers"][0]["pattern"] = "\\d";
  expect_error(j.dump(), "pre_tokenizer[0].pattern");
}

TEST(TokenizerErrors, FieldOfTheWrongType) {
  json j = dsv4::test::tiny_tokenizer_json();
  j["pre_tokenizer"]["pretokenizers"][0]["invert"] = "yes";
  expect_error(j.dump(), "tok/tokenizer.json: unexpected JSON content");
  j = dsv4::test::tiny_tokenizer_json();
  j["model"]["type"] = 7;
  expect_error(j.dump(), "tok/tokenizer.json");
  j = dsv4::test::tiny_tokenizer_json();
  j["added_tokens"][0]["special"] = "true";
  expect_error(j.dump(), "added_tokens[0].special: expected true or false");
}

TEST(TokenizerErrors, BadVocabularyAndMerges) {
  json j = dsv4::test::tiny_tokenizer_json();
  j["model"]["merges"].push_back("zz q");
  expect_error(j.dump(), "model.merges[3]: \"zz\" is not in the vocabulary");
  j = dsv4::test::tiny_tokenizer_json();
  j["model"]["merges"].push_back("a h");
  expect_error(j.dump(), "merged token \"ah\" is not in the vocabulary");
  j = dsv4::test::tiny_tokenizer_json();
  j["model"]["merges"].push_back("nospace");
  expect_error(j.dump(), "expected \"LEFT RIGHT\"");
  j = dsv4::test::tiny_tokenizer_json();
  j["model"]["vocab"]["bad"] = "seven";
  expect_error(j.dump(), "model.vocab[\"bad\"]: expected a non-negative integer id");
  j = dsv4::test::tiny_tokenizer_json();
  j["added_tokens"][0].erase("content");
  expect_error(j.dump(), "added_tokens[0]");
}

TEST(TokenizerErrors, UnsupportedNormalizerAndDecoder) {
  json j = dsv4::test::tiny_tokenizer_json();
  j["normalizer"] = {{"type", "NFKC"}};
  expect_error(j.dump(), "normalizer: unsupported normalizer NFKC");
  j = dsv4::test::tiny_tokenizer_json();
  j["decoder"] = {{"type", "WordPiece"}};
  expect_error(j.dump(), "decoder: unsupported decoder \"WordPiece\"");
}

TEST(TokenizerErrors, BadConfig) {
  const std::string tj = dsv4::test::tiny_tokenizer_json().dump();
  expect_error(tj, "tok/tokenizer_config.json: malformed JSON", "{bos");
  expect_error(tj, "bos_token \"<nope>\" is not a token", R"({"bos_token": "<nope>"})");
  EXPECT_EQ(load_error(tj, R"({"bos_token": {"content": "<a>"}, "eos_token": "<x>", "pad_token": null})"), "");
  Tokenizer t = Tokenizer::from_json(tj, R"({"bos_token": {"content": "<a>"}, "eos_token": "<x>"})");
  EXPECT_EQ(t.bos_id(), t.token_id("<a>"));
  EXPECT_EQ(t.eos_id(), t.token_id("<x>"));
  EXPECT_FALSE(t.pad_id());
}

TEST(TokenizerErrors, MissingFiles) {
  auto dir = std::filesystem::temp_directory_path() / "dsv4_tok_missing_dir";
  std::filesystem::create_directories(dir);
  try {
    Tokenizer::load(dir);
    FAIL() << "expected an error";
  } catch (const dsv4::Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json: not found"), std::string::npos) << e.what();
  }
  std::ofstream(dir / "tokenizer.json") << "{ not json";
  try {
    Tokenizer::load(dir);
    FAIL() << "expected an error";
  } catch (const dsv4::Error& e) {
    EXPECT_NE(std::string(e.what()).find("malformed JSON"), std::string::npos) << e.what();
  }
  std::filesystem::remove_all(dir);
}

}  // namespace
