"""The mixer table: one entry per kind of DESIGN §5."""
from .aft import AftFull, AftLocal, AftSimple
from .attention import Attention
from .extractors import HE, ME, SHE, WE
from .linear_attention import LinearAttention, Performer
from .retnet import RetNet
from .rwkv import RWKV

MIXERS = {
    "attention": Attention,
    "aft_simple": AftSimple,
    "aft_local": AftLocal,
    "aft_full": AftFull,
    "retnet": RetNet,
    "she": SHE,
    "he": HE,
    "we": WE,
    "me": ME,
    "rwkv": RWKV,
    "linear": LinearAttention,
    "performer": Performer,
}


def make_mixer(cfg, layer):
    return MIXERS[layer["mixer"]](cfg, layer)
