"""benchmarks/variant_rows.py: each row's overrides load as a valid race config, and the ratios."""

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))


def test_every_variant_row_is_a_valid_race_config(tmp_path):
    import peer_race
    import variant_rows

    for variant in variant_rows.PLACEMENTS:
        sets = peer_race.attnmt_sets("transformer", tmp_path, 256, 2, 120, variant_rows.variant_sets(variant))
        cfg = peer_race.attnmt_config("transformer", sets)
        assert cfg.model.dec_self_attention == ("relative" if variant == "relative" else "standard")
    paper = peer_race.attnmt_config("transformer", peer_race.attnmt_sets(
        "transformer", tmp_path, 256, 2, 120, variant_rows.variant_sets("window-add-seg+paper")))
    assert (paper.model.cross_attention, paper.model.window_mask, paper.model.window_segment) == ("window-add-seg", "sum", 5)
    with pytest.raises(variant_rows.RaceError, match="unknown variant"):
        variant_rows.variant_sets("window-typo")


def test_ratios_are_to_standard():
    import variant_rows

    rows = [{"variant": "standard", "s_per_step": 0.5, "translate_s": 20.0, "ms_per_piece": 0.5},
            {"variant": "window-add", "s_per_step": 0.6, "translate_s": 30.0, "ms_per_piece": 0.55}]
    variant_rows.with_ratios(rows)
    assert [r["step_ratio"] for r in rows] == [1.0, 1.2]
    assert (rows[1]["decode_ratio"], rows[1]["decode_piece_ratio"]) == (1.5, 1.1)


def test_limit_ratios_join_the_rows_and_stand_alone():
    """Equal-work decoding (--limit-lines) gives its own ratio beside the others, or alone
    (--limit-only: rows without training measures)."""
    import variant_rows

    rows = [{"variant": "standard", "s_per_step": 0.5, "translate_s": 20.0, "ms_per_piece": 0.5,
             "limit_translate_s": 10.0},
            {"variant": "window-add", "s_per_step": 0.6, "translate_s": 30.0, "ms_per_piece": 0.55,
             "limit_translate_s": 12.5}]
    variant_rows.with_ratios(rows)
    assert (rows[1]["step_ratio"], rows[1]["limit_decode_ratio"]) == (1.2, 1.25)
    alone = [{"variant": "standard", "limit_translate_s": 8.0}, {"variant": "window-mul", "limit_translate_s": 9.0}]
    variant_rows.with_ratios(alone)
    assert alone[1]["limit_decode_ratio"] == 1.125 and "step_ratio" not in alone[1]
    # rounds paired: each round's time over standard's in that round, their median (the box
    # slowed down in round 2 for both: the fastest rounds say 1.0x, the pairs 1.2x)
    rounds = [{"variant": "standard", "limit_translate_s": 8.0, "limit_rounds_s": [10.0, 8.0, 12.0]},
              {"variant": "relative", "limit_translate_s": 8.0, "limit_rounds_s": [8.0, 9.6, 14.4]}]
    variant_rows.with_ratios(rounds)
    assert rounds[1]["limit_decode_ratio"] == 1.0
    assert rounds[1]["limit_round_ratios"] == [0.8, 1.2, 1.2] and rounds[1]["limit_decode_ratio_paired"] == 1.2
