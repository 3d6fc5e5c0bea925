"""Experiment configuration: YAML files whose sections read like a row of the paper's tables.

    data:  {train: corpus/train, dev: corpus/dev, src: en, tgt: es, tokenizer: word, ...}
    model: {type: lstm, layers: 4, hidden: 1000, attention: global, score: dot, input_feed: true}
    train: {optimizer: sgd, lr: 1.0, epochs: 12, decay_start: 8, batch_size: 128, ...}

Every key is declared with its default in attnmt/config_schema.py (re-exported here); unknown
keys, wrongly typed values and (``validate``) values outside a key's choices or bounds are user
errors that name the file, line and key.
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

import dataclasses
import difflib
import math
import re
import typing
from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from attnmt import plugins
from attnmt.errors import UserError, key_error
from attnmt.files import SMALL_TEXT_BYTES, read_small_text
from attnmt.strict_yaml import duplicate_key, key_lines, load_yaml
from attnmt.config_schema import (  # noqa: F401  (the keys are read from attnmt.config too)
    ATTENTION_KINDS, FAMILIES, PRE_SPLIT_KEYS, TASKS, Config, DataConfig, LSTMConfig, ModelConfig, NgramConfig,
    TrainConfig, TransformerConfig, family_of_key,
)


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
