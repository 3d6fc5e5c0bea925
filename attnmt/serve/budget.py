"""The response budget: how large the JSON answer to a request can get, before decoding it.

Request limits (sentences, tokens, beam) do not bound the answer: with ``attention`` every
hypothesis carries a (target pieces × source pieces) matrix, so ``nbest × T × S`` numbers per
sentence, where the output length T may reach ``max_len_ratio · S + 10`` pieces (at most
``MAX_OUTPUT_PIECES``). ``response_bound`` adds up the worst case of every part of the answer in
bytes of its JSON; the server refuses a request whose bound is over ``--max-response-bytes`` (413)
and admits requests only while the bounds of all requests in flight stay under
``--max-pending-bytes`` (503), so neither one answer nor the server's memory grows with what a small
request asks for.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

# Output length of the search: min(MAX_OUTPUT_PIECES, ceil(max_len_ratio · S) + OUTPUT_EXTRA)
# pieces (attnmt/decode/search.py; the server passes MAX_OUTPUT_PIECES as max_len_cap).
MAX_OUTPUT_PIECES = 512
OUTPUT_EXTRA = 10

# Bytes of the fixed parts: keys, brackets, a float score, the model name and timing fields.
RESPONSE_OVERHEAD = 256
SENTENCE_OVERHEAD = 128
HYPOTHESIS_OVERHEAD = 320
CELL_BYTES = 7  # one attention weight rounded to 4 decimals, "0.1234", and its comma


def json_bytes(text: str) -> int:
    """Length in bytes of ``text`` as a JSON string (quotes and escapes included)."""
    return len(json.dumps(text, ensure_ascii=False).encode("utf-8", "surrogatepass"))


def widest_piece(tokenizer) -> int:
    """Most bytes one target piece adds to a JSON string (its escaped form plus a space)."""
    widest = max((json_bytes(tokenizer.piece(i)) for i in range(len(tokenizer))), default=8)
    return max(widest, 8) + 1  # <unk> surfaces (" ⁇ ") and the separating space


def output_pieces(src_pieces: int, max_len_ratio: float, floor: int = 0) -> int:
    """The search's length limit (decode.search.max_lengths): ``floor`` is what a forced prefix
    and constraints need (decode.guides.Guides.floor), which may pass the cap."""
    return max(min(MAX_OUTPUT_PIECES, math.ceil(max_len_ratio * max(src_pieces, 1)) + OUTPUT_EXTRA), floor)


@dataclass
class Ask:
    """What a request asks for, as far as the size of its answer goes."""

    nbest: int
    max_len_ratio: float
    attention: bool
    alignment: bool


def sentence_bound(source: str, src_pieces: list[str], ask: Ask, piece_bytes: int, floor: int = 0) -> int:
    """Most bytes of one sentence's entry in the answer (blank sentences are not decoded)."""
    echo = json_bytes(source)
    if not source.strip():
        return SENTENCE_OVERHEAD + echo
    s = len(src_pieces)
    t = output_pieces(s, ask.max_len_ratio, floor)
    text = t * piece_bytes + 2
    hyp = HYPOTHESIS_OVERHEAD + text
    if ask.attention or ask.alignment:
        words_out = text // 2 + 1  # words are separated by at least one space
        index = len(str(max(t, s, words_out))) + 1  # an index and its comma
        words_in = len(source.split())
        hyp += echo + 3 * words_in  # src_words
        hyp += text + 3 * words_out  # tgt_words
        hyp += words_out * (2 * index + 4)  # alignment pairs [i,j],
        hyp += words_out * (2 * index + 2)  # pharaoh "i-j "
    if ask.attention:
        hyp += sum(json_bytes(p) + 1 for p in src_pieces) + t * (piece_bytes + 3)  # pieces
        hyp += (s + t) * (len(str(max(t, s))) + 1)  # word index of every piece
        hyp += t * (CELL_BYTES * s + 3)  # the matrix
    return SENTENCE_OVERHEAD + echo + text + ask.nbest * hyp


def response_bound(
    sources: list[str], pieces: list[list[str]], ask: Ask, piece_bytes: int, model: str,
    floors: list[int] | None = None,
) -> int:
    """Most bytes the JSON answer to a request can take (``floors``: per sentence, the output
    length its prefix and constraints need)."""
    floors = floors or [0] * len(sources)
    body = sum(sentence_bound(s, p, ask, piece_bytes, f) for s, p, f in zip(sources, pieces, floors))
    return RESPONSE_OVERHEAD + json_bytes(model) + body


class Budget:
    """Bytes reserved by the requests in flight (their bounds); used from the event loop only."""

    def __init__(self, limit: int):
        self.limit, self.used = limit, 0

    def take(self, amount: int) -> bool:
        if self.used and self.used + amount > self.limit:
            return False
        self.used += amount
        return True

    def give(self, amount: int) -> None:
        self.used -= amount
