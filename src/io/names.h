// The one name table: how checkpoint tensor names map to dsv4's canonical names (the published
// DeepSeek names: `embed.weight`, `layers.N.attn.wq_a.weight` + `.scale`, `mtp.K.*`, ...).
// Variants accepted (DESIGN.md): a `model.` prefix, `embed_tokens`, `hc_head.hc_fn|hc_base|hc_scale`,
// `.weight_scale_inv` for `.scale`, `gate.e_score_correction_bias` for `gate.bias`, and
// `layers.N.attn.norm.weight` for the main attention's `kv_norm`.
#pragma once
#include <string>

namespace dsv4::names {

// Canonical form of a checkpoint tensor name (identity for published names).
std::string canonical(const std::string& name);

// Builders for canonical names, so no name is spelled out at its use.
std::string layer(int i, const std::string& rest);  // "layers.<i>.<rest>"
std::string mtp(int k, const std::string& rest);    // "mtp.<k>.<rest>"

}  // namespace dsv4::names
