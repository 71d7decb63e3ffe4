// The CUDA side of the mixer table (engine/mixers/registry.cc): each kind's factory, from its
// family's file in engine/mixers/<family>/. Indexed by MixerKind and checked at build time, so
// a kind without its CUDA part fails the build.
#include <iterator>
#include <stdexcept>

#include "kernels/cuda_part.cuh"

namespace mixserve::cuda {

namespace {
struct CudaMixerRow {
  MixerKind kind;
  PartFactory make;
};
constexpr CudaMixerRow kCudaMixers[] = {
    {MixerKind::kAttention, make_cuda_attention}, {MixerKind::kAftSimple, make_cuda_aft},
    {MixerKind::kAftLocal, make_cuda_aft},        {MixerKind::kAftFull, make_cuda_aft},
    {MixerKind::kRetnet, make_cuda_retnet},       {MixerKind::kShe, make_cuda_extractor},
    {MixerKind::kHe, make_cuda_extractor},        {MixerKind::kWe, make_cuda_extractor},
    {MixerKind::kMe, make_cuda_extractor},        {MixerKind::kRwkv, make_cuda_rwkv},
    {MixerKind::kLinear, make_cuda_linear},       {MixerKind::kPerformer, make_cuda_linear},
};
constexpr bool rows_in_enum_order() {
  for (size_t i = 0; i < std::size(kCudaMixers); ++i)
    if (static_cast<size_t>(kCudaMixers[i].kind) != i) return false;
  return true;
}
static_assert(std::size(kCudaMixers) == kMixerKinds, "a MixerKind has no CUDA part");
static_assert(rows_in_enum_order(), "the CUDA mixer rows must follow MixerKind's order");
}  // namespace

PartFactory cuda_mixer_factory(MixerKind kind) {
  const auto i = static_cast<size_t>(kind);
  if (i >= std::size(kCudaMixers)) throw std::logic_error("not a mixer kind");
  return kCudaMixers[i].make;
}

}  // namespace mixserve::cuda
