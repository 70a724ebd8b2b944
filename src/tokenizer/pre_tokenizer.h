// The pre-tokenizer of tokenizer.json: a `Sequence` of `Split` steps (regex or literal pattern, any of
// the five delimiter behaviours, optional inversion) and `ByteLevel` (whose byte mapping is implicit
// here, since the tokenizer works on raw bytes; with use_regex it also splits with the GPT-2 pattern,
// with add_prefix_space it prepends a space to each piece that does not start with one). Each step is
// applied to every piece the previous steps produced, exactly like Hugging Face tokenizers.
#pragma once
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "tokenizer/regex.h"

namespace dsv4::tok {

enum class SplitBehavior { Removed, Isolated, MergedWithPrevious, MergedWithNext, Contiguous };

class PreTokenizer {
 public:
  // `j` is the "pre_tokenizer" value (null means: the whole text is one piece). `file` names the
  // source in error messages. Throws dsv4::Error on an unknown type, behaviour or an invalid regex.
  static PreTokenizer from_json(const nlohmann::json& j, const std::string& file);

  // Calls emit(piece) for each non-empty pre-token of `text` (valid UTF-8), in order. The view is only
  // valid during the call.
  void split(std::string_view text, const std::function<void(std::string_view)>& emit) const;

  bool has_byte_level() const { return has_byte_level_; }

 private:
  struct Step {
    std::vector<Regex> regex;  // empty or one pattern (Regex is move-only)
    SplitBehavior behavior = SplitBehavior::Isolated;
    bool invert = false;
    bool add_prefix_space = false;
  };
  void add_step(const nlohmann::json& j, const std::string& where);
  void apply(size_t k, std::string_view piece, const std::function<void(std::string_view)>& emit) const;

  std::vector<Step> steps_;
  bool has_byte_level_ = false;
};

}  // namespace dsv4::tok
