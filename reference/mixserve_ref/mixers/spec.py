"""What the mixer table knows about a mixer besides its math: the Python twin of a row of
engine/mixers/registry.cc. Every mixer class derives from MixerSpec and sets what differs from
these defaults; config.py, cost.py, testing.py, golden.py and the benchmarks read them, so adding
a mixer is its file plus one row in mixers/__init__.py."""


class MixerSpec:
    name = None            # the config.json name ("mixer": ...)
    params = {}            # layer keys and defaults; None: derived (window → max_seq_len,
                           # features → the head size)
    quiet_params = ()      # params that config.json carries only when not at their default: added
                           # after models were written, which stay byte-identical
    choices = {}           # params that take one of a few values: key → the allowed values
                           # (booleans: (False, True))
    always_rotates = False  # RoPE on q and k whatever "rope" says (needs an even head size)
    paper_layer = {}       # its layer in the paper-config benchmarks (d 128, 18 layers)
    model_overrides = {}   # model keys its models need (e.g. its own FFN), in benchmarks and tests
    golden = {}            # tests/golden cases: name → ModelConfig keys (golden.py adds the base)

    @staticmethod
    def random_params(draw):
        """Random valid layer keys for tests; `draw` has .heads (a valid head count, already drawn),
        .pick(choices) and .coin()."""
        return {}

    @staticmethod
    def token_cost(d, t, p):
        """The cost_model.Cost of one token at 1-based position t (p: the layer with defaults)."""
        raise NotImplementedError

    @staticmethod
    def param_count(d, l, p):
        """Trainable parameters of the sublayer, biases not counted (the paper's Tables 3/4)."""
        raise NotImplementedError

    @staticmethod
    def paper_init(block, index, n_layers):
        """Called after the paper's N(0, std) initialisation (model.init_paper) for mixers whose
        published initialisation is something else."""
