"""Experiment configuration: YAML files whose sections read like a row of the paper's tables.

    data:  {train: corpus/train, dev: corpus/dev, src: en, tgt: es, tokenizer: word, ...}
    model: {type: lstm, layers: 4, hidden: 1000, attention: global, score: dot, input_feed: true}
    train: {optimizer: sgd, lr: 1.0, epochs: 12, decay_start: 8, batch_size: 128, ...}

Every key is declared below with its default; unknown keys, wrongly typed values and (``validate``)
values outside a key's choices or bounds are user errors that name the file, line and key.
``--set section.key=value`` overrides from the command line.

The ``model:`` section is per family: ``model.type`` picks ``LSTMConfig`` (Luong et al.) or
``TransformerConfig``, each with its own keys and its own ``check``; a key of the other family is
an error saying whose it is ("model.window_mask applies to model.type transformer, not lstm").
A registered Transformer attention variant with options of its own reads them from its section,
``model.<name>: {key: value}`` (``--set model.<name>.<key>=value``), typed and checked by the
variant's ``Options`` dataclass (attention/variant.py). ``user_dir`` names a folder of plug-ins
imported before the model section is read (attnmt/plugins.py; ``attnmt --user-dir DIR``).
"""

from __future__ import annotations

import abc
import dataclasses
import difflib
import math
import re
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from attnmt import plugins
from attnmt.errors import UserError, key_error
from attnmt.files import SMALL_TEXT_BYTES, read_small_text
from attnmt.strict_yaml import duplicate_key, key_lines, load_yaml


@dataclass
class DataConfig:
    train: str = ""  # path prefix: {train}.{src} / {train}.{tgt}, or a .tsv file
    dev: str = ""
    test: str = ""
    src: str = "en"  # language suffixes of the files
    tgt: str = "es"
    tokenizer: str = "word"  # word | bpe | unigram
    src_vocab_size: int = 50000  # top-K words, or the sentencepiece vocabulary size
    tgt_vocab_size: int = 50000
    # a sentencepiece model to use instead of training one (pad 0, unk 1, <s> 2, </s> 3)
    src_spm: str = ""
    tgt_spm: str = ""
    max_len: int = 50  # training pairs with a longer side (in tokens) are filtered out
    reverse_source: bool = False
    lowercase: bool = False
    # subword regularisation (Kudo 2018; BPE-dropout for bpe): > 0 re-samples the training source
    # and target segmentation every epoch with sentencepiece (enable_sampling, this alpha,
    # nbest_size -1), seeded by train.seed and the epoch; dev and test are never sampled.
    # tokenizer bpe or unigram only; 0 = off
    spm_alpha: float = 0.0
    # a corpus made by `attnmt data prepare` (data/prepare.py): its tokenizers and memory-mapped
    # ids replace train/dev and the tokenizer keys; "" = prepare train/dev into RUN/data first
    prepared: str = ""
    # preparing raw text (data.train): opt-in filters, and the tokenizers' sample size
    max_ratio: float = 0.0  # > 0: drop pairs whose longer side is over this times the shorter
    drop_identical: bool = False  # drop pairs whose source and target are the same text
    tokenizer_sample: int = 2_000_000  # sentences per side the tokenizers learn from
    tokenizer_sample_chars: int = 64_000_000  # ... and characters (sentencepiece's memory); 0 = no cap


# -- model: one config per family; ``model.type`` picks it ---------------------------------------
# Both families share type, layers, hidden and dropout (same defaults as ever). Every other key
# belongs to one family: naming it for the other is an error that says so (a saved run's
# config.yaml from before the split lists both families' keys at their defaults: those are read
# and dropped).
@dataclass
class LSTMConfig:
    """Luong et al. (2015): stacked LSTMs with global or local attention (models/seq2seq.py,
    models/lm.py)."""

    type: str = "lstm"
    layers: int = 4
    hidden: int = 1000
    embed: int = 1000
    bidirectional: bool = False
    attention: str = "global"  # none | global | local-m | local-p
    score: str = "dot"  # dot | general | concat | concat-simple | location
    input_feed: bool = True
    dropout: float = 0.2
    max_src_len: int = 100  # positions the location score covers
    window: int = 10  # local attention half-width D
    sigma: float = 0.0  # local Gaussian σ; 0 means D/2
    local_composition: str = "paper"  # paper (normalise, then weight) | inside (weight in softmax)
    tie_output: bool = True  # LM: output projection = input embedding (when embed == hidden)

    @property
    def location(self) -> bool:
        """Global attention with the location score, a_t = softmax(W_a h_t), which covers the
        first ``max_src_len`` source positions only."""
        from attnmt.attention.global_attention import score_class

        unit = score_class(self.score)
        return self.attention == "global" and unit is not None and unit.limits_source

    def source_limit(self) -> int | None:
        """Source pieces a model reads (longer sources are cut); None = all."""
        return self.max_src_len if self.location else None

    def check(self, task: str, fail: Callable[[str, str], None]) -> None:
        """This family's choices and combinations (the attention module's own constants)."""
        from attnmt.attention import ATTENTIONS, LOCAL_MODES
        from attnmt.attention.global_attention import score_class, score_names
        from attnmt.attention.local_attention import COMPOSITIONS

        for key, allowed in (("attention", ATTENTIONS), ("score", score_names()),
                             ("local_composition", COMPOSITIONS)):
            if getattr(self, key) not in allowed:
                fail(f"model.{key}", f"must be one of {', '.join(allowed)}, not {getattr(self, key)!r}")
        if self.attention in LOCAL_MODES:
            if score_class(self.score) is not None and not score_class(self.score).content:
                fail("model.score", f"{self.score} is a global-attention score; {self.attention} needs a content score")
            if self.window < 0:
                fail("model.window", f"must be >= 0, got {self.window}")
            if self.attention == "local-p" and self.window == 0 and self.sigma <= 0:
                fail("model.window", "must be >= 1 for local-p unless model.sigma is set (σ = D/2 would be 0)")
        if self.bidirectional and self.hidden % 2:
            fail("model.hidden", f"({self.hidden}) must be even for a bidirectional encoder (hidden/2 per direction)")


