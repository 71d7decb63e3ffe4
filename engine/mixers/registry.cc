#include "engine/mixers/registry.h"

#include <stdexcept>

#include "engine/ffn.h"
#include "engine/mixers/aft/aft.h"
#include "engine/mixers/attention/attention.h"
#include "engine/mixers/extractors/extractors.h"
#include "engine/mixers/linear/linear.h"
#include "engine/mixers/retnet/retnet.h"
#include "engine/mixers/rwkv/rwkv.h"

namespace mixserve {

namespace {
// One row per line.
// clang-format off
constexpr MixerKindInfo kMixers[] = {
    // kind, config name, layer keys, window default, always rotates, weights, state, cost, CPU part
    {MixerKind::kAttention, "attention", {"heads", "rope", "rope_base"}, 0, false, attention_weights, attention_state, attention_cost, make_cpu_attention},
    {MixerKind::kAftSimple, "aft_simple", {}, 0, false, aft_weights, aft_state, aft_cost, make_cpu_aft},
    {MixerKind::kAftLocal, "aft_local", {"window"}, 32, false, aft_weights, aft_state, aft_cost, make_cpu_aft},
    {MixerKind::kAftFull, "aft_full", {}, 0, false, aft_weights, aft_state, aft_cost, make_cpu_aft},
    {MixerKind::kRetnet, "retnet", {"heads", "rope_base", "gn_eps", "value_dim", "rope_style", "group_norm", "decay_normalize", "gn_weight"}, 0, true, retnet_weights, retnet_state, retnet_cost, make_cpu_retnet},
    {MixerKind::kShe, "she", {"window", "out_proj"}, 0, false, extractor_weights, extractor_state, extractor_cost, make_cpu_extractor},
    {MixerKind::kHe, "he", {"window", "out_proj"}, 0, false, extractor_weights, extractor_state, extractor_cost, make_cpu_extractor},
    {MixerKind::kWe, "we", {"window", "out_proj"}, 0, false, extractor_weights, extractor_state, extractor_cost, make_cpu_extractor},
    {MixerKind::kMe, "me", {"window"}, 0, false, extractor_weights, extractor_state, extractor_cost, make_cpu_extractor},
    {MixerKind::kRwkv, "rwkv", {}, 0, false, rwkv_weights, rwkv_state, rwkv_cost, make_cpu_rwkv},
    {MixerKind::kLinear, "linear", {"heads", "eps", "feature_map", "q_scale", "normalize", "group_norm", "gn_eps", "gn_weight"}, 0, false, linear_weights, linear_state, linear_cost, make_cpu_linear},
    {MixerKind::kPerformer, "performer", {"heads", "features", "eps"}, 0, false, linear_weights, linear_state, linear_cost, make_cpu_linear},
};
// clang-format on

// One row per kind, in the enum's order: a kind added to MixerKind without its row (or a row out
// of place) fails the build here.
constexpr bool rows_in_enum_order() {
  for (size_t i = 0; i < std::size(kMixers); ++i)
    if (static_cast<size_t>(kMixers[i].kind) != i) return false;
  return true;
}
static_assert(std::size(kMixers) == kMixerKinds, "a MixerKind has no row in the mixer table");
static_assert(rows_in_enum_order(), "the mixer table's rows must follow MixerKind's order");
}  // namespace

const MixerKindInfo& mixer_info(MixerKind kind) {
  const auto i = static_cast<size_t>(kind);
  if (i >= std::size(kMixers)) throw std::logic_error("not a mixer kind");
  return kMixers[i];
}

bool mixer_takes(MixerKind kind, const std::string& param) {
  for (const char* p : mixer_info(kind).params)
    if (p && param == p) return true;
  return false;
}

StateLayout layer_state_layout(const ModelConfig& cfg, int layer) {
  const LayerConfig& lc = cfg.layers[layer];
  StateLayout s = mixer_info(lc.kind).state(cfg, lc);
  s.append(ffn_state(cfg), "ffn.", cfg.d_model);
  return s;
}

int OpCost::depth() const {
  if (critical_path.empty()) return 0;
  int n = 1;
  for (char c : critical_path) n += c == '-';
  return n;
}

void add_linear_spec(std::vector<WeightSpec>& specs, const std::string& name, int64_t out,
                     int64_t in, bool bias) {
  specs.push_back({name + ".weight", {out, in}});
  if (bias) specs.push_back({name + ".bias", {out}});
}

}  // namespace mixserve
