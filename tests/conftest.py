"""Shared fixtures. Each fixture is self-contained; add new ones below with a clear name.

``tiny_corpus`` writes a synthetic English→Spanish-like corpus (a small grammar with adjective-noun
reordering and gender agreement, so attention has something non-diagonal to show) and a matching
1-layer, hidden-32 config. ``tiny_run`` trains that config for a few seconds, once per session;
the serving tests translate with it. Every test trains in float32 (``_float32_training``).
"""

from __future__ import annotations

import random
import signal
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from attnmt import plugins

# the test-only plug-ins (tests/plugins/alibi.py: a Transformer attention variant from outside the
# package), imported as ``attnmt --user-dir tests/plugins`` imports them: every registered variant
# then goes through the shared variant tests (test_transformer.py, test_variants.py)
PLUGINS = plugins.load(Path(__file__).parent / "plugins")

# English noun -> (Spanish noun, gender); adjectives -> (masculine, feminine)
_NOUNS = {
    "cat": ("gato", "m"),
    "dog": ("perro", "m"),
    "house": ("casa", "f"),
    "table": ("mesa", "f"),
    "boy": ("niño", "m"),
    "girl": ("niña", "f"),
    "book": ("libro", "m"),
    "flower": ("flor", "f"),
}
_ADJS = {
    "red": ("rojo", "roja"),
    "big": ("grande", "grande"),
    "small": ("pequeño", "pequeña"),
    "white": ("blanco", "blanca"),
    "old": ("viejo", "vieja"),
}
_VERBS = {"sees": "ve", "has": "tiene", "wants": "quiere", "finds": "encuentra"}
_DETS = {"the": ("el", "la"), "a": ("un", "una")}


def _tiny_phrase(rng: random.Random) -> tuple[list[str], list[str]]:
    det, noun = rng.choice(list(_DETS)), rng.choice(list(_NOUNS))
    es_noun, gender = _NOUNS[noun]
    fem = gender == "f"
    en, es = [det], [_DETS[det][fem]]
    if rng.random() < 0.6:  # English adjective before the noun, Spanish after it
        adj = rng.choice(list(_ADJS))
        en += [adj, noun]
        es += [es_noun, _ADJS[adj][fem]]
    else:
        en.append(noun)
        es.append(es_noun)
    return en, es


def tiny_pair(rng: random.Random) -> tuple[str, str]:
    """One sentence pair: 'the red cat sees a dog' -> 'el gato rojo ve un perro'."""
    s_en, s_es = _tiny_phrase(rng)
    verb = rng.choice(list(_VERBS))
    o_en, o_es = _tiny_phrase(rng)
    return " ".join(s_en + [verb] + o_en), " ".join(s_es + [_VERBS[verb]] + o_es)


def write_tiny_corpus(directory: Path, n_train: int = 512, n_dev: int = 64, seed: int = 0) -> None:
    rng = random.Random(seed)
    directory.mkdir(parents=True, exist_ok=True)
    for split, n in (("train", n_train), ("dev", n_dev)):
        pairs = [tiny_pair(rng) for _ in range(n)]
        (directory / f"{split}.en").write_text(
            "".join(e + "\n" for e, _ in pairs), encoding="utf-8"
        )
        (directory / f"{split}.es").write_text(
            "".join(s + "\n" for _, s in pairs), encoding="utf-8"
        )


TINY_CONFIG = """\
task: translate
data: {{train: {d}/train, dev: {d}/dev, src: en, tgt: es, tokenizer: word,
        src_vocab_size: 100, tgt_vocab_size: 100, max_len: 20}}
model: {{type: lstm, layers: 1, hidden: 32, embed: 32, attention: global, score: general,
         input_feed: true, dropout: 0.0}}
train: {{optimizer: adam, lr: 0.03, warmup: 50, epochs: 4, batch_size: 32, batch_by: sents,
         clip: 5.0, init_uniform: 0.1, seed: 1, device: cpu, threads: 1, log_every: 10,
         amp: false}}
"""


@dataclass
class TinyCorpus:
    directory: Path
    config: Path  # a YAML config training on it (overridable with --set style overrides)