@dataclass
class TransformerConfig:
    """Vaswani et al. (2017) with per-kind attention variants: relative positions, localness and
    Nguyen et al. (2020)'s differentiable windows (models/transformer.py, models/classifier.py).
    ``hidden`` is d_model; train.init_uniform is ignored."""

    type: str = "transformer"
    layers: int = 4
    hidden: int = 1000
    dropout: float = 0.2
    heads: int = 4  # attention heads; hidden must be a multiple
    ff: int = 1024  # feed-forward inner size
    norm: str = "pre"  # pre (LN before each sub-layer, final LN) | post (Vaswani et al.)
    positions: str = "sinusoidal"  # sinusoidal | learned | none (relative self-attention's distances
    #                                only: the form `attnmt export --format ctranslate2` needs for it)
    max_positions: int = 1024  # learned position table size (later positions reuse the last row)
    share_embeddings: bool = False  # one source/target embedding (needs equal vocabulary sizes)
    tie_output: bool = True  # output projection = target (LM: input) embedding
    # attention variant per kind: a registered variant's name (attention/variant.py,
    # variant_names(): standard, relative, localness, window-{mul,add}[-seg] and any plug-in's;
    # relative: self-attention only). A variant's own options: its section model.<name>
    enc_self_attention: str = "standard"
    dec_self_attention: str = "standard"
    cross_attention: str = "standard"
    attention_layers: int = 0  # the variants apply to the lowest N layers of each stack; 0 = all
    window_segment: int = 3  # segment size b of the *-seg window masks
    window_mask: str = "exact"  # exact (P(l<=j<=r or r<=j<=l)) | union | sum (paper: M_fw + M_bw)
    #                             | full (ablation: M = 1, the combiner without a window)
    window_renorm: bool = False  # window-mul: renormalise softmax ⊙ M to sum to one
    window_temperature: float = 0.0  # boundary-pointer τ; 0 = 1/sqrt(head dim)
    window_pointers: str = "attention"  # pointer scores from the attention's q, k | input (separate
    #                                     projections of the layer input, the authors' form)
    window_preset: str = "none"  # none | paper: sets the four window_* keys above to the authors'
    #                              values (attention/window.PRESETS); naming one of them otherwise is an error
    relative_clip: int = 16  # Shaw et al. clipping distance k

    location = False  # no location score: sources are read whole

    def __post_init__(self) -> None:
        # the registered variants' own options by section, model.<section>: {key: value} (each an
        # ``Options`` dataclass): not fields, since the sections are whichever variants are registered
        self.variant_options: dict[str, Any] = {}

    def __eq__(self, other: object) -> bool:
        if type(other) is not type(self):
            return NotImplemented
        return dataclasses.astuple(self) == dataclasses.astuple(other) and \
            self.variant_options == other.variant_options

    def source_limit(self) -> int | None:
        return None

    def check(self, task: str, fail: Callable[[str, str], None]) -> None:
        """This family's choices; each attention variant checks the options it reads (its own
        section's through its ``Options.check``)."""
        from attnmt.attention.variant import unit_of, variant_names
        from attnmt.attention.window import ABLATIONS, MASKS, POINTERS, PRESETS

        for key, allowed in (("norm", ("pre", "post")), ("positions", ("sinusoidal", "learned", "none")),
                             ("window_mask", MASKS + ABLATIONS), ("window_preset", tuple(PRESETS)),
                             ("window_pointers", POINTERS)):
            if getattr(self, key) not in allowed:
                fail(f"model.{key}", f"must be one of {', '.join(allowed)}, not {getattr(self, key)!r}")
        names = variant_names()
        for kind in ATTENTION_KINDS["translate"]:
            if getattr(self, kind) not in names:
                fail(f"model.{kind}", f"must be one of {', '.join(names)}, not {getattr(self, kind)!r} "
                     f"({plugins.HINT})")
        if self.heads < 1 or self.hidden % self.heads:
            fail("model.hidden", f"({self.hidden}) must be a multiple of model.heads ({self.heads})")
        for kind in ATTENTION_KINDS[task]:
            unit_of(getattr(self, kind)).check(self, kind, fail)
        for section, options in self.variant_options.items():
            check = getattr(options, "check", None)
            if check is not None:
                check(lambda key, message, section=section: fail(f"model.{section}.{key}", message))


