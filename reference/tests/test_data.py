"""The training data path: tokenizer, book split, token files, batch sampler, a tiny training run.

Tests that need the `bible` command (Debian's bible-kjv) or the generated token files
(reference/data/, from reference/data.py) are skipped where those are missing."""
import json
import os
import shutil
import sys
import tempfile

import numpy as np
import pytest
import sentencepiece as spm
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCE = os.path.dirname(HERE)
sys.path.insert(0, REFERENCE)
import data  # noqa: E402
import train  # noqa: E402
from mixserve_ref.config import MIXERS, ModelConfig  # noqa: E402
from mixserve_ref.model import Model  # noqa: E402

torch.set_num_threads(2)
needs_bible = pytest.mark.skipif(shutil.which("bible") is None, reason="no `bible` command (bible-kjv)")
needs_tokens = pytest.mark.skipif(not os.path.exists(os.path.join(data.DATA, "meta.json")),
                                  reason="no reference/data/ (run reference/data.py)")


@pytest.fixture(scope="module")
def sp():
    return spm.SentencePieceProcessor(model_file=data.TOKENIZER)


@pytest.fixture(scope="module")
def bible():
    verses = data.read_bible()
    return verses, data.split(verses)


# --- tokenizer -------------------------------------------------------------------------------

def test_tokenizer_vocab_and_special_ids(sp):
    assert sp.get_piece_size() == data.VOCAB == 5000
    assert (sp.unk_id(), sp.bos_id(), sp.eos_id(), sp.pad_id()) == (0, 1, 2, -1)
    assert sum(sp.is_byte(i) for i in range(sp.get_piece_size())) == 256


def test_byte_fallback_for_unseen_characters(sp):
    ids = sp.encode("東")  # three UTF-8 bytes, never in the KJV
    pieces = [sp.id_to_piece(i) for i in ids]
    assert pieces[-3:] == ["<0xE6>", "<0x9D>", "<0xB1>"]
    assert sp.unk_id() not in ids
    for text in ("東", "a東京b", "naïve café — 😀 ∑"):
        assert sp.decode(sp.encode(text)) == text


def test_round_trips_text_exactly(sp):
    for text in ("In the beginning God created the heaven and the earth.",
                 "And God said, Let there be light:\nand there was light.\n\nNext book.\n",
                 "  two  spaces\ttab, trailing space ", "Jesus wept. 3:16 (1611)"):
        assert sp.decode(sp.encode(text)) == text


@needs_bible
def test_round_trips_kjv_verses(sp, bible):
    verses, _ = bible
    for _, text in verses[::97]:
        ids = sp.encode(text)
        assert sp.unk_id() not in ids
        assert sp.decode(ids) == text


@needs_bible
def test_tokenizer_training_is_deterministic(bible):
    """Retraining on the training books gives the committed model byte for byte."""
    _, (train_text, _) = bible
    with open(data.TOKENIZER, "rb") as f:
        assert data.train_tokenizer(train_text) == f.read()


# --- the split by book ------------------------------------------------------------------------

@needs_bible
def test_held_out_books_never_appear_in_train(bible):
    verses, (train_text, val_text) = bible
    books = list(dict.fromkeys(b for b, _ in verses))
    assert len(books) == 66
    assert set(data.HELD_OUT) <= set(books), "a held-out name is not a book of `bible`"
    train_lines = set(train_text.splitlines())
    val_lines = [l for l in val_text.splitlines() if l]
    held = [t for b, t in verses if b in data.HELD_OUT]
    kept = [t for b, t in verses if b not in data.HELD_OUT]
    assert val_lines == held
    assert [l for l in train_text.splitlines() if l] == kept
    # Verses whose exact text occurs only in held-out books must not be in the training text.
    unique = set(held) - set(kept)
    assert len(unique) > 0.9 * len(held)
    assert not unique & train_lines
    assert "Now the LORD had prepared a great fish to swallow up Jonah." not in train_text
    # both testaments contribute, and validation is about 5% of the text
    assert {"Ruth", "Jonah"} & set(data.HELD_OUT) and {"Mark", "Jude"} & set(data.HELD_OUT)
    assert 0.03 < len(val_text) / (len(train_text) + len(val_text)) < 0.07


@needs_bible
def test_books_are_separated_by_blank_lines(bible):
    _, (train_text, val_text) = bible
    assert train_text.count("\n\n") == 66 - len(data.HELD_OUT) - 1
    assert val_text.count("\n\n") == len(data.HELD_OUT) - 1


@needs_bible
@needs_tokens
def test_token_files_are_the_split_texts(sp, bible):
    _, texts = bible
    with open(os.path.join(data.DATA, "meta.json")) as f:
        meta = json.load(f)
    for name, text in zip(("train", "val"), texts):
        ids = train.read_tokens(data.DATA, name)
        assert ids.size == meta["tokens"][name]
        assert sp.decode(ids.tolist()) == text, f"{name}.u16 is stale: run reference/data.py"
    assert meta["held_out_books"] == data.HELD_OUT


