"""A Transformer run as a CTranslate2 model directory (``attnmt export --format ctranslate2``).

CTranslate2 (OpenNMT's C++ inference engine) describes an encoder–decoder Transformer by a
``ctranslate2.specs.TransformerSpec``; this module fills one with a run's weights through that
public spec API (validate, optimize = alias equal tensors and quantize, save). Where each weight
goes, attnmt → CTranslate2 (per layer of each stack):

    src_embed / tgt_embed .embed     encoder.embeddings[0] / decoder.embeddings; both engines
                                     multiply by √d (CTranslate2's ``scale_embeddings``)
    positions sinusoidal | learned   ``position_encodings.encodings``: the table itself (attnmt's
                                     sinusoids interleave sin and cos, CTranslate2's own put them
                                     in halves), ``POSITIONS`` rows (learned: the run's table, its
                                     last row repeated up to ``POSITIONS`` as attnmt reuses it)
    positions none                   a zero table; none at all in a stack whose self-attention is
                                     relative (CTranslate2 adds no absolute positions there)
    self_attn q, k, v / o            self_attention.linear[0] = [W_q; W_k; W_v] stacked / linear[1]
    cross_attn q / k, v / o          attention.linear[0] / linear[1] = [W_k; W_v] / linear[2]
    self_attn.relative key / value   self_attention.relative_position_keys / _values, (2k+1, d_head):
                                     a^K, a^V of clip(j − i, k) + k in both (CTranslate2 reads k
                                     from the table's rows)
    self_norm, cross_norm, ff_norm   each sub-layer's layer_norm (pre: before it; post: after the
                                     residual sum), ε of the run's LayerNorm
    final_norm (pre-norm)            encoder.layer_norm / decoder.layer_norm
    output                           decoder.projection, with a bias of −10⁴ on <pad> and <s>,
                                     which attnmt's search never emits (decode/search.py)

Vocabularies are the pieces of ids 0 … V−1 in order, so ids agree; <unk>, <s>, </s> (ids 1, 2, 3,
data/vocab.py) are CTranslate2's unknown, decoder start and end tokens. Alignment attention is
the last decoder layer's cross-attention averaged over all heads, as attnmt's. The directory also
holds the run's tokenizer files (``src.spm.model``/``tgt.spm.model`` or ``src.vocab``/
``tgt.vocab``: ``attnmt.data.vocab.load_tokenizer(DIR, side)`` reads them) and ``attnmt.json``
(where it came from, the lowercasing); export/ct2_translate.py is the serving side, text in and
text out without PyTorch (``attnmt translate --engine ctranslate2``).

What CTranslate2 cannot express is refused by ``unsupported`` with the config key: LSTM models,
LM and classifier runs, NgramRes heads, localness and window attention, relative attention on top
of absolute positions, reversed sources.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import torch

from attnmt.config import Config
from attnmt.data.vocab import BOS, EOS, PAD, UNK, Tokenizer
from attnmt.errors import UserError
from attnmt.export import QUANTIZATIONS
from attnmt.export.ct2_translate import INFO, ctranslate2_module
from attnmt.runs.checkpoint import find_checkpoint
from attnmt.runs.loader import load_run, read_run

POSITIONS = 1024  # rows of an exported position table: CTranslate2's default max_input_length
BLOCKED = -1e4  # output bias of <pad> and <s>: exp(−10⁴) is 0, and finite in float16 too


def unsupported(cfg: Config) -> str | None:
    """Why CTranslate2's Transformer cannot run this configuration (one line that names the config
    key), or None when it can."""
    m = cfg.model
    if cfg.task != "translate":
        return f"task: {cfg.task}: only translation runs export (CTranslate2's TransformerSpec)"
    if m.type != "transformer":
        return f"model.type: {m.type}: only the Transformer exports to CTranslate2"
    if cfg.ngram.path:
        return "ngram.path: the NgramRes n-gram head has no CTranslate2 counterpart"
    if cfg.data.reverse_source:
        return "data.reverse_source: true: CTranslate2 reads the source in order"
    for kind in ("enc_self_attention", "dec_self_attention"):
        variant = getattr(m, kind)
        if variant not in ("standard", "relative"):
            return f"model.{kind}: {variant}: CTranslate2 has standard and relative self-attention only"
    if m.cross_attention != "standard":
        return f"model.cross_attention: {m.cross_attention}: CTranslate2's cross-attention is standard only"
    if "relative" in (m.enc_self_attention, m.dec_self_attention) and m.positions != "none":
        return (f"model.positions: {m.positions} with relative self-attention: CTranslate2 adds no absolute "
                "positions to a relative stack (train with --set model.positions=none)")
    return None


def _array(t: torch.Tensor):
    return t.detach().to("cpu", torch.float32).contiguous().numpy().copy()


def _linear(spec, *linears: torch.nn.Linear) -> None:
    """``spec`` = the maps ``linears`` stacked along their outputs ([W_1; W_2; ...], biases alike)."""
    spec.weight = _array(torch.cat([lin.weight for lin in linears]))
    if linears[0].bias is not None:
        spec.bias = _array(torch.cat([lin.bias for lin in linears]))


def _norm(spec, norm: torch.nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _array(norm.weight), _array(norm.bias)


def _positions(stack_spec, embedder, relative: bool) -> None:
    """The position table the stack adds after √d · embedding (see the module docstring)."""
    if relative:
        return  # CTranslate2's relative stack has no position_encodings (and attnmt adds none)
    from attnmt.models.transformer import sinusoidal

    d = embedder.embed.embedding_dim
    if embedder.learned is not None:  # attnmt reuses the last row beyond the table: so does the export
        table = embedder.learned.weight
        table = torch.cat([table, table[-1:].expand(max(POSITIONS - len(table), 0), d)])
    elif embedder.absolute:
        table = sinusoidal(POSITIONS, d)
    else:
        table = torch.zeros(POSITIONS, d)
    stack_spec.position_encodings.encodings = _array(table)


def _attention(spec, attn, cross: bool) -> None:
    if cross:
        _linear(spec.linear[0], attn.q)
        _linear(spec.linear[1], attn.k, attn.v)
    else:
        _linear(spec.linear[0], attn.q, attn.k, attn.v)
    _linear(spec.linear[-1], attn.o)
    if attn.variant == "relative":
        spec.relative_position_keys = _array(attn.relative.key.weight)
        spec.relative_position_values = _array(attn.relative.value.weight)


def _layer(spec, layer) -> None:
    _attention(spec.self_attention, layer.self_attn, cross=False)
    _norm(spec.self_attention.layer_norm, layer.self_norm)
    if layer.cross_attn is not None:
        _attention(spec.attention, layer.cross_attn, cross=True)
        _norm(spec.attention.layer_norm, layer.cross_norm)
    _linear(spec.ffn.linear_0, layer.ff.w1)
    _linear(spec.ffn.linear_1, layer.ff.w2)
    _norm(spec.ffn.layer_norm, layer.ff_norm)


def _stack_layers(ct2, stack_spec, stack, relative: bool) -> None:
    """Layers above ``model.attention_layers`` use standard attention in attnmt: their spec loses
    the relative tables (CTranslate2 reads relative positions per layer)."""
    for layer_spec, layer in zip(stack_spec.layer, stack.layers):
        if relative and layer.self_attn.variant != "relative":
            layer_spec.self_attention = ct2.specs.attention_spec.MultiHeadAttentionSpec(self_attention=True)
        _layer(layer_spec, layer)


def vocabulary(tok: Tokenizer, side: str, where: str) -> list[str]:
    """The pieces of ids 0 … V−1; CTranslate2 maps pieces to ids through this list, so each must
    be unique and the special ids must hold attnmt's special pieces."""
    pieces = [tok.piece(i) for i in range(len(tok))]
    if len(set(pieces)) != len(pieces):
        raise UserError(f"the {side} vocabulary names a piece twice; CTranslate2 maps pieces to ids", where)
    return pieces


