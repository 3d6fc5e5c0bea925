"""The configuration's keys: one dataclass per section, each key with its default and a comment.

``Config`` holds the sections (data, model, train, ngram); ``model:`` is per family,
``LSTMConfig`` or ``TransformerConfig`` (``ModelConfig(type=...)`` makes either), each with its
own ``check``. Reading YAML, ``--set`` overrides and the checks of choices and bounds live in
attnmt/config.py, which also exports every name here.
"""

from __future__ import annotations

import abc
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from attnmt import plugins
from attnmt.errors import UserError


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


# the Transformer attention kinds a task's model has
ATTENTION_KINDS = {
    "translate": ("enc_self_attention", "dec_self_attention", "cross_attention"),
    "lm": ("dec_self_attention",),
    "classify": ("enc_self_attention",),
}