@pytest.fixture(autouse=True)
def _float32_training(monkeypatch):
    """In-process trainers train and ``attnmt translate`` searches in float32 on every machine:
    bfloat16 products (train.amp, translate's default on a CPU with bfloat16 units) would make
    results depend on the CPU. tests/test_bf16_products.py tests that path."""
    from attnmt.kernels import packed
    from attnmt.train import update

    monkeypatch.setattr(update, "native_bf16", lambda: False)
    monkeypatch.setattr(packed, "native_bf16", lambda: False)  # translate's default search too


@pytest.fixture(scope="session")
def tiny_corpus(tmp_path_factory) -> TinyCorpus:
    directory = tmp_path_factory.mktemp("tiny_corpus")
    write_tiny_corpus(directory)
    config = directory / "tiny.yaml"
    config.write_text(TINY_CONFIG.format(d=directory), encoding="utf-8")
    return TinyCorpus(directory, config)


@pytest.fixture(scope="session")
def tiny_run(tiny_corpus, tmp_path_factory) -> Path:
    """A trained tiny translation run directory (64 updates; a few seconds on one core)."""
    import torch

    from attnmt.train.run import run_training

    run_dir = tmp_path_factory.mktemp("tiny_run") / "tiny"
    threads = torch.get_num_threads()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        run_training(str(tiny_corpus.config), str(run_dir), [], resume=False)
    finally:  # the trainer installs its own handlers and thread count; give pytest its own back
        for sig, handler in handlers.items():
            signal.signal(sig, handler)
        torch.set_num_threads(threads)
    return run_dir


@pytest.fixture(scope="module")
def tiny_arpa(tiny_corpus, tmp_path_factory) -> Path:
    """A trigram ARPA file estimated on the tiny corpus's target side (the malformed-input zoo)."""
    from attnmt.ngram.model import NgramLM

    path = tmp_path_factory.mktemp("arpa") / "tiny.arpa"
    NgramLM.estimate_text(tiny_corpus.directory / "train.es", order=3).to_arpa(path)
    return path


@pytest.fixture
def fixed_update():
    """``make(trainer)`` -> ``update(groups)``: one ``trainer.train_step`` on a fixed 5-pair batch
    from the same start (model and optimizer state as ``make`` found them) with
    ``train.row_groups = groups``; returns (loss, tokens, parameters after). The row-split tests
    compare ``update(2)`` with ``update(1)``, one pass."""
    import copy

    import torch

    from attnmt.data.batching import collate

    def make(trainer):
        vs, vt = len(trainer.data.src_tok), len(trainer.data.tgt_tok)
        g = torch.Generator().manual_seed(3)
        src = [torch.randint(4, vs, (n,), generator=g).tolist() for n in (4, 6, 2, 5, 3)]
        tgt = [torch.randint(4, vt, (n,), generator=g).tolist() for n in (5, 2, 7, 3, 4)]
        batches = [collate(src, tgt, list(range(5)))]
        model0 = copy.deepcopy(trainer.model.state_dict())
        opt0 = copy.deepcopy(trainer.optimizer.state_dict())

        def update(groups: int):
            trainer.cfg.train.row_groups = groups
            trainer.model.load_state_dict(model0)
            trainer.optimizer.load_state_dict(opt0)
            trainer.step = 0
            loss, tokens = trainer.train_step(batches)
            return loss, tokens, {n: p.detach().clone() for n, p in trainer.model.named_parameters()}

        return update

    return make


@pytest.fixture
def tmpfs(tmp_path):
    """``mount(size)`` -> a fresh tmpfs of ``size`` (e.g. "32k") under tmp_path, for a disk that
    fills up; unmounted afterwards. Skips the test where mounting is not allowed (not root)."""
    mounted = []

    def mount(size: str) -> Path:
        where = tmp_path / f"disk{len(mounted)}"
        where.mkdir()
        if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
                          capture_output=True).returncode:
            pytest.skip("cannot mount a tmpfs here")
        mounted.append(where)
        return where

    yield mount
    for where in mounted:
        subprocess.run(["umount", str(where)], check=True)
