#include "runtime/prefix_reuse.h"

#include <algorithm>

#include "core/error.h"

namespace dsv4 {

PromptPrefix::PromptPrefix(PrefixCache& cache, Runner& runner, int slot, std::span<const int32_t> prompt,
                           PrefixSnapshots policy)
    : cache_(cache), runner_(runner), slot_(slot), place_(runner.rank_of(slot)), hit_(cache.lookup(prompt, place_)) {
  if (hit_.snapshot) runner_.restore(slot_, *hit_.snapshot);
  points_ = snapshot_points(int64_t(prompt.size()), hit_, policy);
}

bool PromptPrefix::reached(std::span<const int32_t> prompt, int64_t pos, int64_t mtp_pos,
                           const std::function<std::shared_ptr<const Tensor>()>& carry) {
  if (!std::binary_search(points_.begin(), points_.end(), pos)) return false;
  if (pos > int64_t(prompt.size())) fail("prefix cache: position ", pos, " past a prompt of ", prompt.size(), " tokens");
  return cache_.insert(prompt.first(size_t(pos)), runner_.snapshot(slot_, pos, mtp_pos), carry ? carry() : nullptr,
                       place_);
}

}  // namespace dsv4
