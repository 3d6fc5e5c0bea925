"""The model section is per family: ``model.type`` picks LSTMConfig or TransformerConfig, each
owning and checking its keys. The other family's keys are errors that say whose they are (with
file and line), except at their defaults, as every config.yaml saved before the split lists them."""

from __future__ import annotations

import dataclasses

import pytest

from attnmt.config import (Config, LSTMConfig, ModelConfig, TransformerConfig, apply_overrides,
                           load_config, save_config)
from attnmt.errors import UserError

OLD_KEYS = {  # a run's config.yaml model section as written before the split: all 31 keys
    "layers": 1, "hidden": 16, "embed": 1000, "bidirectional": False, "attention": "global",
    "score": "dot", "input_feed": True, "dropout": 0.2, "max_src_len": 100, "window": 10,
    "sigma": 0.0, "local_composition": "paper", "heads": 4, "ff": 1024, "norm": "pre",
    "positions": "sinusoidal", "max_positions": 1024, "share_embeddings": False, "tie_output": True,
    "enc_self_attention": "standard", "dec_self_attention": "standard", "cross_attention": "standard",
    "attention_layers": 0, "window_segment": 3, "window_mask": "exact", "window_renorm": False,
    "window_temperature": 0.0, "window_pointers": "attention", "window_preset": "none",
    "relative_clip": 16,
}


def _write(tmp_path, text: str):
    path = tmp_path / "c.yaml"
    path.write_text(text, encoding="utf-8")
    return path


def test_model_type_picks_the_family_and_each_owns_its_keys():
    lstm, tf = ModelConfig(layers=1, hidden=8), ModelConfig(type="transformer", heads=2, hidden=8)
    assert type(lstm) is LSTMConfig and type(tf) is TransformerConfig
    assert isinstance(lstm, ModelConfig) and isinstance(tf, ModelConfig)
    lstm_keys = {f.name for f in dataclasses.fields(LSTMConfig)}
    tf_keys = {f.name for f in dataclasses.fields(TransformerConfig)}
    assert lstm_keys & tf_keys == {"type", "layers", "hidden", "dropout", "tie_output"}
    assert "window" in lstm_keys and "window_mask" in tf_keys and "window" not in tf_keys
    assert tf.source_limit() is None and not tf.location  # every model answers these
    assert ModelConfig(attention="global", score="location").source_limit() == 100


def test_the_other_familys_key_names_its_family_file_and_line(tmp_path):
    path = _write(tmp_path, "model:\n  type: lstm\n  layers: 1\n  window_mask: sum\n")
    with pytest.raises(UserError) as err:
        load_config(path)
    assert str(err.value) == f"{path}:4: model.window_mask applies to model.type transformer, not lstm"
    path = _write(tmp_path, "model:\n  type: transformer\n  score: general\n")
    with pytest.raises(UserError, match=r"c.yaml:3: model.score applies to model.type lstm, not transformer"):
        load_config(path)
    path = _write(tmp_path, "model:\n  type: transformer\n  hiddn: 8\n")
    with pytest.raises(UserError, match=r"c.yaml:3: unknown key model.hiddn \(did you mean model.hidden\?; "
                       r"known: type, layers, hidden, dropout, heads"):
        load_config(path)
    with pytest.raises(UserError, match=r"--set: model.heads applies to model.type transformer, not lstm"):
        apply_overrides(Config(), ["model.heads=8"])


def test_the_other_familys_key_at_its_default_is_an_error_too(tmp_path):
    """``heads: 4`` is the Transformer's default; in an LSTM config a user wrote it, and it would
    do nothing: an error naming it (only a complete pre-split dump may list such keys)."""
    path = _write(tmp_path, "model:\n  type: lstm\n  layers: 1\n  heads: 4\n")
    with pytest.raises(UserError) as err:
        load_config(path)
    assert str(err.value) == f"{path}:4: model.heads applies to model.type transformer, not lstm"
    path = _write(tmp_path, "model:\n  type: transformer\n  input_feed: true\n")
    with pytest.raises(UserError, match=r"c.yaml:3: model.input_feed applies to model.type lstm"):
        load_config(path)


def test_a_config_saved_before_the_split_loads_into_its_family(tmp_path):
    import yaml

    for kind, cls in (("lstm", LSTMConfig), ("transformer", TransformerConfig)):
        raw = {"task": "translate", "model": {"type": kind, **OLD_KEYS}}
        path = _write(tmp_path, yaml.safe_dump(raw))
        cfg = load_config(path)
        assert type(cfg.model) is cls and cfg.model.layers == 1 and cfg.model.hidden == 16
        save_config(cfg, tmp_path / "again.yaml")  # written back with the family's keys only
        saved = yaml.safe_load((tmp_path / "again.yaml").read_text())["model"]
        assert set(saved) == {f.name for f in dataclasses.fields(cls)}
        assert load_config(tmp_path / "again.yaml") == cfg


def test_set_model_type_switches_family_and_keeps_the_shared_keys(tmp_path):
    path = _write(tmp_path, "model:\n  layers: 2\n  hidden: 64\n  attention: local-p\n  score: general\n")
    cfg = load_config(path, ["model.type=transformer", "model.heads=8"])
    assert type(cfg.model) is TransformerConfig and (cfg.model.layers, cfg.model.hidden, cfg.model.heads) == (2, 64, 8)
    back = apply_overrides(cfg, ["model.type=lstm"])
    assert type(back.model) is LSTMConfig and back.model.hidden == 64 and back.model.attention == "global"
    with pytest.raises(UserError, match=r"model.attention applies to model.type lstm, not transformer"):
        load_config(path, ["model.type=transformer", "model.attention=global"])


def test_each_family_checks_its_own_options(tmp_path):
    with pytest.raises(UserError, match=r"c.yaml:3: model.window must be >= 1 for local-p"):
        load_config(_write(tmp_path, "model:\n  attention: local-p\n  window: 0\n"))
    with pytest.raises(UserError, match=r"c.yaml:4: model.hidden \(30\) must be a multiple of model.heads \(4\)"):
        load_config(_write(tmp_path, "model:\n  type: transformer\n  heads: 4\n  hidden: 30\n"))
    with pytest.raises(UserError, match=r"c.yaml:3: model.norm must be one of pre, post, not 'mid'"):
        load_config(_write(tmp_path, "model:\n  type: transformer\n  norm: mid\n"))