FAMILIES: dict[str, type] = {"lstm": LSTMConfig, "transformer": TransformerConfig}


class ModelConfig(abc.ABC):
    """The ``model:`` section: ``ModelConfig(type=..., **keys)`` makes the family's config
    (``LSTMConfig`` or ``TransformerConfig``), and both are ModelConfigs for isinstance and hints."""

    def __new__(cls, type: str = "lstm", **keys: Any):  # noqa: A002 (the key's name)
        if type not in FAMILIES:
            raise UserError(f"model.type must be one of {', '.join(FAMILIES)}, not {type!r}")
        return FAMILIES[type](type=type, **keys)


for _family in FAMILIES.values():
    ModelConfig.register(_family)


# The model keys of a config.yaml saved before the families split (one ModelConfig, every key
# written): such a section may name the other family's keys at their defaults. A section that
# names a few keys is the user's, and a key of the other family there is an error, default or not.
PRE_SPLIT_KEYS = frozenset({
    "layers", "hidden", "embed", "bidirectional", "attention", "score", "input_feed", "dropout",
    "max_src_len", "window", "sigma", "local_composition", "heads", "ff", "norm", "positions",
    "max_positions", "share_embeddings", "tie_output", "enc_self_attention", "dec_self_attention",
    "cross_attention", "attention_layers", "window_segment", "window_mask", "window_renorm",
    "window_temperature", "window_pointers", "window_preset", "relative_clip"})


def family_of_key(key: str) -> str | None:
    """The one family a model key belongs to (None: shared by both, or no model key)."""
    owners = [name for name, cls in FAMILIES.items() if key in {f.name for f in dataclasses.fields(cls)}]
    return owners[0] if len(owners) == 1 else None


@dataclass
class TrainConfig:
    optimizer: str = "sgd"  # sgd (the paper) | adam
    lr: float = 1.0
    epochs: int = 12
    decay_start: int = 8  # sgd: halve the rate after every epoch from this one on
    decay: float = 0.5
    warmup: int = 4000  # adam: linear warm-up steps, then the schedule below
    schedule: str = "rsqrt"  # adam after warm-up: rsqrt (inverse square root) | constant | linear
    #                          (linear: to zero at the end of the budget: max_time, max_steps or epochs)
    clip: float = 5.0
    batch_size: int = 128
    batch_by: str = "sents"  # sents | tokens
    loss_norm: str = "tokens"  # tokens (mean per token) | sents (sum per sentence, the paper's SGD)
    init_uniform: float = 0.1  # 0: PyTorch's default initialisation
    label_smoothing: float = 0.0
    accumulate: int = 1
    max_time: float = 0.0  # wall-clock budget in seconds, 0 = none
    max_steps: int = 0
    valid_every: int = 0  # steps; 0 = once per epoch
    save_every: int = 0  # steps; 0 = once per epoch (and at each validation)
    seed: int = 1
    bucket_pool: int = 1_000_000  # sentences sorted by length together (data/batching.py)
    device: str = "auto"  # auto | cpu | cuda | cuda:N
    amp: bool = True  # mixed precision where it helps: CUDA autocast; on a CPU with bfloat16 units
    #                   (AVX-512 BF16, AMX) the LSTM's and the Transformer's training products in
    #                   bfloat16 (kernels/packed.py)
    threads: int = 0  # CPU threads, 0 = torch's default
    row_groups: int = 0  # CPU: each batch as this many groups of rows at once, one thread each;
    #                      0 = auto (one per thread from hidden 256 with processes, 512 with threads), 1 = off
    row_workers: str = "processes"  # processes (train/row_processes.py; Linux only, else threads)
    #                                 | threads (train/row_groups.py)
    log_every: int = 50
    # validation (train/validation.py): the metric that picks BEST and counts for patience:
    # ppl (dev perplexity, lower is better) | bleu | chrf (dev translated by greedy search or a
    # beam of valid_beam, scored by sacrebleu; higher is better; task: translate only)
    valid_metric: str = "ppl"
    valid_beam: int = 1  # bleu/chrf: beam size of the dev translation (1 = greedy)
    valid_max_sentences: int = 0  # bleu/chrf: translate the first N dev sentences only; 0 = all
    patience: int = 0  # stop after this many validations without a better valid_metric; 0 = never
    # exponential moving average of the weights (train/ema.py), updated after every update:
    # ema = decay·ema + (1 − decay)·θ. Validation (and so BEST) uses it; each checkpoint saves it
    # as ema.safetensors beside model.safetensors; translate/eval load it (--raw-weights: not). 0 = off
    ema: float = 0.0
    ema_warmup: bool = True  # decay min(ema, (1 + n) / (10 + n)) at update n, so early weights fade
    tensorboard: bool = False  # also write RUN/tensorboard/ event files (pip install attnmt[tensorboard])


