"""The malformed-input zoo, run lifecycles: resuming a run and averaging its checkpoints.

A missing, damaged, crafted (code-running pickle) or NaN trainer state or checkpoint, a --set that
changes the model's shape, a CONFIG other than the run's, an --out for `average` that holds other
files or fails while written. Each ends with exit status 2 and one line naming the file (or key),
with the run left as it was. The rest of the zoo is tests/test_bad_input.py.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from bad_input_zoo import assert_fails, listing, nan_weights, run_cli, run_copy


# -- resuming from a run directory ---------------------------------------------------------------------------
def test_resume_problems(tmp_path, tiny_run):
    run = run_copy(tiny_run, tmp_path / "run")
    last = run / "checkpoints" / (run / "checkpoints" / "LAST").read_text().strip()
    state = last / "trainer.pt"
    assert_fails(tmp_path, ["train", "--out", str(tmp_path / "none"), "--resume"], ("CONFIG",))
    state.write_bytes(b"not a pickle")
    assert_fails(tmp_path, ["train", "--out", str(run), "--resume"], (str(state),))
    import torch

    torch.save({"step": 3}, state)  # a dict without the optimizer and progress
    assert_fails(tmp_path, ["train", "--out", str(run), "--resume"], (str(state),))
    state.unlink()
    state.mkdir()
    assert_fails(tmp_path, ["train", "--out", str(run), "--resume"], (str(state),))
    # a --set that changes the model's shape: was a RuntimeError traceback from load_state_dict
    config = (run / "config.yaml").read_text()
    assert_fails(tmp_path, ["train", "--out", str(run), "--resume", "--set", "model.hidden=16"],
                 (str(last / "model.safetensors"), "weights do not fit", "size mismatch"))
    assert (run / "config.yaml").read_text() == config  # the run's config is kept as it was
    nan_weights(last / "model.safetensors")
    assert_fails(tmp_path, ["train", "--out", str(run), "--resume"],
                 (str(last / "model.safetensors"), "NaN"))


class _Exploit:
    """A pickle whose loading runs code: it would create the marker file."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


def test_crafted_trainer_state_does_not_run(tmp_path, tiny_run):
    import torch

    run = run_copy(tiny_run, tmp_path / "run")
    last = run / "checkpoints" / (run / "checkpoints" / "LAST").read_text().strip()
    marker = tmp_path / "pwned"
    torch.save({"optimizer": _Exploit(marker), "step": 1}, last / "trainer.pt")
    status, out, err = run_cli(["train", "--out", str(run), "--resume"])
    assert not marker.exists(), "loading trainer.pt ran code from the run directory"
    assert status == 2 and "trainer.pt" in err and "Traceback" not in err, err
    assert len(err.strip().splitlines()) == 1


# -- average: a whole new run, or nothing ---------------------------------------------------------------------
def test_average_writes_a_whole_run_or_nothing(tmp_path, tiny_run, monkeypatch):
    """--out holding other files had its config.yaml, vocabularies and log replaced; a failure while
    writing left a half-written run."""
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "config.yaml").write_text("mine\n")
    assert_fails(tmp_path, ["average", "--model", str(tiny_run), "--last", "2", "--out", str(busy)],
                 (str(busy), "new or empty directory"))
    assert (busy / "config.yaml").read_text() == "mine\n"
    from attnmt.train import averaging

    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device", str(args[0]))

    monkeypatch.setattr(averaging, "save_checkpoint", disk_full)
    before = listing(tmp_path)
    status, out, err = run_cli(["average", "--model", str(tiny_run), "--last", "2", "--out",
                                str(tmp_path / "avg")])
    assert status == 2 and "No space left" in err and listing(tmp_path) == before, err
    monkeypatch.undo()
    empty = tmp_path / "empty"
    empty.mkdir()  # an empty directory is fine: it becomes the run
    status, out, err = run_cli(["average", "--model", str(tiny_run), "--last", "2", "--out", str(empty)])
    assert status == 0 and (empty / "config.yaml").is_file() and (empty / "checkpoints" / "BEST").is_file(), err
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []


def test_resume_with_a_config_other_than_the_runs(tmp_path, tiny_run, tiny_corpus):
    """--resume continues with RUN/config.yaml; a changed CONFIG beside it was silently ignored."""
    run = run_copy(tiny_run, tmp_path / "run")
    changed = tmp_path / "changed.yaml"
    changed.write_text(tiny_corpus.config.read_text().replace("hidden: 32", "hidden: 16"), encoding="utf-8")
    assert_fails(tmp_path, ["train", str(changed), "--out", str(run), "--resume"],
                 (str(changed), str(run / "config.yaml"), "model.hidden is 16 here, 32 in the run"))
    # the same CONFIG (and the same --set on both sides, as a Makefile's repeated command) resumes
    status, out, err = run_cli(["train", str(tiny_corpus.config), "--out", str(run), "--resume",
                                "--max-time", "600"])
    assert status == 0 and json.loads(out)["step"] == 64, err
