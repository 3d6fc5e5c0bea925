"""From text to text: load a trained run and translate lines with greedy or beam search.

Used by ``attnmt translate``, the HTTP server and the experiment scripts. Each result carries the
detokenised text, its score, the sub-word pieces and, on request, the attention matrix and word
alignments in Pharaoh form (``i-j``: 0-based whitespace-word indices of source and output).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import torch

from attnmt.config import Config, load_config
from attnmt.data.batching import collate
from attnmt.data.vocab import Tokenizer, load_tokenizer, map_pieces_to_words
from attnmt.decode.search import Hypothesis, beam_search, greedy_search
from attnmt.models import build_model
from attnmt.runs.checkpoint import find_checkpoint, load_weights
from attnmt.runs.device import resolve_device


@dataclass
class Translation:
    text: str
    score: float
    src_pieces: list[str]
    tgt_pieces: list[str]
    attention: torch.Tensor | None = None  # (len(tgt_pieces), len(src_pieces)), source in input order
    alignment: list[tuple[int, int]] = field(default_factory=list)  # (src word, tgt word)
    src_word_of_piece: list[int] = field(default_factory=list)
    tgt_word_of_piece: list[int] = field(default_factory=list)

    def pharaoh(self) -> str:
        return " ".join(f"{i}-{j}" for i, j in self.alignment)


def load_model(run_dir: str | Path, checkpoint: str = "best", device: torch.device | None = None):
    """(model, config, src tokenizer, tgt tokenizer) of a training run, in eval mode."""
    run_dir = Path(run_dir)
    cfg = load_config(run_dir / "config.yaml")
    src_tok = load_tokenizer(run_dir, "src") if cfg.task == "translate" else None
    tgt_tok = load_tokenizer(run_dir, "tgt")
    model = build_model(cfg, len(src_tok) if src_tok else 0, len(tgt_tok))
    ckpt = find_checkpoint(run_dir, checkpoint)
    weights = load_weights(ckpt / "model.safetensors")
    from attnmt.ngram.residual import attach_ngram, checkpoint_step

    model = attach_ngram(model, cfg, run_dir, tgt_tok, step=checkpoint_step(ckpt))  # the run's n-gram
    try:
        model.load_state_dict(weights)
    except RuntimeError as err:
        from attnmt.errors import UserError

        raise UserError(f"weights do not fit the config ({str(err).splitlines()[0]})", str(run_dir)) from None
    model.to(device or torch.device("cpu")).eval()
    return model, cfg, src_tok, tgt_tok


def word_alignment(attention: torch.Tensor, src_words: list[int], tgt_words: list[int]) -> list[tuple[int, int]]:
    """For every output word, the source word with the most attention (pieces summed per source
    word, averaged per target word). attention: (T pieces, S pieces)."""
    if attention is None or not src_words or not tgt_words:
        return []
    n_src, n_tgt = max(src_words) + 1, max(tgt_words) + 1
    src_map = torch.zeros(len(src_words), n_src)
    src_map[torch.arange(len(src_words)), torch.tensor(src_words)] = 1.0
    tgt_map = torch.zeros(n_tgt, len(tgt_words))
    tgt_map[torch.tensor(tgt_words), torch.arange(len(tgt_words))] = 1.0
    word_attn = tgt_map @ attention @ src_map  # (n_tgt, n_src)
    best = word_attn.argmax(dim=1).tolist()
    return [(best[j], j) for j in range(n_tgt) if tgt_map[j].sum() > 0]


class Translator:
    def __init__(self, model, cfg: Config, src_tok: Tokenizer, tgt_tok: Tokenizer, device: torch.device):
        self.model, self.cfg, self.src_tok, self.tgt_tok, self.device = model, cfg, src_tok, tgt_tok, device

    @classmethod
    def from_run(cls, run_dir: str | Path, checkpoint: str = "best", device: str = "auto") -> Translator:
        dev = resolve_device(device)
        model, cfg, src_tok, tgt_tok = load_model(run_dir, checkpoint, dev)
        return cls(model, cfg, src_tok, tgt_tok, dev)

    def _prepare(self, line: str) -> tuple[list[str], list[int], list[int]]:
        if self.cfg.data.lowercase:
            line = line.lower()
        pieces, words = self.src_tok.split_with_words(line)
        ids = self.src_tok.encode_pieces(pieces)[: self.cfg.model.max_src_len if self._location else None]
        return pieces[: len(ids)], words[: len(ids)], ids

    @property
    def _location(self) -> bool:
        return self.cfg.model.attention == "global" and self.cfg.model.score == "location"

    def translate(
        self,
        lines: list[str],
        beam: int = 5,
        nbest: int = 1,
        batch_size: int = 32,
        length_penalty: float = 1.0,
        max_len_ratio: float = 2.0,
        with_attention: bool = False,
        max_len_cap: int = 512,
    ) -> list[list[Translation]]:
        """Outputs stop at min(max_len_ratio · |x| + 10, max_len_cap) pieces; raise the cap for
        documents (a chapter is thousands of pieces)."""
        prepared = [self._prepare(line) for line in lines]
        order = sorted(range(len(lines)), key=lambda i: len(prepared[i][2]), reverse=True)
        results: list[list[Translation]] = [[] for _ in lines]
        need = with_attention and getattr(self.model, "has_attention", True)
        for start in range(0, len(order), batch_size):
            chunk = order[start : start + batch_size]
            ids = [prepared[i][2] or [self.src_tok.encode_pieces(["<unk>"])[0]] for i in chunk]
            if self.cfg.data.reverse_source:
                ids = [seq[::-1] for seq in ids]
            batch = collate(ids, None, chunk).to(self.device)
            if beam <= 1:
                hyps = greedy_search(self.model, batch.src, batch.src_lengths, max_len_ratio,
                                     max_len_cap=max_len_cap, need_weights=need)
            else:
                hyps = beam_search(self.model, batch.src, batch.src_lengths, beam, nbest, length_penalty,
                                   max_len_ratio, max_len_cap=max_len_cap, need_weights=need)
            for i, sent_hyps in zip(chunk, hyps):
                results[i] = [self._finish(prepared[i], h, len(ids[chunk.index(i)])) for h in sent_hyps]
        return results

    def _finish(self, prepared, hyp: Hypothesis, src_len: int) -> Translation:
        src_pieces, src_words, _ = prepared
        tgt_pieces = [self.tgt_tok.piece(i) for i in hyp.tokens]
        text = self.tgt_tok.decode(hyp.tokens)
        result = Translation(text, hyp.score, src_pieces, tgt_pieces)
        if hyp.attention is not None:
            attn = hyp.attention[: len(hyp.tokens), :src_len]  # drop the </s> step and padding
            if self.cfg.data.reverse_source:
                attn = attn.flip(-1)  # back to input order
            attn = attn[:, : len(src_pieces)]
            result.attention = attn
            result.src_word_of_piece = src_words
            result.tgt_word_of_piece = map_pieces_to_words(tgt_pieces, text)
            result.alignment = word_alignment(attn, src_words, result.tgt_word_of_piece)
        return result
