"""From text to text: load a trained run and translate lines with greedy or beam search.

Used by ``attnmt translate``, the HTTP server and the experiment scripts. Each result carries the
detokenised text, its score, the sub-word pieces and, on request, the attention matrix and word
alignments in Pharaoh form (``i-j``: 0-based whitespace-word indices of source and output).
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch

from attnmt.config import Config
from attnmt.data.batching import Batch, collate
from attnmt.data.vocab import Tokenizer, map_pieces_to_words
from attnmt.decode.constraints import constrained_beam_search
from attnmt.decode.force import word_attention
from attnmt.decode.guides import Guides, encode_guides
from attnmt.decode.options import SearchOptions, check_precision_flags
from attnmt.decode.prefix import ForcedPrefix
from attnmt.decode.processes import fork_applies, fork_map
from attnmt.decode.sampling import Sampler, chunk_generator, sample
from attnmt.decode.search import Hypothesis, beam_search, greedy_search
from attnmt.errors import UserError
from attnmt.kernels import packed
from attnmt.models.decoders import LuongDecoder
from attnmt.models.transformer import Transformer
from attnmt.progress import Bar, progress
from attnmt.runs.loader import Run, Source, load_run


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
    cut: bool = False  # the output stopped at max_len_cap pieces (SearchOptions.at_cap "keep")
    precision: str = ""  # of the search's products: "bf16" or "float32" (SearchOptions.precision)

    def pharaoh(self) -> str:
        return " ".join(f"{i}-{j}" for i, j in self.alignment)


def word_alignment(attention: torch.Tensor, src_words: list[int], tgt_words: list[int]) -> list[tuple[int, int]]:
    """For every output word, the source word with the most attention (pieces summed per source
    word, averaged per target word). attention: (T pieces, S pieces)."""
    if attention is None or not src_words or not tgt_words:
        return []
    best = word_attention(attention, src_words, tgt_words).argmax(dim=1).tolist()
    present = set(tgt_words)
    return [(best[j], j) for j in range(len(best)) if j in present]


def _search_decoder(run: Run, flag: str) -> LuongDecoder:
    """The LSTM decoder whose search step (``infer_step``) ``flag`` changes, or a UserError."""
    decoder = getattr(run.network, "decoder", None)
    if not isinstance(decoder, LuongDecoder):
        raise UserError(f"{flag} applies to LSTM decoders (their search step); "
                        "this model has none")
    return decoder


def _bf16_switches(run: Run) -> list:
    """What ``--bf16`` turns on in a model (each has ``bf16_search``): its LSTM decoder (the
    search step's packed products), or every ``packed.PackedLinear`` of a Transformer; or a
    UserError."""
    network = run.network
    if isinstance(getattr(network, "decoder", None), LuongDecoder):
        return [network.decoder]
    linears = [m for m in network.modules() if isinstance(m, packed.PackedLinear)]
    if not linears:
        raise UserError("--bf16 applies to LSTM decoders and Transformers (their search "
                        "products); this model has neither")
    return linears


def _int8_switches(run: Run) -> list[tuple[object, str]]:
    """What ``--int8`` turns on, as (module, attribute): an LSTM decoder's output layer
    (``int8_output``), or every linear map of a Transformer (``PackedLinear.int8_search``: the
    decoder's per-step products, its output layer, and the encoder's, as CTranslate2's int8 does);
    or a UserError."""
    network = run.network
    if isinstance(network, Transformer):
        maps = [m for m in network.modules() if isinstance(m, packed.PackedLinear)]
        return [(lin, "int8_search") for lin in maps]
    try:
        return [(_search_decoder(run, "--int8"), "int8_output")]
    except UserError:
        raise UserError("--int8 applies to LSTM decoders (their search step) and Transformers; "
                        "this model is neither") from None


def use_int8_output_layer(runs: list[Run]) -> None:
    """``attnmt translate --int8``: the search's output layer W_s h̃_t of every model as an 8-bit
    product (kernels/packed.py, ``pack_int8``), and every map of a Transformer too.
    The output layer is the largest product of a search step (V × H per hypothesis); in 8 bits it
    runs ~2× faster on an AVX2 core. Logits move by the rounding of W_s (per row) and of h̃_t
    (7 bits over its range), so scores and, rarely, choices change: a speed option, off by
    default. On CPU only."""
    for run in runs:
        switches = _int8_switches(run)
        if run.device.type != "cpu" or not packed.INT8:
            raise UserError("--int8 needs the CPU and torch's oneDNN quantised linear "
                            "(torch.ops.onednn.qlinear_pointwise)")
        for module, name in switches:
            setattr(module, name, True)


def bf16_search_applies(runs: list[Run]) -> bool:
    """Whether ``attnmt translate`` searches in bfloat16 by default: every model an LSTM decoder
    or a Transformer on a CPU with bfloat16 units. There the float32 search is ~1.2-2x slower
    for the same BLEU (docs/results/race.md; docs/RESULTS.md: global dot with and without input
    feeding at 4,000 updates, BLEU 19.98 -> 19.97 and 17.97 -> 18.00; a Transformer, 13.03 ->
    13.03), though a quarter of the lines change."""
    try:
        for run in runs:
            _bf16_switches(run)
    except UserError:
        return False
    return bool(runs) and all(run.device.type == "cpu" for run in runs) and packed.native_bf16()


def use_bf16_products(runs: list[Run]) -> None:
    """``attnmt translate --bf16``: every packed product of the search step (the LSTM layers, W_c
    and, unless --int8, the output layer; a Transformer's ``PackedLinear`` maps: projections,
    feed-forward, output) on bfloat16 weights and inputs, float32 results, on a
    CPU with bfloat16 units (AVX-512 BF16 or AMX; kernels/packed.py ``native_bf16``), where they
    run several times faster than in float32. States and scores stay float32; logits move by the
    rounding, so, rarely, choices change (test BLEU moved by −0.01 and +0.07 on the race's
    models); the default of ``attnmt translate`` where ``bf16_search_applies``."""
    for run in runs:
        switches = _bf16_switches(run)
        if run.device.type != "cpu" or not packed.native_bf16():
            raise UserError("--bf16 needs a CPU with bfloat16 units (AVX-512 BF16 or AMX); "
                            "this one would emulate them, slower than float32")
        for switch in switches:
            switch.bf16_search = True


def set_search_precision(runs: list[Run], bf16: bool = False, float32: bool = False) -> str:
    """The search precision that ``attnmt translate`` and ``attnmt serve`` share: bfloat16 when
    asked (``--bf16``) or where ``bf16_search_applies`` and float32 was not asked for
    (``--float32``); float32 otherwise. Returns ``"bf16"`` or ``"float32"``."""
    check_precision_flags(bf16, float32)
    if bf16 or (not float32 and bf16_search_applies(runs)):
        use_bf16_products(runs)
        return "bf16"
    for run in runs:  # back to float32 where an earlier call chose bfloat16
        try:
            switches = _bf16_switches(run)
        except UserError:
            continue
        for switch in switches:
            switch.bf16_search = False
    return "float32"


class OutputCut(UserError):
    """An output stopped at ``max_len_cap`` pieces (``at_cap="error"``); ``line`` is 1-based."""

    def __init__(self, line: int, cap: int):
        super().__init__(f"the translation of line {line} was cut at the length cap of {cap} "
                         "pieces (max_len_cap); raise the cap or split the line")
        self.line, self.cap = line, cap


def prepare_search(runs: list[Run], options: SearchOptions, before: SearchOptions | None = None) -> str | None:
    """The one place where a search's precision and int8 set-up reach the models: ``--int8``
    (``use_int8_output_layer``), then ``set_search_precision`` for ``options.precision`` (None:
    the models stay as they are). ``before``: the options applied last, whose int8 is turned off
    when no longer asked for. Returns "bf16" or "float32", or None when precision is None."""
    if options.int8:
        use_int8_output_layer(runs)
    elif before is not None and before.int8:
        for run in runs:
            for module, name in _int8_switches(run):
                setattr(module, name, False)
    if options.precision is None:
        return None
    return set_search_precision(runs, bf16=options.precision == "bf16",
                                float32=options.precision == "float32")


class Translator:
    """Text in, ``Translation`` lists out, for every search: ``translate(lines, SearchOptions)``.

    The Translator owns what every front door shares: blank lines (``options.blank``), the length
    cap (``options.at_cap``), the search precision (``prepare``), forced prefixes and constraints
    (one per line, target text) and which search runs: constrained beam search for lines with
    constraints (decode/constraints.py), sampling (decode/sampling.py), else greedy or beam search
    (decode/search.py) with the prefixes as a mask."""

    parallel_batches = True  # batches may be searched by several threads at once
    # ... or by forked processes (decode/processes.py): ``attnmt translate`` turns it on; a
    # library or a server that holds other threads should not fork
    fork_workers = False

    def __init__(self, model, cfg: Config, src_tok: Tokenizer, tgt_tok: Tokenizer, device: torch.device):
        self.model, self.cfg, self.src_tok, self.tgt_tok, self.device = model, cfg, src_tok, tgt_tok, device
        self.run = Run(model, cfg, src_tok, tgt_tok)
        self.precision = "float32"  # of the search products, once ``prepare`` has set it
        self._prepared: SearchOptions | None = None

    @classmethod
    def from_run(cls, run_dir: str | Path, checkpoint: str = "best", device: str = "auto",
                 ngram: str | None = None, alpha: float | None = None,
                 raw_weights: bool = False) -> Translator:
        return cls.of(load_run(run_dir, checkpoint, device, ngram, alpha, raw_weights))

    @classmethod
    def of(cls, run: Run) -> Translator:
        translator = cls(run.model, run.cfg, run.src_tok, run.tgt_tok, run.device)
        translator.run = run  # with its name and the weights file it loaded, for messages
        return translator

    @property
    def runs(self) -> list[Run]:
        """The models behind this translator, each with what is needed to feed it text."""
        return [self.run]

    def prepare(self, options: SearchOptions) -> str:
        """Set the models' search precision and int8 output layer as ``options`` ask (once per
        change; ``translate`` calls it); returns the precision, "bf16" or "float32"."""
        last = self._prepared
        if last is None or (last.precision, last.int8) != (options.precision, options.int8):
            self.precision = prepare_search(self.runs, options, last) or self.precision
            self._prepared = options
        return self.precision

    def _prepare(self, line: str) -> Source:
        return self.run.source(line)

    def _batch(self, prepared: list[Source], index: list[int]) -> tuple[list[list[int]], Batch]:
        """(encoder input ids, batch on the device) of the sources ``prepared``."""
        ids = self.run.source_ids(prepared)
        return ids, collate(ids, None, index).to(self.device)

    def guides(self, lines: list[str], options: SearchOptions, prefixes: list[str] | None = None,
               constraints: list[list[str]] | None = None, prefix_source: str = "prefixes",
               constraint_source: str = "constraints", numbered: bool = True) -> tuple[list[int], Guides]:
        """(the lines that are decoded under ``options.blank``, their prefixes and constraints as
        target ids); every error a line's prefix or constraints can cause is raised here (the
        server checks a request with it before batching it with others)."""
        keep = [i for i, line in enumerate(lines) if options.blank == "decode" or line.strip()]
        guides = encode_guides(self.run, len(lines), keep, prefixes, constraints, prefix_source,
                               constraint_source, numbered)
        if guides.phrases is not None and options.sample is not None:
            raise UserError("constraints need beam search; sampling cannot keep them")
        return keep, guides

    def translate(
        self,
        lines: list[str],
        options: SearchOptions | None = None,
        *,
        prefixes: list[str] | None = None,
        constraints: list[list[str]] | None = None,
        prefix_source: str = "prefixes",
        constraint_source: str = "constraints",
        **changes,
    ) -> list[list[Translation]]:
        """Per line, its hypotheses (``options.nbest``, best first; ``[]`` for a blank line).

        ``options``: how to search (SearchOptions(); ``changes``, e.g. ``beam=3``, replace its
        fields). ``prefixes``: per line, target text the output must start with ("" for none);
        ``constraints``: per line, target phrases the output must contain. Errors in them name
        ``prefix_source`` / ``constraint_source`` (the file they came from) and the line.

        Outputs stop at min(max_len_ratio · |x| + max_len_extra, max_len_cap) pieces; one that
        reaches the cap is an ``OutputCut`` error unless ``at_cap="keep"``. ``workers``: batches
        searched at the same time, each on one CPU thread (0: as many as torch has threads, on
        CPU). On a few cores this beats one search whose every product is split across the
        cores: single-threaded products of a few hundred rows run near the core's peak, and the
        search's own bookkeeping runs in parallel too. Threads by default; forked processes
        with ``fork_workers`` (``attnmt translate``'s; decode/processes.py)."""
        options = options or SearchOptions()
        if not isinstance(options, SearchOptions):
            raise UserError(f"options must be a SearchOptions, not {type(options).__name__}; "
                            "give settings as keywords (beam=5)")
        options = options.with_(**changes) if changes else options.validate()
        self.prepare(options)
        keep, guides = self.guides(lines, options, prefixes, constraints, prefix_source, constraint_source)
        prepared = {i: self._prepare(lines[i]) for i in keep}
        order = sorted(keep, key=lambda i: len(prepared[i][2]), reverse=True)
        results: list[list[Translation]] = [[] for _ in lines]
        need = options.with_attention and getattr(self.model, "has_attention", True)
        seed = options.seed
        if seed is None and options.sample is not None:  # from torch's generator: manual_seed fixes it
            seed = int(torch.randint(0, 2**62, (1,)))

        def search(chunk: list[int]) -> list[list[Translation]]:
            ids, batch = self._batch([prepared[i] for i in chunk], chunk)
            found = self._search(batch, chunk, options, guides, seed, need)
            return [[self._finish(prepared[i], h, len(ids[k])) for h in hyps]
                    for k, (i, hyps) in enumerate(zip(chunk, found))]

        # lines with constraints take their own search; the others keep the fast paths
        groups = [[i for i in order if guides.constrained(i)], [i for i in order if not guides.constrained(i)]]
        size = options.batch_size
        chunks = [g[start : start + size] for g in groups for start in range(0, len(g), size)]
        with progress(len(keep), "translate") as bar:  # a bar only for a command on a terminal
            for chunk, found in zip(chunks, self._run_chunks(search, chunks, options.workers, bar)):
                for i, translations in zip(chunk, found):
                    results[i] = translations
        for i in keep:
            for t in results[i]:
                t.cut = len(t.tgt_pieces) >= options.max_len_cap
                t.precision = self.precision
        cut = next((i for i in keep if results[i] and results[i][0].cut), None)
        if cut is not None and options.at_cap == "error":  # an output stopped at the cap is no translation
            raise OutputCut(cut + 1, options.max_len_cap)
        return results

    def _search(self, batch: Batch, chunk: list[int], options: SearchOptions, guides: Guides,
                seed: int | None, need: bool) -> list[list[Hypothesis]]:
        """The hypotheses of one batch, by the search its options and lines ask for."""
        o, sampling = options, options.sampling()
        lengths = dict(max_len_ratio=o.max_len_ratio, max_len_extra=o.max_len_extra,
                       max_len_cap=o.max_len_cap, need_weights=need)
        prefix = ForcedPrefix([guides.prefixes[i] for i in chunk], self.device) if guides.prefixes else None
        if guides.constrained(chunk[0]):  # a chunk is all constrained or none
            phrases = [guides.phrases[i] for i in chunk]
            return constrained_beam_search(self.model, batch.src, batch.src_lengths, phrases,
                                           o.beam, o.nbest, o.length_penalty, stop=o.stop, forced=prefix,
                                           **lengths)
        if sampling is not None:
            sampler = Sampler(*sampling, o.temperature, chunk_generator(seed, min(chunk), self.device))
            return sample(self.model, batch.src, batch.src_lengths, sampler, forced=prefix, **lengths)
        if o.beam <= 1:
            return greedy_search(self.model, batch.src, batch.src_lengths, forced=prefix, **lengths)
        return beam_search(self.model, batch.src, batch.src_lengths, o.beam, o.nbest, o.length_penalty,
                           stop=o.stop, forced=prefix, **lengths)

    def _run_chunks(self, search, chunks: list[list[int]], workers: int, bar: Bar | None = None) -> list:
        """``[search(chunk) for chunk in chunks]``, by ``workers`` threads (or, with
        ``fork_workers``, processes) at once, each on one CPU thread; ``bar`` counts the lines."""
        bar = bar or Bar()
        threads = torch.get_num_threads()
        if workers <= 0:
            workers = threads if self.device.type == "cpu" else 1
        workers = min(workers, len(chunks)) if self.parallel_batches else 1

        def counted(chunk: list[int]):
            found = search(chunk)
            bar.update(len(chunk))
            return found

        if workers <= 1:
            return [counted(chunk) for chunk in chunks]
        if self.fork_workers and fork_applies(workers, self.device):
            started = [0]  # lines of the first k chunks: what the processes have taken by then
            for chunk in chunks:
                started.append(started[-1] + len(chunk))
            return fork_map(search, chunks, workers, lambda taken: bar.set(started[taken]))
        torch.set_num_threads(1)  # one thread per search; restored below
        try:
            with ThreadPoolExecutor(workers) as pool:
                return list(pool.map(counted, chunks))  # longest first: the pool balances the rest
        finally:
            torch.set_num_threads(threads)

    def _finish(self, prepared: Source, hyp: Hypothesis, src_len: int) -> Translation:
        src_pieces, src_words = prepared.pieces, prepared.words
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
