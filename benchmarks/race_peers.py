"""The peers of ``benchmarks/peer_race.py``: OpenNMT-py 3.5.1 and eole 0.6, each in its own venv,
with its configuration written from attnmt's (the same architecture and the same recipe).

Install steps (what ``install`` runs; a venv is ready when it holds the file READY):

    OpenNMT-py (python -m venv VENV; Python 3.11 is what it was tried on):
        VENV/bin/pip install torch==2.13.0
        VENV/bin/pip install --no-deps opennmt-py==3.5.1      # its metadata asks for torch<2.3
        VENV/bin/pip install  ONMT_DEPS                        # what onmt_train / onmt_translate import
    eole (needs Python >= 3.11 and torch 2.10-2.14):
        VENV/bin/pip install torch==2.13.0
        VENV/bin/pip install --no-deps 'eole==0.6.*'           # its own pins (protobuf, datasets, ...)
        VENV/bin/pip install  EOLE_DEPS                        # what `eole train/predict` import
                                                               # (found by trying, 2026-12-03, eole 0.6.4)

The mapping of attnmt's recipe (``peer_config``), for both peers:

    Adam β1 0.9, β2 0.98             adam_beta1 / adam_beta2 (eole also adam_eps 1e-9; OpenNMT-py
                                     3.5.1 hard-codes eps 1e-8: cannot match 1e-9)
    lr = peak · min(s/w, √(w/s))     decay_method noam, warmup_steps w, learning_rate =
                                     peak · √(d · w) (noam multiplies by d^-0.5 · w^-0.5 at the peak;
                                     d = the peer's hidden_size)
    label smoothing, clip            label_smoothing; max_grad_norm (attnmt clip 0 = none = 0)
    batches                          batch_type sents|tokens, batch_size (tokens: both count
                                     max(source, target) length × sentences, padded)
    init                             LSTM: param_init 0.1 uniform on both; Transformer: xavier
                                     uniform on the peer's matrices (attnmt: xavier on the linear
                                     maps, N(0, d^-1/2) on the embeddings: cannot match exactly)

What cannot match (Transformer): OpenNMT-py 3.5.1's output layer always has a bias (attnmt's has
none; eole: generator_bias false matches); both peers are pre-norm only in the configuration used
here (attnmt's configs/race-transformer.yaml is pre-norm, so they match); OpenNMT-py's layer-norm
eps is set to attnmt's 1e-5. The peers keep their own data pipeline (eole's filtertoolong needs a
tokenizer transform before it, so eole reads training pieces already filtered to ≤ max_len).
"""

from __future__ import annotations

import math
import re
import subprocess
import sys
from datetime import datetime
from pathlib import Path

ONMT_VERSION = "3.5.1"
EOLE_VERSION = "0.6.*"
ONMT_DEPS = [
    "configargparse", "pyyaml", "sacrebleu", "six", "tensorboard", "pyonmttok<2,>=1.37", "rapidfuzz",
    "pyahocorasick", "ctranslate2<5,>=4", "spacy", "fasttext-wheel", "flask", "waitress",
    "sentencepiece",
]
# eole 0.6.4's `eole` entry point imports every sub-command (converters, server, UI) at start-up
EOLE_DEPS = [
    "configargparse", "ctranslate2<5,>=4", "pyyaml", "sacrebleu", "safetensors",
    "sentencepiece<=0.2.2,>=0.1.94", "pydantic", "rich", "six", "pyonmttok<2,>=1.38.1", "rapidfuzz",
    "pyahocorasick", "numpy>=2.0", "huggingface_hub", "tokenizers", "aiohttp", "requests", "uvicorn",
    "fastapi", "pillow",
]
PEERS = ("opennmt", "eole")
TITLE = {"opennmt": f"OpenNMT-py {ONMT_VERSION}", "eole": "eole 0.6"}


class RaceError(Exception):
    """A problem that stops the race: printed as one line, exit status 2."""