# --- batches ---------------------------------------------------------------------------------

def draw(batches, n):
    return [batches.next() for _ in range(n)]


def test_batches_are_deterministic():
    tokens = np.arange(100_000, dtype=np.uint16) % 5000
    a = draw(train.Batches(tokens, 8, 128, seed=2023), 5)
    b = draw(train.Batches(tokens, 8, 128, seed=2023), 5)
    c = draw(train.Batches(tokens, 8, 128, seed=2024), 5)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    assert not all(torch.equal(x, y) for x, y in zip(a, c))
    assert a[0].shape == (8, 129) and a[0].dtype == torch.int64
    # each row is a contiguous window of the stream (inputs + the shifted target)
    assert all(torch.equal(row[1:] - row[:-1], torch.ones(128, dtype=torch.int64)) for row in a[0] if row[0] < 4800)
    # pinned: the batch order must not change between numpy versions or machines
    assert train.Batches(tokens, 4, 128, seed=2023).next_starts().tolist() == PINNED_STARTS


PINNED_STARTS = [47266, 8794, 15713, 22015]


def test_batches_do_not_depend_on_the_model():
    """Building and running different models (torch RNG, dropout) between draws changes nothing,
    and every zoo model samples windows of the same length: the same batches for all."""
    tokens = np.arange(50_000, dtype=np.uint16) % 5000
    alone = draw(train.Batches(tokens, 4, 128, seed=7), 3)
    zoo = train.load_zoo(os.path.join(REFERENCE, "zoo.json"))
    assert len({train.zoo_config(n, zoo).max_seq_len for n in zoo["models"]}) == 1
    assert sorted(zoo["models"]) == sorted(MIXERS), "the zoo has one model per mixer"
    for i, layer in enumerate(({"mixer": "attention", "heads": 2}, {"mixer": "me"})):
        torch.manual_seed(i)
        model = Model(ModelConfig(vocab_size=5000, d_model=16, n_layers=1, ffn_dim=32, max_seq_len=128,
                                  layers=[layer]), dropout=0.1)
        batches = train.Batches(tokens, 4, 128, seed=7)
        for expected in alone:
            got = batches.next()
            model(got[:2, :16]).sum().backward()  # draws dropout masks from torch's RNG
            np.random.seed(i)  # the global numpy RNG is not the sampler's either
            assert torch.equal(got, expected)


def test_validation_windows_are_fixed():
    tokens = np.arange(1000, dtype=np.uint16)
    all_windows = train.val_windows(tokens, 128)
    assert all_windows.shape == (7, 129)
    assert torch.equal(all_windows[:, 0], torch.arange(7) * 128)
    spread = train.val_windows(tokens, 128, count=3)
    assert spread[:, 0].tolist() == [0, 384, 768]


def test_learning_rate_schedules():
    assert [train.lr_factor("constant", s, 100, 0) for s in (1, 50, 100)] == [1.0, 1.0, 1.0]
    assert train.lr_factor("cosine", 100, 100, 0) == pytest.approx(0.0)
    assert train.lr_factor("linear", 50, 100, 0) == pytest.approx(0.5)
    assert train.lr_factor("cosine", 5, 100, 10) == pytest.approx(0.5)  # warmup


# --- a tiny training run end to end ------------------------------------------------------------

def test_tiny_training_run_writes_a_loadable_model_dir():
    with tempfile.TemporaryDirectory() as tmp:
        rng = np.random.default_rng(0)
        for name, n in (("train", 4000), ("val", 600)):
            rng.integers(0, 64, n).astype("<u2").tofile(os.path.join(tmp, f"{name}.u16"))
        zoo = {"base": {"vocab_size": 64, "d_model": 16, "n_layers": 1, "ffn_dim": 32, "max_seq_len": 16},
               "models": {"me": {"layer": {"mixer": "me"}}, "attention": {"layer": {"mixer": "attention", "heads": 2}}}}
        with open(os.path.join(tmp, "zoo.json"), "w") as f:
            json.dump(zoo, f)
        args = train.parse_args(["--zoo", os.path.join(tmp, "zoo.json"), "--data", tmp, "--out", tmp,
                                 "--steps", "3", "--batch", "4", "--eval-every", "2", "--log-every", "1",
                                 "--device", "cpu", "--threads", "1"])
        for name in zoo["models"]:
            train.train_one(name, args)  # also checks that the saved dir reloads to identical logits
            out = os.path.join(tmp, name)
            with open(os.path.join(out, "train_log.json")) as f:
                log = json.load(f)
            assert log["val_steps"] == [2, 3] and log["steps_done"] == 3 and log["seed"] == 1
            assert log["best_val_loss"] == min(log["val_loss"])
            assert os.path.samefile(os.path.join(out, "tokenizer.model"), data.TOKENIZER)
            assert Model.load_dir(out).cfg.layers[0]["mixer"] == name
