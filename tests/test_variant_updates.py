"""benchmarks/variant_updates.py: a variant spec's config overrides (placement, preset, options)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "benchmarks"))

from variant_updates import variant_sets  # noqa: E402


def test_standard_changes_nothing():
    assert variant_sets("standard") == []


def test_a_variant_goes_into_encoder_self_and_cross_attention():
    assert variant_sets("window-mul") == ["model.enc_self_attention=window-mul", "model.cross_attention=window-mul"]


def test_preset_window_option_and_dotted_key():
    sets = variant_sets("window-add-seg+paper+mask=full+model.attention_layers=2")
    assert sets[2:] == ["model.window_preset=paper", "model.window_mask=full", "model.attention_layers=2"]


def test_the_sets_load_as_a_config():
    from attnmt.config import load_config

    root = Path(__file__).resolve().parent.parent
    cfg = load_config(root / "configs" / "race-transformer.yaml",
                      variant_sets("window-add-seg+paper+model.attention_layers=2"))
    assert (cfg.model.enc_self_attention, cfg.model.cross_attention) == ("window-add-seg", "window-add-seg")
    assert cfg.model.attention_layers == 2 and cfg.model.window_segment == 5 and cfg.model.window_mask == "sum"