def install(peer: str, venv: Path) -> Path:
    """The peer's venv (made once; READY marks a finished install); returns its bin folder."""
    bin_dir = venv / "bin"
    tool = "onmt_train" if peer == "opennmt" else "eole"
    if (bin_dir / tool).exists() and (venv / "READY").exists():
        return bin_dir
    steps = [["torch==2.13.0"]]
    if peer == "opennmt":
        steps += [["--no-deps", f"opennmt-py=={ONMT_VERSION}"], ONMT_DEPS]
    else:
        steps += [["--no-deps", f"eole=={EOLE_VERSION}"], EOLE_DEPS]
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, capture_output=True)
        pip = [str(bin_dir / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        for step in steps:
            subprocess.run(pip + step, check=True, capture_output=True)
    except subprocess.CalledProcessError as err:
        last = (err.stderr or b"").decode(errors="replace").strip().splitlines()[-1:] or [""]
        raise RaceError(f"cannot install {TITLE[peer]} into {venv}: {last[0][:200]}") from None
    (venv / "READY").write_text("ok\n")
    return bin_dir


def noam_lr(peak: float, d: int, warmup: int) -> float:
    """The noam ``learning_rate`` whose schedule peaks at ``peak`` after ``warmup`` updates:
    noam(s) = lr · d^-0.5 · min(s^-0.5, s · w^-1.5), so noam(w) = lr / √(d·w)."""
    return peak * math.sqrt(d * warmup)


def _recipe(cfg, d: int) -> dict:
    """attnmt's optimiser recipe as the keys both peers share."""
    t = cfg.train
    if t.optimizer != "adam":
        raise RaceError("the race maps attnmt's Adam recipe only (train.optimizer: adam)")
    out = {"optim": "adam", "adam_beta1": 0.9, "adam_beta2": 0.98, "label_smoothing": t.label_smoothing,
           "max_grad_norm": t.clip, "batch_type": t.batch_by, "batch_size": t.batch_size,
           "normalization": "tokens" if t.loss_norm == "tokens" else "sents"}
    if t.schedule == "rsqrt":
        out.update(decay_method="noam", warmup_steps=t.warmup, learning_rate=round(noam_lr(t.lr, d, t.warmup), 6))
    elif t.schedule == "constant" and t.warmup <= 1:
        out.update(learning_rate=t.lr)
    else:
        raise RaceError(f"train.schedule {t.schedule!r} with warm-up has no noam equivalent")
    return out


def _default_recipe() -> dict:
    """OpenNMT-py's reference LSTM recipe (Adam 0.001 constant, gradient norm 5, no smoothing)."""
    return {"optim": "adam", "learning_rate": 0.001, "max_grad_norm": 5, "batch_type": "sents", "batch_size": 64}


def _model_keys(cfg, model: str) -> dict:
    """The architecture, in OpenNMT-py's flat keys (eole's are nested from these)."""
    m = cfg.model
    if model == "lstm":
        return {"encoder_type": "rnn", "decoder_type": "rnn", "rnn_type": "LSTM", "enc_layers": m.layers,
                "dec_layers": m.layers, "hidden_size": m.hidden, "word_vec_size": m.embed,
                "global_attention": m.score, "global_attention_function": "softmax",
                "input_feed": int(m.input_feed), "dropout": [m.dropout], "param_init": cfg.train.init_uniform}
    if m.norm != "pre" or m.positions != "sinusoidal" or not m.tie_output or m.share_embeddings:
        raise RaceError("the peers' Transformer matches attnmt's with model.norm: pre, sinusoidal "
                        "positions, tie_output and no share_embeddings")
    return {"encoder_type": "transformer", "decoder_type": "transformer", "enc_layers": m.layers,
            "dec_layers": m.layers, "hidden_size": m.hidden, "word_vec_size": m.hidden, "heads": m.heads,
            "transformer_ff": m.ff, "dropout": [m.dropout], "attention_dropout": [m.dropout],
            "position_encoding": True, "share_decoder_embeddings": True, "add_qkvbias": True,
            "add_ffnbias": True, "norm_eps": 1e-5, "param_init": 0.0, "param_init_glorot": True}


def peer_config(peer: str, model: str, cfg, data: Path, run_dir: Path, recipe: str = "attnmt",
                save_every: int = 25, bucket_size: int = 0) -> dict:
    """The peer's training configuration from attnmt's ``cfg`` (a loaded attnmt Config).
    ``bucket_size`` (0: the peer's default, 262,144 examples, which it fills by reading the corpus
    over and over): smoke tests on a cut corpus set it small, or filling it takes minutes."""
    keys = _model_keys(cfg, model)
    rec = _recipe(cfg, keys["hidden_size"]) if recipe == "attnmt" else _default_recipe()
    max_len = cfg.data.max_len
    common = {"src_vocab": str(run_dir / "vocab" / "vocab.en"), "tgt_vocab": str(run_dir / "vocab" / "vocab.es"),
              "save_data": str(run_dir / "vocab"), "src_vocab_size": 32768, "tgt_vocab_size": 32768,
              "share_vocab": False, "overwrite": True, "seed": 1234, "report_every": save_every}
    if bucket_size:
        common["bucket_size"] = bucket_size
    if peer == "opennmt":
        return {**common, **keys, **rec, "src_seq_length": max_len, "tgt_seq_length": max_len,
                "model_type": "text", "valid_batch_size": 64, "train_steps": 1000000, "valid_steps": 1000000,
                "save_checkpoint_steps": save_every, "keep_checkpoint": 2, "num_workers": 0, "gpu_ranks": [],
                "save_model": str(run_dir / "model"),
                "data": {"corpus_1": {"path_src": str(data / "train.sp.en"), "path_tgt": str(data / "train.sp.es"),
                                      "transforms": ["filtertoolong"]},
                         "valid": {"path_src": str(data / "dev.sp.en"), "path_tgt": str(data / "dev.sp.es")}}}
    src, tgt = filtered_pieces(data, max_len)
    training = {k: rec[k] for k in rec}
    if bucket_size:
        training["bucket_size"] = common.pop("bucket_size")
    training.update(model_path=str(run_dir / "model"), train_steps=1000000, valid_steps=1000000,
                    save_checkpoint_steps=save_every, keep_checkpoint=2, valid_batch_size=64, num_workers=0,
                    gpu_ranks=[], compute_dtype="fp32", dropout=keys["dropout"], adam_eps=1e-9,
                    log_attention_entropy=False)
    if model == "lstm":
        training.update(param_init=keys["param_init"], param_init_method="uniform")
        net = {"architecture": "rnn", "hidden_size": keys["hidden_size"], "layers": keys["enc_layers"],
               "rnn_type": "LSTM", "embeddings": {"word_vec_size": keys["word_vec_size"]},
               "encoder": {"encoder_type": "rnn"},
               "decoder": {"decoder_type": "rnn", "global_attention": keys["global_attention"]},
               "input_feed": keys["input_feed"]}
    else:
        training.update(attention_dropout=keys["attention_dropout"], param_init_method="xavier_uniform")
        net = {"architecture": "transformer", "hidden_size": keys["hidden_size"], "layers": keys["enc_layers"],
               "heads": keys["heads"], "transformer_ff": keys["transformer_ff"], "add_qkvbias": True,
               "add_ffnbias": True, "add_final_linear_bias": True, "generator_bias": False,
               "share_decoder_embeddings": True, "norm_eps": 1e-5,
               "embeddings": {"word_vec_size": keys["hidden_size"], "position_encoding_type": "SinusoidalInterleaved"}}
    return {**common, "model": net, "training": training,
            "data": {"corpus_1": {"path_src": str(src), "path_tgt": str(tgt)},
                     "valid": {"path_src": str(data / "dev.sp.en"), "path_tgt": str(data / "dev.sp.es")}}}


def filtered_pieces(data: Path, max_len: int) -> tuple[Path, Path]:
    """train.sp.{en,es} without the pairs with a side over ``max_len`` pieces (OpenNMT-py's
    filtertoolong, done beforehand for eole)."""
    src, tgt = data / f"train.f{max_len}.sp.en", data / f"train.f{max_len}.sp.es"
    if not (src.exists() and tgt.exists()):
        pairs = zip((data / "train.sp.en").read_text(encoding="utf-8").splitlines(),
                    (data / "train.sp.es").read_text(encoding="utf-8").splitlines())
        kept = [(s, t) for s, t in pairs if len(s.split()) <= max_len and len(t.split()) <= max_len]
        src.write_text("".join(s + "\n" for s, _ in kept), encoding="utf-8")
        tgt.write_text("".join(t + "\n" for _, t in kept), encoding="utf-8")
    return src, tgt


# -- commands -----------------------------------------------------------------------------------
def build_vocab(peer: str, bin_dir: Path, config: Path) -> list[str]:
    tool = [str(bin_dir / "onmt_build_vocab")] if peer == "opennmt" else [str(bin_dir / "eole"), "build_vocab"]
    return tool + ["-config", str(config), "-n_sample", "-1"]


def train_cmd(peer: str, bin_dir: Path, config: Path) -> list[str]:
    tool = [str(bin_dir / "onmt_train")] if peer == "opennmt" else [str(bin_dir / "eole"), "train"]
    return tool + ["-config", str(config)]


def translate_cmd(peer: str, bin_dir: Path, ckpt: Path, src: Path, hyp: Path, beam: int = 5,
                  tgt: Path | None = None) -> list[str]:
    """The peer's translation command: beam ``beam``, batches of 64 sentences, CPU; with ``tgt``
    it scores the references (its log's GOLD SCORE, computed before and apart from the search)
    and stops its outputs after 2 pieces: the same GOLD SCORE (checked with OpenNMT-py: -304.3167
    both ways, and with eole: -307.2143), without a search of the whole dev set."""
    if peer == "opennmt":
        cmd = [str(bin_dir / "onmt_translate"), "-model", str(ckpt), "-gpu", "-1"]
    else:
        cmd = [str(bin_dir / "eole"), "predict", "-model_path", str(ckpt)]
    cmd += ["-src", str(src), "-output", str(hyp), "-beam_size", str(beam), "-batch_size", "64",
            "-batch_type", "sents"]
    return cmd + (["-tgt", str(tgt), "-max_length", "2"] if tgt is not None else [])


def checkpoints(peer: str, run_dir: Path) -> list[tuple[int, Path]]:
    """(step, checkpoint) of every complete checkpoint, oldest first: OpenNMT-py's
    model_step_N.pt files, eole's model/step_N folders (with weights, config and vocabulary)."""
    found = []
    if peer == "opennmt":
        for p in run_dir.glob("model_step_*.pt"):
            found.append((int(p.stem.rsplit("_", 1)[1]), p))
    else:
        for p in (run_dir / "model").glob("step_*"):
            if all((p / f).exists() for f in ("config.json", "vocab.json")) and any(p.glob("*.safetensors")):
                found.append((int(p.name.split("_", 1)[1]), p))
    return sorted(found)


_REPORT = re.compile(
    r"^\[(\d{4}-\d\d-\d\d \d\d:\d\d:\d\d),(\d+) INFO\] Step\s+(\d+)/.*?bsz:\s*(\d+)/\s*(\d+)/\s*(\d+);"
)


def reports(log: Path) -> list[tuple[float, int, int]]:
    """(time, step, cumulative target pieces) of each progress report of an OpenNMT-py or eole
    log: ``bsz: src/tgt/sents`` are per-batch averages over the updates since the last report."""
    records, tokens, prev_step = [], 0, 0
    for line in log.read_text(encoding="utf-8", errors="replace").splitlines():
        m = _REPORT.match(line)
        if not m:
            continue
        stamp = datetime.strptime(m.group(1), "%Y-%m-%d %H:%M:%S").timestamp() + int(m.group(2)) / 1000
        step, tgt_per_batch = int(m.group(3)), int(m.group(5))
        tokens += tgt_per_batch * (step - prev_step)
        prev_step = step
        records.append((stamp, step, tokens))
    return records


def gold_logprob(log: Path) -> float:
    """Total log-probability of the references from a translator log's GOLD SCORE (per sentence)."""
    m = re.search(r"GOLD SCORE: (-?[\d.]+), GOLD PPL: [\d.inf]+ NB SENTENCES: (\d+)",
                  log.read_text(encoding="utf-8", errors="replace"))
    if not m:
        raise RaceError(f"no GOLD SCORE in {log}")
    return float(m.group(1)) * int(m.group(2))
