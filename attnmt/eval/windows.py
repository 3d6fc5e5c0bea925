"""Window visualisation: each layer's soft masks M and attention weights for one input, as PNG
figures, and the predicted window boundaries as JSON (``attnmt analyse windows``).

For a translation run the sentence is translated first (greedy, or --target forces the output)
and the decoder is run with teacher forcing on it; an LM run reads the sentence as its text; a
classifier run encodes it. Per attention kind (encoder self, decoder self, cross) and layer, one
PNG shows every head's soft mask (top row; blank where the layer has no window) and attention
(bottom row). The JSON lists, per kind/layer/head and query, the hard window [min(l, r), max(l, r)]
from the pointers' argmax, the expected boundaries E[l], E[r] and the mask values.

``attnmt analyse window-stats`` summarises how local the learned windows are over many sentences
(width, distance of the window's centre from the query or the diagonal, attention inside it).
"""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot is imported: no display on servers
import matplotlib.pyplot as plt
import torch

from attnmt.attention.window import window_boundaries
from attnmt.data.vocab import BOS
from attnmt.errors import UserError
from attnmt.jsonio import dumps
from attnmt.runs.loader import load_run


def transformer_run(run_dir: str | Path, checkpoint: str = "best"):
    """(model, cfg, src tokenizer|None, tgt tokenizer|LabelSet) of any Transformer run, on CPU;
    the neural model alone (a run's n-gram model does not change its attention)."""
    run = load_run(run_dir, checkpoint, "cpu")
    if run.cfg.model.type != "transformer":
        raise UserError("window analysis needs a run with model.type: transformer", str(run_dir))
    return run.network, run.cfg, run.src_tok, run.tgt_tok


@torch.no_grad()
def collect(model, cfg, src_tok, tgt_tok, sentence: str, target: str | None = None) -> dict:
    """Run the model on one sentence and gather per-layer internals.

    Returns {"src": pieces, "tgt": pieces, "kinds": {kind: [per layer {attn, mask?, phi_l?, phi_r?}]}}
    with every tensor (H, T, S) for the one sentence."""
    if target is not None and cfg.task != "translate":  # it would be ignored
        raise UserError(f"--target is for translation runs; this run's task is {cfg.task}")
    if target is not None and not target.strip():
        raise UserError("--target is empty: give the translation to force, or leave it out")
    kinds: dict[str, list] = {}
    if cfg.task == "lm":
        ids = tgt_tok.encode(sentence)
        tgt_in = torch.tensor([[BOS] + ids])
        internals: list = []
        model.hidden(tgt_in, internals=internals)
        pieces = ["<s>"] + [tgt_tok.piece(i) for i in ids]
        kinds["decoder self"] = [x["self"] for x in internals]
        return {"src": pieces, "tgt": pieces, "kinds": kinds}
    src_ids = src_tok.encode(sentence) or [1]
    src = torch.tensor([src_ids])
    lengths = torch.tensor([len(src_ids)])
    src_pieces = [src_tok.piece(i) for i in src_ids]
    enc_int: list = []
    if cfg.task == "classify":
        model.encode(src, lengths, internals=enc_int)
        kinds["encoder self"] = [x["self"] for x in enc_int]
        return {"src": src_pieces, "tgt": src_pieces, "kinds": kinds}
    enc = model.encode(src, lengths, internals=enc_int)
    if target is None:
        from attnmt.decode.search import greedy_search

        out_ids = greedy_search(model, src, lengths)[0][0].tokens
    else:
        out_ids = tgt_tok.encode(target)
    tgt_in = torch.tensor([[BOS] + out_ids])
    dec_int: list = []
    model.decode(tgt_in, enc, internals=dec_int)
    tgt_pieces = ["<s>"] + [tgt_tok.piece(i) for i in out_ids]
    kinds["encoder self"] = [x["self"] for x in enc_int]
    kinds["decoder self"] = [x["self"] for x in dec_int]
    kinds["cross"] = [x["cross"] for x in dec_int]
    return {"src": src_pieces, "tgt": tgt_pieces, "kinds": kinds, "translation": tgt_tok.decode(out_ids)}


