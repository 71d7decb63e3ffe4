"""The mixer table: one row per kind of DESIGN §5, each a class deriving from spec.MixerSpec
(in the order of engine/mixers/registry.cc). Adding a mixer: its file and one row here."""
from .aft import AftFull, AftLocal, AftSimple
from .attention import Attention
from .extractors import HE, ME, SHE, WE
from .linear_attention import LinearAttention, Performer
from .retnet import RetNet
from .rwkv import RWKV

TABLE = (
    Attention,
    AftSimple,
    AftLocal,
    AftFull,
    RetNet,
    SHE,
    HE,
    WE,
    ME,
    RWKV,
    LinearAttention,
    Performer,
)

MIXERS = {cls.name: cls for cls in TABLE}
assert len(MIXERS) == len(TABLE), "two mixers share a name"


def make_mixer(cfg, layer):
    return MIXERS[layer["mixer"]](cfg, layer)
