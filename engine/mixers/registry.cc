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
const MixerKindInfo kMixers[] = {
    {MixerKind::kAttention, attention_weights, attention_state, attention_cost, make_cpu_attention},
    {MixerKind::kAftSimple, aft_weights, aft_state, aft_cost, make_cpu_aft},
    {MixerKind::kAftLocal, aft_weights, aft_state, aft_cost, make_cpu_aft},
    {MixerKind::kAftFull, aft_weights, aft_state, aft_cost, make_cpu_aft},
    {MixerKind::kRetnet, retnet_weights, retnet_state, retnet_cost, make_cpu_retnet},
    {MixerKind::kShe, extractor_weights, extractor_state, extractor_cost, make_cpu_extractor},
    {MixerKind::kHe, extractor_weights, extractor_state, extractor_cost, make_cpu_extractor},
    {MixerKind::kWe, extractor_weights, extractor_state, extractor_cost, make_cpu_extractor},
    {MixerKind::kMe, extractor_weights, extractor_state, extractor_cost, make_cpu_extractor},
    {MixerKind::kRwkv, rwkv_weights, rwkv_state, rwkv_cost, make_cpu_rwkv},
    {MixerKind::kLinear, linear_weights, linear_state, linear_cost, make_cpu_linear},
    {MixerKind::kPerformer, linear_weights, linear_state, linear_cost, make_cpu_linear},
};
}  // namespace

const MixerKindInfo& mixer_info(MixerKind kind) {
  for (const MixerKindInfo& m : kMixers)
    if (m.kind == kind) return m;
  throw std::logic_error("mixer kind missing from the registry");
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