@dataclass
class NgramConfig:
    """NgramRes (Li et al. 2022, attnmt/ngram/residual.py): logits = φ(h) + α·log P_ng."""

    path: str = ""  # ARPA/binary n-gram over the target vocabulary; "" = none; train = estimate
    order: int = 5  # with path: train, the order estimated from the training targets
    alpha: float = 0.1  # α of eq. 9
    anneal_steps: int = 0  # > 0: α decays linearly to 0 over this many updates (NgramRes-Anneal)
    mode: str = "residual"  # residual (eq. 9) | interp (Prob-Inter: λ·P_neural + (1−λ)·P_ng)
    lam: float = 0.9  # λ of interp
    # LM only: space-separated domain names. data.train, data.dev and path contain "{domain}"
    # (path: train estimates one n-gram per domain); every sentence is trained and validated with
    # its own domain's n-gram, one neural model for all (Li et al. 2022, section 5.2)
    domains: str = ""


TASKS = ("translate", "lm", "classify")


@dataclass
class Config:
    task: str = "translate"  # translate | lm | classify
    data: DataConfig = field(default_factory=DataConfig)
    model: LSTMConfig | TransformerConfig = field(default_factory=LSTMConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    ngram: NgramConfig = field(default_factory=NgramConfig)
    # a folder of plug-ins (attention variants, scores, kernels) the model needs, imported before
    # the model section is read: attnmt/plugins.py. attnmt --user-dir DIR sets it; "" = none
    user_dir: str = ""

    def to_dict(self) -> dict[str, Any]:
        """The config as the YAML a run saves: a variant's options as its section of ``model``;
        ``user_dir`` only when set."""
        out = dataclasses.asdict(self)
        for section, options in getattr(self.model, "variant_options", {}).items():
            out["model"][section] = dataclasses.asdict(options)
        if not self.user_dir:
            del out["user_dir"]
        return out


# Choices that are settings of one module each; the model family's own choices (attention,
# score, the Transformer variants and their options) are checked by its config's ``check``.
CHOICES = {
    "data.tokenizer": ("word", "bpe", "unigram"),
    "model.type": tuple(FAMILIES),
    "train.optimizer": ("sgd", "adam"),
    "train.batch_by": ("sents", "tokens"),
    "train.loss_norm": ("sents", "tokens"),
    "train.schedule": ("rsqrt", "constant", "linear"),
    "train.row_workers": ("processes", "threads"),
    "train.valid_metric": ("ppl", "bleu", "chrf"),
    "ngram.mode": ("residual", "interp"),
}
# the Transformer attention kinds a task's model has
ATTENTION_KINDS = {
    "translate": ("enc_self_attention", "dec_self_attention", "cross_attention"),
    "lm": ("dec_self_attention",),
    "classify": ("enc_self_attention",),
}

Where = Callable[[str], "tuple[str | None, int | None]"]


def validate(cfg: Config, where: Where | None = None) -> Config:
    """Check every choice and bound of ``cfg``. A UserError names the key and, through ``where``
    (key -> (file, line) it was set in), the file and line; returns ``cfg``."""

    def fail(key: str, message: str) -> None:
        raise UserError(f"{key} {message}", *(where(key) if where else (None, None)))

    def value(key: str) -> Any:
        section, name = key.split(".")
        return getattr(getattr(cfg, section), name)

    m = cfg.model
    for key, allowed in CHOICES.items():
        if value(key) not in allowed:
            fail(key, f"must be one of {', '.join(allowed)}, not {value(key)!r}")
    for key in ("train.batch_size", "train.accumulate", "model.hidden", "model.layers"):
        if value(key) < 1:
            fail(key, f"must be at least 1, got {value(key)}")
    if cfg.task == "classify" and m.type != "transformer":
        fail("model.type", "must be transformer for task: classify (an encoder classifier)")
    if type(m) is not FAMILIES[m.type]:  # a config made in code, its type changed afterwards
        fail("model.type", f"is {m.type!r} but the model section is a {type(m).__name__}")
    m.check(cfg.task, fail)
    check_ngram(cfg.ngram.mode, cfg.ngram.alpha, cfg.ngram.anneal_steps, cfg.ngram.lam, fail)
    if cfg.ngram.order < 1:
        fail("ngram.order", f"must be >= 1, got {cfg.ngram.order}")
    check_bounds(cfg, fail)
    _check_domains(cfg, fail)
    _check_training_extras(cfg, fail)
    return cfg


def _check_training_extras(cfg: Config, fail: Callable[[str, str], None]) -> None:
    """train.valid_metric bleu/chrf translate (an LM or classifier has nothing to score);
    data.spm_alpha samples sentencepiece segmentations (not word vocabularies, not labels)."""
    if cfg.train.valid_metric != "ppl" and cfg.task != "translate":
        fail("train.valid_metric", f"{cfg.train.valid_metric} scores translations; task {cfg.task} "
             "is validated by ppl")
    if cfg.data.spm_alpha > 0:
        if cfg.data.tokenizer not in ("bpe", "unigram"):
            fail("data.spm_alpha", f"samples sentencepiece segmentations: needs data.tokenizer bpe or "
                 f"unigram, not {cfg.data.tokenizer}")
        if cfg.task == "classify":
            fail("data.spm_alpha", "is for task: translate and lm (a classifier's inputs are not sampled)")


def _check_domains(cfg: Config, fail: Callable[[str, str], None]) -> None:
    """ngram.domains: an LM with a "{domain}" in its data and n-gram paths."""
    names = cfg.ngram.domains.split()
    if not names:
        return
    if cfg.task != "lm":
        fail("ngram.domains", f"is for task: lm (one n-gram per domain of the text), not {cfg.task}")
    if len(set(names)) != len(names):
        fail("ngram.domains", f"names a domain twice: {cfg.ngram.domains!r}")
    if not cfg.ngram.path:
        fail("ngram.path", "must be set with ngram.domains (train, or a path with {domain})")
    for key, value in (("data.train", cfg.data.train), ("data.dev", cfg.data.dev), ("ngram.path", cfg.ngram.path)):
        if value and not (key == "ngram.path" and value == "train") and "{domain}" not in value:
            fail(key, f"must contain {{domain}} with ngram.domains, got {value!r}")


def check_ngram(mode: str, alpha: float, anneal_steps: int, lam: float,
                fail: Callable[[str, str], None] = key_error) -> None:
    """NgramRes settings (attnmt/ngram/residual.py), from a config or from code."""
    if mode not in CHOICES["ngram.mode"]:
        fail("ngram.mode", f"must be one of {', '.join(CHOICES['ngram.mode'])}, not {mode!r}")
    if not math.isfinite(alpha) or alpha < 0:
        fail("ngram.alpha", f"must be a finite number >= 0, got {alpha}")
    if anneal_steps < 0:
        fail("ngram.anneal_steps", f"must be >= 0, got {anneal_steps}")
    if not 0.0 <= lam <= 1.0:
        fail("ngram.lam", f"(λ) must lie in [0, 1], got {lam}")


def _coerce(value: Any, typ: Any, where: str, path: str | None, line: int | None) -> Any:
    """``value`` as ``typ``. Only an int becomes a float and a number a string: a quoted "10" for
    an int key is an error, not 10 (the quotes say it is text; ``--set key=10`` is a number)."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    if typ is bool and isinstance(value, bool):
        return value
    if typ is int and number and isinstance(value, int):
        return value
    if typ is float and number:
        try:
            return float(value)
        except OverflowError:  # an int beyond float's range
            raise UserError(f"{where}: a number beyond float's range", path, line) from None
    if typ is str and (isinstance(value, str) or number):
        return str(value)
    quoted = " (quoted: a string)" if typ in (int, float, bool) and _quoted_scalar(value) else ""
    shown = repr(value) if len(repr(value)) <= 80 else repr(value)[:77] + "..."
    raise UserError(f"{where}: expected {typ.__name__}, got {shown}{quoted}", path, line)


def _quoted_scalar(value: Any) -> bool:
    """Whether ``value`` is text that YAML would read as a number or a bool without quotes: only
    quotes make "10" a string (``abc`` is a string with or without them)."""
    if not isinstance(value, str):
        return False
    try:
        plain = load_yaml(value)
    except (yaml.YAMLError, UserError):
        return False
    return isinstance(plain, (int, float, bool))


def unknown_key(name: str, known: list[str]) -> str:
    """"unknown key NAME (did you mean X?; known: ...)": the closest known key by spelling."""
    section, _, key = name.rpartition(".")
    close = difflib.get_close_matches(key, known, n=1, cutoff=0.6)
    hint = f"did you mean {section + '.' if section else ''}{close[0]}?; " if close else ""
    return f"unknown key {name} ({hint}known: {', '.join(known)})"


def apply_preset(cfg: Config, explicit: set[str], path: str | None = None,
                 lines: dict[tuple[str, ...], int] | None = None) -> Config:
    """Set the keys ``model.window_preset`` fixes (attention/window.PRESETS) to its values. A key in
    ``explicit`` (named in the file or by --set) with another value is an error: a preset row must
    be the preset, and an ablation says so by leaving the preset out."""
    from attnmt.attention.window import PRESETS

    if not isinstance(cfg.model, TransformerConfig):
        return cfg
    preset = PRESETS.get(cfg.model.window_preset)  # an unknown name: validate reports it
    for key, value in (preset or {}).items():
        if f"model.{key}" in explicit and getattr(cfg.model, key) != value:
            raise UserError(f"model.{key} {getattr(cfg.model, key)!r} contradicts model.window_preset "
                            f"{cfg.model.window_preset!r}, which sets it to {value!r}",
                            path, (lines or {}).get(("model", key)))
        setattr(cfg.model, key, value)
    return cfg


def _model_section(body: dict, path: str | None, lines: dict[tuple[str, ...], int]
                   ) -> LSTMConfig | TransformerConfig:
    """The ``model:`` mapping as its family's config (``type`` picks it, default lstm). A key of
    the other family is an error naming it, unless it holds that family's default (a config.yaml
    saved before the split lists every key)."""
    kind = body.get("type", "lstm")
    if kind not in FAMILIES:
        raise UserError(f"model.type must be one of {', '.join(FAMILIES)}, not {kind!r}",
                        path, lines.get(("model", "type")))
    model = FAMILIES[kind]()
    hints = typing.get_type_hints(type(model))
    for key, value in body.items():
        where = lines.get(("model", key))
        if key in hints:
            setattr(model, key, _coerce(value, hints[key], f"model.{key}", path, where))
            continue
        if _variant_options(model, key, value, path, lines):
            continue
        owner = family_of_key(key)
        if owner is None:
            hint = f" ({plugins.HINT})" if isinstance(value, dict) else ""
            raise UserError(unknown_key(f"model.{key}", list(hints)) + hint, path, where)
        other = FAMILIES[owner]
        at_default = _coerce(value, typing.get_type_hints(other)[key], f"model.{key}", path, where) == getattr(other(), key)
        if not (at_default and PRE_SPLIT_KEYS <= set(body)):
            raise UserError(f"model.{key} applies to model.type {owner}, not {kind}", path, where)
    return model


def _variant_options(model: LSTMConfig | TransformerConfig, section: str, body: Any, path: str | None,
                     lines: dict[tuple[str, ...], int]) -> bool:
    """Read ``model.<section>``, a registered variant's options, into ``model.variant_options``
    (each key typed by the variant's ``Options``); False where no variant's options are named so."""
    from attnmt.attention.variant import options_section

    unit = options_section(section)
    if unit is None:
        return False
    where = lines.get(("model", section))
    if not isinstance(model, TransformerConfig):
        raise UserError(f"model.{section} applies to model.type transformer, not {model.type}", path, where)
    if body is None:
        body = {}
    if not isinstance(body, dict):
        raise UserError(f"model.{section} must be a mapping of the {section} variant's options", path, where)
    hints = typing.get_type_hints(unit.Options)
    known = [f.name for f in dataclasses.fields(unit.Options)]
    values = {}
    for key, value in body.items():
        at = lines.get(("model", section, key), where)
        if key not in known:
            raise UserError(f"unknown key model.{section}.{key} (known: {', '.join(known)})", path, at)
        values[key] = _coerce(value, hints[key], f"model.{section}.{key}", path, at)
    model.variant_options[section] = unit.Options(**values)
    return True


def _user_dir(raw: dict, path: str | None, lines: dict[tuple[str, ...], int]) -> str:
    """The plug-in folder a config needs, imported now (the command line's --user-dir in place of
    the config's): its resolved path, or "". A relative path is the config file's neighbour (of
    the working directory for --set)."""
    given = plugins.given()
    if given is not None:
        return str(given)
    value = raw.get("user_dir")
    if value in (None, ""):
        return ""
    where = lines.get(("user_dir",))
    if not isinstance(value, str):
        raise UserError(f"user_dir must be a folder's path, got {value!r}", path, where)
    folder = Path(value).expanduser()
    if not folder.is_absolute() and path is not None and path != "--set":
        folder = Path(path).parent / folder
    return str(plugins.load(folder, path, where))


def from_dict(raw: Any, path: str | None = None, text: str = "", explicit: set[str] | None = None) -> Config:
    """A Config from a parsed YAML mapping. ``explicit``: the section.key names the user set (for
    the preset check; default: every key in ``raw``)."""
    lines = key_lines(text) if text else {}
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise UserError("a config must be a mapping of sections (data, model, train)", path, 1)
    cfg = Config()
    cfg.user_dir = _user_dir(raw, path, lines)  # first: its plug-ins may own model keys
    sections = {f.name: f for f in dataclasses.fields(Config)}
    for name, body in raw.items():
        if name == "user_dir":
            continue
        if name == "task":
            if body not in TASKS:
                raise UserError(f"task must be one of {', '.join(TASKS)}", path, lines.get((name,)))
            cfg.task = body
            continue
        if name not in sections:
            close = difflib.get_close_matches(name, [*sections, "task"], n=1, cutoff=0.6)
            hint = f"did you mean {close[0]!r}?; " if close else ""
            raise UserError(
                f"unknown section {name!r} ({hint}expected {', '.join(sections)})", path, lines.get((name,))
            )
        if body is None:
            continue
        if not isinstance(body, dict):
            raise UserError(f"section {name!r} must be a mapping", path, lines.get((name,)))
        if name == "model":
            cfg.model = _model_section(body, path, lines)
            continue
        section = getattr(cfg, name)
        hints = typing.get_type_hints(type(section))
        for key, value in body.items():
            if key not in hints:
                raise UserError(unknown_key(f"{name}.{key}", list(hints)), path, lines.get((name, key)))
            typed = _coerce(value, hints[key], f"{name}.{key}", path, lines.get((name, key)))
            setattr(section, key, typed)
    if explicit is None:
        explicit = {f"{name}.{key}" for name, body in raw.items() if isinstance(body, dict) for key in body}
    return apply_preset(cfg, explicit, path, lines)


def load_config(path: str | Path, overrides: list[str] | None = None) -> Config:
    """Read a YAML config and apply ``section.key=value`` overrides."""
    path = str(path)
    if not path.strip():
        raise UserError("the config path is empty")
    text = read_small_text(path, SMALL_TEXT_BYTES, "YAML config file")  # no FIFO, no /dev/zero
    try:
        raw = load_yaml(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        problem = getattr(err, "problem", None) or "malformed YAML"
        raise UserError(f"malformed YAML: {problem}", path, mark.line + 1 if mark else None) from None
    duplicate = duplicate_key(text)
    if duplicate is not None:
        raise UserError(f"duplicate key {duplicate[0]} (only one value may be given)", path, duplicate[1])
    cfg = apply_overrides(from_dict(raw, path, text), overrides or [])
    lines = key_lines(text)
    overridden = {item.partition("=")[0].strip() for item in overrides or []}

    def where(key: str) -> tuple[str | None, int | None]:
        if key in overridden:
            return "--set", None
        return path, lines.get(tuple(key.split(".")))

    return validate(cfg, where)


def apply_overrides(cfg: Config, overrides: list[str]) -> Config:
    raw = cfg.to_dict()
    for item in overrides:
        key, sep, value = item.partition("=")
        parts = key.strip().split(".")
        if sep and parts in (["task"], ["user_dir"]):
            raw[parts[0]] = value.strip()
            continue
        if not sep or not (len(parts) == 2 or (len(parts) == 3 and parts[0] == "model")):
            raise UserError(f"--set expects section.key=value (model.<variant>.key=value), got {item!r}")
        section, name = parts[:2]
        if not isinstance(raw.setdefault(section, {}), dict):
            raise UserError(f"--set {item}: unknown section {section!r}")
        target = raw[section]
        if len(parts) == 3:  # a variant's option: model.<variant>.<key>
            if not isinstance(target.setdefault(name, {}), dict):
                raise UserError(f"--set {key.strip()}: model.{name} is a key, not a variant's options")
            target, name = target[name], parts[2]
        try:
            target[name] = load_yaml(value) if value.strip() else ""
        except yaml.YAMLError as err:
            problem = getattr(err, "problem", None) or "malformed YAML"
            raise UserError(f"--set {key.strip()}: malformed YAML value {value!r} ({problem})") from None
    # only the overridden keys are the user's here: the others hold cfg's values (a preset's included)
    explicit = {item.partition("=")[0].strip() for item in overrides}
    family = FAMILIES.get(raw["model"].get("type")) if isinstance(raw.get("model"), dict) else None
    if family is not None:  # --set model.type=...: the old family's keys the user did not set go
        own = {f.name for f in dataclasses.fields(family)}
        for key in sorted(k for k in explicit if k.startswith("model.") and k[6:] not in own):
            owner = family_of_key(key[6:])
            if owner is not None:  # (an unknown key: from_dict names it)
                raise UserError(f"{key} applies to model.type {owner}, not {raw['model']['type']}", "--set")
        sections = isinstance(family, type) and issubclass(family, TransformerConfig)  # variants' options
        raw["model"] = {k: v for k, v in raw["model"].items() if k in own or f"model.{k}" in explicit
                        or (isinstance(v, dict) and (sections or any(e.startswith(f"model.{k}.") for e in explicit)))}
    return from_dict(raw, "--set", explicit=explicit)


def save_config(cfg: Config, path: str | Path) -> None:
    import os

    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(yaml.safe_dump(cfg.to_dict(), sort_keys=False), encoding="utf-8")
    os.replace(tmp, path)


DEVICE_NAME = re.compile(r"auto|cpu|cuda(:\d+)?")  # what --device and train.device accept

# Bounds of the numbers (the choices are checked in validate): (key, test, what it must be).
BOUNDS: list[tuple[str, Callable[[Any], bool], str]] = [
    *[(k, lambda v: v >= 1, "at least 1") for k in (
        "model.layers", "model.hidden", "model.embed", "model.heads", "model.ff", "model.max_src_len",
        "model.max_positions", "model.window_segment", "model.relative_clip", "train.epochs",
        "train.batch_size", "train.accumulate", "train.log_every", "data.max_len", "ngram.order",
        "train.valid_beam", "train.bucket_pool", "data.tokenizer_sample")],
    *[(k, lambda v: v >= 0, ">= 0") for k in (
        "model.window", "model.sigma", "model.window_temperature", "train.decay_start", "train.warmup",
        "train.clip", "train.init_uniform", "train.max_time", "train.max_steps", "train.valid_every",
        "train.save_every", "train.threads", "train.row_groups", "ngram.anneal_steps",
        "train.valid_max_sentences", "train.patience", "data.max_ratio", "data.tokenizer_sample_chars")],
    *[(k, lambda v: v >= 5, "at least 5 (4 special tokens + 1)") for k in (
        "data.src_vocab_size", "data.tgt_vocab_size")],
    ("train.lr", lambda v: v > 0, "> 0"),
    ("train.decay", lambda v: 0 < v <= 1, "in (0, 1]"),
    ("model.dropout", lambda v: 0 <= v < 1, "in [0, 1)"),
    ("train.label_smoothing", lambda v: 0 <= v < 1, "in [0, 1)"),
    ("train.ema", lambda v: 0 <= v < 1, "in [0, 1) (0 = off)"),
    ("data.spm_alpha", lambda v: 0 <= v <= 1, "in [0, 1] (0 = off)"),
    ("train.device", lambda v: bool(DEVICE_NAME.fullmatch(v)), "auto, cpu, cuda or cuda:N"),
    ("data.src", lambda v: bool(v.strip()), "a language suffix (not empty)"),
    ("data.tgt", lambda v: bool(v.strip()), "a language suffix (not empty)"),
]


# Largest values (a config asking for more is a typo or an attack: 10**30 steps, a million
# layers); every other whole number is at most INT_MAX.
INT_MAX = 10**15
MAXIMA = {"model.layers": 1000, "model.heads": 4096, "model.hidden": 1 << 20, "model.embed": 1 << 20,
          "model.ff": 1 << 22, "model.max_src_len": 1 << 24, "model.max_positions": 1 << 24,
          "model.window": 1 << 24, "model.window_segment": 1 << 24, "model.relative_clip": 1 << 24,
          "data.src_vocab_size": 1 << 27, "data.tgt_vocab_size": 1 << 27, "data.max_len": 1 << 24,
          "train.accumulate": 1 << 20, "train.threads": 1 << 12, "train.row_groups": 1 << 12,
          "ngram.order": 64}


def check_bounds(cfg: Config, fail: Callable[[str, str], None]) -> None:
    """Every number finite and in its range (``BOUNDS``, ``MAXIMA``): ``fail(key, message)`` for
    the first that is not. A zero epoch count, vocabulary or length limit would train nothing and
    exit 0; an absurdly large one would allocate or loop without end."""
    values = [(f"{section}.{name}", value) for section in ("data", "model", "train", "ngram")
              for name, value in dataclasses.asdict(getattr(cfg, section)).items()]
    values += [(f"model.{section}.{name}", value)
               for section, options in getattr(cfg.model, "variant_options", {}).items()
               for name, value in dataclasses.asdict(options).items()]
    for key, value in values:
        if isinstance(value, float) and not math.isfinite(value):
            fail(key, f"must be a finite number, got {value}")
        if isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) > MAXIMA.get(key, INT_MAX):
            fail(key, f"must be at most {MAXIMA.get(key, INT_MAX)}, got {value:.6g}")
    for key, test, what in BOUNDS:
        section, name = key.split(".")
        if not hasattr(getattr(cfg, section), name):
            continue  # the other model family's key
        value = getattr(getattr(cfg, section), name)
        if not test(value):
            fail(key, f"must be {what}, got {value!r}")
