"""NgramRes (Li et al. 2022): a neural model that learns the residual of an n-gram LM.

The neural logits φ(h_k) and the n-gram log-distribution are added before the softmax (eq. 9)

    P(x_k | x_<k) = softmax( φ(h_k) + α · log P_NG(· | x_{k-n+1}^{k-1}) )[x_k]

over the whole vocabulary; log P_NG = softmax⁻¹(Q) up to a constant (eq. 8), which the softmax
ignores. α is fixed, or annealed linearly to 0 over the first K updates (NgramRes-Anneal, Table 3):
α_s = α · max(0, 1 − s / K). The baseline Prob-Inter interpolates probabilities instead,

    P = λ · softmax(φ(h_k)) + (1 − λ) · P_NG        (returned as log-probabilities),

which the search's log_softmax leaves unchanged.

``NgramResidual`` is an explicit head over any generation model (seq2seq.py's interface:
forward / encode / init_state / step), so LSTM seq2seq, LSTM LM and the Transformers get it
without changes:

    forward(src, src_lengths, tgt_in)  adds α · ngram.sequence_logprobs(tgt_in)        (B, T, V)
    step(prefix, state, enc)           adds α · ngram.next_token_logprobs(prefix[:, -(n-1):])

It offers that interface and nothing else of the network: code that needs the network itself
(its decoder, its fast paths) reads ``Run.network`` (runs/loader.py), the one place that looks
through the head (``unwrap``). It has no ``token_loss``, so the trainer computes its loss from
``forward`` and never skips the n-gram term.

The n-gram model is no parameter or buffer: the wrapper's ``state_dict`` *is* the wrapped model's,
so a checkpoint of an NgramRes run loads into the plain model and vice versa, and swapping the
n-gram file (plug and play) touches no neural weight. Config (``ngram:`` section)::

    ngram: {path: tgt.5gram.bin, alpha: 0.1, anneal_steps: 0, mode: residual, lam: 0.9}

``path: train`` estimates an ``order``-gram model from the run's tokenised training targets when
training starts and keeps it as RUN/ngram.train.bin.

Multi-domain LMs as Li et al. 2022 (section 5.2) ran them: ``domains: "it law ..."`` trains one
neural model on every domain's text, each sentence with *its own domain's* n-gram (path with
``{domain}``, or ``train``: RUN/ngram.train.<domain>.bin from that domain's training text). The
trainer's LM batches carry each sentence's domain index as its one source token (an LM ignores
its source; train/data.py), and ``forward`` picks the n-gram per sentence. At test the n-gram is
chosen per file (``attnmt eval --ngram``), as in the paper.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import torch
from torch import nn

from attnmt.config import Config, NgramConfig, check_ngram
from attnmt.errors import UserError
from attnmt.ngram.model import NgramLM, load_ngram

TRAIN_PATH = "train"  # ngram.path value: estimate from the training targets
TRAIN_FILE = "ngram.train.bin"


def annealed_alpha(alpha: float, anneal_steps: int, step: int) -> float:
    """α_s = α · max(0, 1 − s/K) for K > 0 (reaches 0 at update K), else α."""
    if anneal_steps <= 0:
        return alpha
    return alpha * max(0.0, 1.0 - step / anneal_steps)


def combine(logits: torch.Tensor, ng_logp: torch.Tensor, mode: str, alpha: float, lam: float) -> torch.Tensor:
    """Neural logits (…, V) and n-gram natural-log probabilities (…, V) -> combined scores (…, V).

    residual: φ + α·log P_NG (logits; α = 0 returns ``logits`` itself, bit for bit).
    interp:   log(λ·softmax(φ) + (1−λ)·P_NG)   (normalised log-probabilities).
    """
    if mode == "residual":
        if alpha == 0.0:
            return logits
        # float32: under bf16 autocast, log-probabilities of size ~10 would lose 2 decimals
        return torch.add(logits.float(), ng_logp.float(), alpha=alpha)
    neural = torch.log_softmax(logits.float(), dim=-1)
    if lam >= 1.0:
        return neural
    if lam <= 0.0:
        return ng_logp.float()
    return torch.logaddexp(neural + math.log(lam), ng_logp.float() + math.log1p(-lam))


class NgramResidual(nn.Module):
    """A generation model plus an n-gram LM combined at the logit (or probability) level."""

    def __init__(
        self,
        model: nn.Module,
        ngram: NgramLM,
        alpha: float = 0.1,
        anneal_steps: int = 0,
        mode: str = "residual",
        lam: float = 0.9,
        step_fn: Callable[[], int] | None = None,
    ):
        super().__init__()
        check_ngram(mode, alpha, anneal_steps, lam)
        self.model = model
        self.ngram = ngram  # a plain object: not a parameter, not in state_dict
        self.base_alpha, self.anneal_steps, self.mode, self.lam = alpha, anneal_steps, mode, lam
        # The trainer passes ``lambda: trainer.step`` so annealing follows the update count (also
        # across --resume); a loaded checkpoint fixes the step it was saved at.
        self.step_fn: Callable[[], int] = step_fn or (lambda: 0)
        # ngram.domains: n-gram k scores the sentences whose source token is k (module docstring)
        self.domain_ngrams: list[NgramLM] = []

    # -- settings ------------------------------------------------------------------------------
    @property
    def alpha(self) -> float:
        return annealed_alpha(self.base_alpha, self.anneal_steps, self.step_fn())

    def set_ngram(self, ngram: NgramLM) -> None:
        self.ngram = ngram

    def set_alpha(self, alpha: float) -> None:
        """A fixed α from now on (annealing off)."""
        check_ngram(self.mode, alpha, 0, self.lam)
        self.base_alpha, self.anneal_steps = alpha, 0

    def _active(self) -> bool:
        return self.mode == "interp" or self.alpha != 0.0

    def _ng(self, device: torch.device, ngram: NgramLM | None = None) -> NgramLM:
        ngram = ngram or self.ngram
        if ngram._device != device:
            ngram.to(device)
        return ngram

    def _sequence_logprobs(self, src: torch.Tensor, tgt_in: torch.Tensor) -> torch.Tensor:
        """(B, T, V) n-gram log-probabilities of ``tgt_in``: each sentence's own domain's n-gram
        when the batch carries domain indices (an LM's one source token), else ``self.ngram``."""
        if not self.domain_ngrams or src.dim() != 2 or src.size(1) != 1:
            return self._ng(tgt_in.device).sequence_logprobs(tgt_in)
        domain = src[:, 0]
        out = None
        for k in domain.unique().tolist():
            rows = (domain == k).nonzero().squeeze(1)
            part = self._ng(tgt_in.device, self.domain_ngrams[k]).sequence_logprobs(tgt_in[rows])
            if out is None:
                out = part.new_empty(tgt_in.size(0), *part.shape[1:])
            out[rows] = part
        return out

    # -- the generation interface --------------------------------------------------------------
    def forward(self, src, src_lengths, tgt_in, need_weights: bool = False):
        logits, weights = self.model(src, src_lengths, tgt_in, need_weights)  # (B, T, V)
        if not self._active():
            return logits, weights
        ng = self._sequence_logprobs(src, tgt_in)  # (B, T, V): row t predicts t+1
        return combine(logits, ng, self.mode, self.alpha, self.lam), weights

    def encode(self, src, src_lengths):
        return self.model.encode(src, src_lengths)

    def init_state(self, enc):
        return self.model.init_state(enc)

    def step(self, prefix, state, enc, need_weights: bool = False):
        logits, state, weights = self.model.step(prefix, state, enc, need_weights)  # (B, V)
        if not self._active():
            return logits, state, weights
        ng = self._ng(prefix.device)
        context = prefix[:, max(0, prefix.size(1) - (ng.order - 1)):]  # the last n-1 tokens
        return combine(logits, ng.next_token_logprobs(context), self.mode, self.alpha, self.lam), state, weights

    # -- checkpoints hold the plain model's weights only --------------------------------------
    def state_dict(self, *args, **kwargs):
        return self.model.state_dict(*args, **kwargs)

    def load_state_dict(self, state_dict, strict: bool = True, assign: bool = False):
        return self.model.load_state_dict(state_dict, strict=strict, assign=assign)

    @property
    def has_attention(self) -> bool:
        """Whether the network attends over a source (part of the generation interface the
        search and force decoding read)."""
        return getattr(self.model, "has_attention", True)


def unwrap(model: nn.Module) -> nn.Module:
    """The neural model inside an NgramResidual head (or DDP wrapper); ``Run.network`` is how
    the rest of the toolkit asks."""
    model = getattr(model, "module", model) if isinstance(model, nn.parallel.DistributedDataParallel) else model
    return model.model if isinstance(model, NgramResidual) else model


def check_vocab(ngram: NgramLM, tgt_tok, where: str) -> None:
    """The n-gram ids must be the neural target vocabulary's ids (``ngram build --vocab-from``)."""
    n = len(tgt_tok)
    differ = next((i for i in range(4, n) if ngram.vocab[i] != tgt_tok.piece(i)), None) \
        if ngram.vocab_size == n else None
    if ngram.vocab_size != n or differ is not None:
        how = (f"{ngram.vocab_size} entries, the run's {n}" if ngram.vocab_size != n else
               f"id {differ} is {ngram.vocab[differ]!r}, the run's {tgt_tok.piece(differ)!r}")
        raise UserError(f"n-gram vocabulary is not the run's target vocabulary ({how}); build it "
                        "with `attnmt ngram build --vocab-from RUN_DIR`", where)


def resolve_path(path: str, run_dir: str | Path | None) -> Path:
    """``train`` -> RUN/ngram.train.bin; other relative paths: as given, else inside the run."""
    if path == TRAIN_PATH:
        if run_dir is None:
            raise UserError("ngram.path: train needs a run directory")
        return Path(run_dir) / TRAIN_FILE
    p = Path(path)
    if not p.is_absolute() and not p.exists() and run_dir is not None and (Path(run_dir) / p).exists():
        return Path(run_dir) / p
    return p


def build_train_ngram(train_tgt: Sequence[Sequence[int]] | np.ndarray, tgt_tok, order: int,
                      dest: Path) -> NgramLM:
    """Estimate the target-side model from the tokenised training data (ids = tgt_tok's): token-id
    sentences, or a flat ``<s> .. </s>`` array (ngram/corpus.flat_from_ragged)."""
    from attnmt.data.vocab import SPECIALS

    vocab = list(SPECIALS) + [tgt_tok.piece(i) for i in range(len(SPECIALS), len(tgt_tok))]
    sentences = train_tgt if isinstance(train_tgt, np.ndarray) else [s for s in train_tgt if s]
    lm = NgramLM.estimate(sentences, vocab, order=order)
    lm.save(dest)
    return lm


def attach_ngram(
    model: nn.Module,
    cfg: Config,
    run_dir: str | Path | None,
    tgt_tok,
    step: int = 0,
    step_fn: Callable[[], int] | None = None,
    train_targets: Callable[[int | None], np.ndarray] | None = None,
    sync: Callable[[], None] = lambda: None,
) -> nn.Module:
    """Wrap ``model`` as ``cfg.ngram`` says; the model itself when no n-gram is configured.

    The trainer passes ``step_fn`` (annealing follows training) and ``train_targets`` (to estimate
    ``path: train`` on first start: the flat ``<s> .. </s>`` ids of the training targets, of
    domain k or all; ranks without it wait in ``sync`` and then load the file); loading a
    checkpoint passes its ``step``. With ``domains`` the wrapper gets one n-gram per domain (the
    first is its ``ngram``, which sentences without a domain index use).
    """
    ng: NgramConfig = cfg.ngram
    if not ng.path:
        return model
    domains = ng.domains.split()
    if not domains:
        paths = [resolve_path(ng.path, run_dir)]
    elif ng.path == TRAIN_PATH:
        paths = [resolve_path(ng.path, run_dir).with_name(f"ngram.train.{name}.bin") for name in domains]
    else:
        paths = [resolve_path(ng.path.replace("{domain}", name), run_dir) for name in domains]
    if ng.path == TRAIN_PATH and not all(p.exists() for p in paths):
        if train_targets is not None:
            for k, path in enumerate(paths):
                own = train_targets(k if domains else None)
                if not len(own):
                    raise UserError(f"ngram.domains: no training sentence of domain {domains[k]!r}")
                build_train_ngram(own, tgt_tok, ng.order, path)
        sync()
    lms = [load_ngram(p) for p in paths]
    for lm, path in zip(lms, paths):
        check_vocab(lm, tgt_tok, str(path))
    fn = step_fn or (lambda: step)
    wrapper = NgramResidual(model, lms[0], ng.alpha, ng.anneal_steps, ng.mode, ng.lam, fn)
    wrapper.domain_ngrams = lms if domains else []
    return wrapper


_STEP = re.compile(r"step-(\d+)")


def checkpoint_step(ckpt_dir: str | Path) -> int:
    """The update count in a checkpoint directory's name (step-00001200 -> 1200)."""
    m = _STEP.search(Path(ckpt_dir).name)
    return int(m.group(1)) if m else 0


def override(
    model: nn.Module,
    cfg: Config,
    tgt_tok,
    ngram_path: str | None = None,
    alpha: float | None = None,
) -> nn.Module:
    """Plug and play: swap the n-gram model and/or fix α of a loaded model (wrapping a plain one,
    with ``cfg.ngram``'s settings as defaults). The neural weights are untouched."""
    if ngram_path is None and alpha is None:
        return model
    if isinstance(model, NgramResidual):
        wrapper = model
    else:
        if ngram_path is None:
            raise UserError("this model has no n-gram LM; give one with --ngram")
        wrapper = None
    lm = None
    if ngram_path is not None:
        lm = load_ngram(ngram_path)
        check_vocab(lm, tgt_tok, ngram_path)
    if wrapper is None:
        wrapper = NgramResidual(model, lm, cfg.ngram.alpha, 0, cfg.ngram.mode, cfg.ngram.lam)
    elif lm is not None:
        wrapper.set_ngram(lm)
    if alpha is not None:
        wrapper.set_alpha(alpha)
    return wrapper