def _axes_labels(kind: str, src: list[str], tgt: list[str]) -> tuple[list[str], list[str]]:
    """(query labels, key labels) of an attention kind."""
    if kind == "encoder self":
        return src, src
    if kind == "cross":
        return tgt, src
    return tgt, tgt


def boundaries(layer: dict) -> list[dict] | None:
    """Per head: hard windows [min(argmax l, argmax r), max(...)] and expected E[l], E[r]."""
    if "phi_l" not in layer:
        return None
    phi_l, phi_r = layer["phi_l"][0], layer["phi_r"][0]  # (H, T, S)
    pos = torch.arange(phi_l.size(-1), dtype=phi_l.dtype)
    lo, hi = window_boundaries(phi_l, phi_r)
    heads = []
    for h in range(phi_l.size(0)):
        heads.append({
            "window": [[a, b] for a, b in zip(lo[h].tolist(), hi[h].tolist())],
            "expected_left": [round(float(x), 3) for x in (phi_l[h] * pos).sum(-1)],
            "expected_right": [round(float(x), 3) for x in (phi_r[h] * pos).sum(-1)],
            "mask": [[round(float(x), 3) for x in row] for row in layer["mask"][0, h]],
        })
    return heads


def plot_layer(layer: dict, queries: list[str], keys: list[str], title: str, path: Path) -> None:
    attn = layer["attn"][0]  # (H, T, S)
    H = attn.size(0)
    fig, axes = plt.subplots(2, H, figsize=(2.8 * H + 1, 6), squeeze=False)
    for h in range(H):
        for row, (name, data) in enumerate((("mask M", layer.get("mask")), ("attention", attn))):
            ax = axes[row][h]
            if data is None:
                ax.axis("off")
                ax.set_title(f"head {h}: no window", fontsize=8)
                continue
            data = data[0, h] if data.dim() == 4 else data[h]
            top = 1.0 if row == 0 else max(float(data.max()), 1e-6)  # masks on [0, 1]; weights to max
            ax.imshow(data.float().numpy(), cmap="Greys", vmin=0.0, vmax=top, aspect="auto")
            ax.set_title(f"head {h}: {name}", fontsize=8)
            small = max(len(keys), len(queries)) <= 40
            ax.set_xticks(range(len(keys)))
            ax.set_xticklabels(keys if small else [""] * len(keys), rotation=90, fontsize=6)
            ax.set_yticks(range(len(queries)))
            ax.set_yticklabels(queries if small and h == 0 else [""] * len(queries), fontsize=6)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def analyse_windows(run_dir: str, sentence: str, out_dir: str, checkpoint: str = "best",
                    target: str | None = None) -> dict:
    """Write one PNG per (kind, layer) and windows.json into out_dir; returns the JSON object."""
    if not sentence.strip():
        raise UserError("--input is empty")
    model, cfg, src_tok, tgt_tok = transformer_run(run_dir, checkpoint)
    data = collect(model, cfg, src_tok, tgt_tok, sentence, target)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    report: dict = {"input": sentence, "src": data["src"], "tgt": data["tgt"], "layers": []}
    if "translation" in data:
        report["translation"] = data["translation"]
    variants = {"encoder self": cfg.model.enc_self_attention, "decoder self": cfg.model.dec_self_attention,
                "cross": cfg.model.cross_attention}
    for kind, layers in data["kinds"].items():
        queries, keys = _axes_labels(kind, data["src"], data["tgt"])
        for i, layer in enumerate(layers):
            name = f"{kind.replace(' ', '_')}_layer{i + 1}.png"
            windowed = "mask" in layer
            title = f"{kind} attention, layer {i + 1}: {variants[kind] if windowed else 'standard'}"
            plot_layer(layer, queries, keys, title, out / name)
            report["layers"].append({"kind": kind, "layer": i + 1, "png": name,
                                     "variant": variants[kind] if windowed else "standard",
                                     "queries": queries, "keys": keys, "heads": boundaries(layer)})
    tmp = out / "windows.json.tmp"
    tmp.write_text(dumps(report, ensure_ascii=False, indent=1), encoding="utf-8")
    tmp.replace(out / "windows.json")
    return report