def build_spec(model, cfg: Config, src_tok: Tokenizer, tgt_tok: Tokenizer, where: str):
    """The ``TransformerSpec`` of a loaded attnmt ``Transformer`` (weights set, vocabularies registered)."""
    ct2 = ctranslate2_module()
    from ctranslate2.specs import transformer_spec

    m = cfg.model
    pre = m.norm == "pre"
    enc_rel, dec_rel = m.enc_self_attention == "relative", m.dec_self_attention == "relative"
    encoder = transformer_spec.TransformerEncoderSpec(m.layers, m.heads, pre_norm=pre, relative_position=enc_rel)
    decoder = transformer_spec.TransformerDecoderSpec(m.layers, m.heads, pre_norm=pre, relative_position=dec_rel,
                                                      alignment_layer=-1, alignment_heads=m.heads)
    spec = transformer_spec.TransformerSpec(encoder, decoder)

    encoder.embeddings[0].weight = _array(model.src_embed.embed.weight)
    decoder.embeddings.weight = _array(model.tgt_embed.embed.weight)
    _positions(encoder, model.src_embed, enc_rel)
    _positions(decoder, model.tgt_embed, dec_rel)
    _stack_layers(ct2, encoder, model.encoder, enc_rel)
    _stack_layers(ct2, decoder, model.decoder, dec_rel)
    if pre:
        _norm(encoder.layer_norm, model.encoder.final_norm)
        _norm(decoder.layer_norm, model.decoder.final_norm)
    decoder.projection.weight = _array(model.output.weight)
    bias = torch.zeros(model.output.weight.size(0))
    bias[[PAD, BOS]] = BLOCKED
    decoder.projection.bias = _array(bias)

    src_vocab, tgt_vocab = vocabulary(src_tok, "source", where), vocabulary(tgt_tok, "target", where)
    if [src_vocab[i] for i in (UNK, BOS, EOS)] != [tgt_vocab[i] for i in (UNK, BOS, EOS)]:
        raise UserError("the source and target vocabularies name <unk>, <s>, </s> differently; "
                        "CTranslate2 has one name for each", where)
    spec.register_source_vocabulary(src_vocab)
    spec.register_target_vocabulary(tgt_vocab)
    spec.config.unk_token, spec.config.bos_token, spec.config.eos_token = (tgt_vocab[i] for i in (UNK, BOS, EOS))
    spec.config.decoder_start_token = tgt_vocab[BOS]
    spec.config.layer_norm_epsilon = model.encoder.layers[0].self_norm.eps
    return spec


def _check_out(out: Path, run_dir: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise UserError("--out must be a directory, not a file", str(out))
    if out.resolve() == run_dir.resolve() or run_dir.resolve().is_relative_to(out.resolve()):
        raise UserError("--out must not be the run directory or hold it", str(out))
    if out.is_dir() and any(out.iterdir()) and not force:
        raise UserError("already exists and is not empty (pass --force to replace it)", str(out))


def export_ctranslate2(run_dir: str | os.PathLike, out_dir: str | os.PathLike, quantization: str | None = None,
                       checkpoint: str = "best", force: bool = False) -> dict:
    """Write the run's ``checkpoint`` as a CTranslate2 model directory ``out_dir``; returns what
    ``attnmt.json`` records. ``quantization``: one of ``QUANTIZATIONS`` (None: float32 weights).
    The directory is built under a temporary name beside ``out_dir`` and renamed into place when
    complete; an existing non-empty ``out_dir`` is replaced only with ``force``."""
    run_dir, out = Path(run_dir), Path(out_dir)
    if quantization is not None and quantization not in QUANTIZATIONS:
        raise UserError(f"--quantization must be one of {', '.join(QUANTIZATIONS)}, got {quantization!r}")
    cfg, _, _ = read_run(run_dir)
    why = unsupported(cfg)
    if why:
        raise UserError(f"cannot export to CTranslate2: {why}", str(run_dir / "config.yaml"))
    _check_out(out, run_dir, force)
    ctranslate2_module()  # before loading the weights: a missing package is the first thing to report
    run = load_run(run_dir, checkpoint, device="cpu")
    spec = build_spec(run.model, run.cfg, run.src_tok, run.tgt_tok, str(run_dir))
    for side, tok in (("src", run.src_tok), ("tgt", run.tgt_tok)):
        name = f"{side}.spm.model" if tok.kind == "spm" else f"{side}.vocab"
        spec.register_file(str(run_dir / name), name)
    spec.validate()
    spec.optimize(quantization=quantization)
    info = {"format": "ctranslate2", "run": str(run_dir), "checkpoint": find_checkpoint(run_dir, checkpoint).name,
            "quantization": quantization or "float32", "tokenizer": run.src_tok.kind,
            "lowercase": cfg.data.lowercase, "positions": POSITIONS}

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    aside = out.with_name(f".{out.name}.old-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        tmp.mkdir()
        spec.save(str(tmp))
        (tmp / INFO).write_text(json.dumps(info, indent=2) + "\n", encoding="utf-8")
        if out.is_dir() and any(out.iterdir()):  # --force (checked above): the old one goes aside first
            os.replace(out, aside)
        os.replace(tmp, out)  # a directory may replace an empty one
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        if aside.exists() and not out.exists():
            os.replace(aside, out)
        raise
    shutil.rmtree(aside, ignore_errors=True)
    return info