# ---------------------------------------------------------------- how local are the learned windows?


def window_statistics(layer: dict, kind: str) -> dict | None:
    """Locality of one windowed layer on one sentence: sums over heads and queries (see below).

    Per head h and query i over S keys (divide the sums by ``queries`` for means):
      width      Σ_j M[i, j] / S — the share of keys inside the soft window: 1 is the whole
                 sentence; pointers blind to position (uniform φ̂) give about 1/3.
      hard_width (|argmax φ̂_r − argmax φ̂_l| + 1) / S.
      offset     |(E[l] + E[r]) / 2 − p_i| / S: how far the window's centre is from the query's
                 own position, p_i = i for self-attention and the diagonal i·(S−1)/(T−1) for
                 cross-attention (T target positions).
      inside     share of the query's attention mass inside the hard window [min(l, r), max(l, r)].
    Returns None for a layer without a window.
    """
    if "phi_l" not in layer:
        return None
    phi_l, phi_r, mask, attn = (layer[k][0].float() for k in ("phi_l", "phi_r", "mask", "attn"))  # (H, T, S)
    H, T, S = phi_l.shape
    keys = torch.arange(S, dtype=torch.float32)
    centre = ((phi_l * keys).sum(-1) + (phi_r * keys).sum(-1)) / 2  # (H, T)
    query = torch.arange(T, dtype=torch.float32)
    own = query * (S - 1) / max(T - 1, 1) if kind == "cross" else query  # (T,)
    lo, hi = window_boundaries(phi_l, phi_r)  # (H, T)
    inside = (keys >= lo.unsqueeze(-1)) & (keys <= hi.unsqueeze(-1))  # (H, T, S)
    return {
        "queries": H * T,
        "width": float(mask.sum(-1).sum() / S),
        "hard_width": float(((hi - lo + 1).float() / S).sum()),
        "offset": float(((centre - own).abs() / S).sum()),
        # as a share of each row's mass: multiplicative windows without renormalisation sum to < 1
        "inside": float(((attn * inside).sum(-1) / attn.sum(-1).clamp_min(1e-12)).sum()),
    }


def corpus_window_statistics(run_dir: str, input_path: str, target_path: str | None = None,
                             limit: int = 200, checkpoint: str = "best") -> dict:
    """Mean window statistics per (attention kind, layer) over the first ``limit`` non-empty lines.

    Translation runs decode greedily unless ``target_path`` gives the outputs to force (the
    references: faster, and the windows are then those of the reference alignment)."""
    from attnmt.data.corpus import read_lines

    model, cfg, src_tok, tgt_tok = transformer_run(run_dir, checkpoint)
    inputs = read_lines(input_path)
    targets = read_lines(target_path) if target_path else None
    if targets is not None and len(targets) != len(inputs):
        raise UserError(f"has {len(targets)} lines but {input_path} has {len(inputs)}", target_path)
    variants = {"encoder self": cfg.model.enc_self_attention, "decoder self": cfg.model.dec_self_attention,
                "cross": cfg.model.cross_attention}
    totals: dict[tuple[str, int], dict] = {}
    used = 0
    for number, line in enumerate(inputs):
        if used >= limit:
            break
        if cfg.task == "classify":
            line = line.split("\t")[0]  # text<TAB>label[<TAB>group] files work as they are
        if not line.strip() or (targets is not None and not targets[number].strip()):
            continue
        data = collect(model, cfg, src_tok, tgt_tok, line, targets[number] if targets else None)
        used += 1
        for kind, layers in data["kinds"].items():
            for i, layer in enumerate(layers):
                stats = window_statistics(layer, kind)
                if stats is not None:
                    total = totals.setdefault((kind, i + 1), dict.fromkeys(stats, 0.0))
                    for key, value in stats.items():
                        total[key] += value
    if used == 0:
        raise UserError("no non-empty lines to analyse", input_path)
    layers = [{"kind": kind, "layer": layer, "variant": variants[kind],
               **{k: round(v / total["queries"], 4) for k, v in total.items() if k != "queries"}}
              for (kind, layer), total in totals.items()]
    return {"model": str(run_dir), "sentences": used, "layers": layers}
