"""attnmt train --init-from RUN[:CKPT]: a new run starts from another run's weights and
vocabularies (translating exactly as it does before any update), refuses another model or
vocabulary naming the key, takes the optimizer state only with --init-optimizer, and a resumed run
continues from its own checkpoint."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
import torch

from attnmt.cli.main import main
from attnmt.config import load_config
from attnmt.decode.translate import Translator
from attnmt.errors import UserError
from attnmt.runs.checkpoint import find_checkpoint, load_trainer_state, load_weights
from attnmt.runs.loader import Run, load_run
from attnmt.train.run import run_training
from attnmt.train.training import Trainer

LINES = ["the red cat sees a dog", "a small girl has the old book", "the house wants a white flower"]


def _trainer(config, run: Path, overrides: list[str] = (), **kwargs) -> Trainer:
    return Trainer(load_config(config, list(overrides)), run, **kwargs)


def test_a_fine_tuning_run_starts_with_the_weights_and_vocabularies_of_the_source(tiny_run, tiny_corpus,
                                                                                  tmp_path):
    new = tmp_path / "ft"
    trainer = _trainer(tiny_corpus.config, new, ["train.lr=0.01"], init_from=str(tiny_run))
    source = load_run(tiny_run)
    best = load_weights(find_checkpoint(tiny_run, "best") / "model.safetensors")
    state = trainer.model.state_dict()
    assert state.keys() == best.keys() and all(torch.equal(state[k], best[k]) for k in best)
    for name in ("src.vocab", "tgt.vocab"):
        assert (new / name).read_bytes() == (tiny_run / name).read_bytes()
    trainer.model.eval()
    mine = Translator.of(Run(trainer.model, trainer.cfg, trainer.data.src_tok, trainer.data.tgt_tok))
    theirs = Translator.of(source)
    assert [h[0].text for h in mine.translate(LINES, beam=3)] == [h[0].text for h in theirs.translate(LINES, beam=3)]
    assert not trainer.optimizer.state_dict()["state"]  # a fresh optimizer
    trainer.close()


def test_init_optimizer_takes_the_optimizer_state_of_that_checkpoint(tiny_run, tiny_corpus, tmp_path):
    last = find_checkpoint(tiny_run, "last")
    trainer = _trainer(tiny_corpus.config, tmp_path / "ft", init_from=f"{tiny_run}:last", init_optimizer=True)
    want = load_trainer_state(last)["optimizer"]["state"]
    have = trainer.optimizer.state_dict()["state"]
    assert have.keys() == want.keys() and want
    for k in want:
        assert torch.equal(have[k]["exp_avg"], want[k]["exp_avg"])
        assert torch.equal(have[k]["exp_avg_sq"], want[k]["exp_avg_sq"])
    assert trainer.step == 0  # the new run's own schedule
    trainer.close()


@pytest.mark.parametrize("override, key", [("model.hidden=16", "model.hidden"),
                                           ("model.score=dot", "model.score"),
                                           ("data.tgt_vocab_size=50", "data.tgt_vocab_size"),
                                           ("data.reverse_source=true", "data.reverse_source")])
def test_another_architecture_or_vocabulary_is_refused_naming_the_key(tiny_run, tiny_corpus, tmp_path,
                                                                     override, key):
    run = tmp_path / "ft"
    with pytest.raises(UserError, match=rf"--init-from: {key.replace('.', r'[.]')} is ") as err:
        run_training(str(tiny_corpus.config), str(run), [override], resume=False, init_from=str(tiny_run))
    assert "\n" not in str(err.value)
    assert not run.exists()  # nothing half-written


def test_dropout_may_differ_and_a_step_checkpoint_may_be_named(tiny_run, tiny_corpus, tmp_path):
    step = find_checkpoint(tiny_run, "last").name
    trainer = _trainer(tiny_corpus.config, tmp_path / "ft", ["model.dropout=0.3"],
                       init_from=f"{tiny_run}:{int(step.split('-')[1])}")
    want = load_weights(find_checkpoint(tiny_run, step) / "model.safetensors")
    assert all(torch.equal(v, want[k]) for k, v in trainer.model.state_dict().items())
    trainer.close()


def test_resume_continues_the_run_and_ignores_init_from(tiny_run, tiny_corpus, tmp_path):
    run = tmp_path / "ft"
    threads = torch.get_num_threads()
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM)}
    try:
        run_training(str(tiny_corpus.config), str(run), ["train.max_steps=2"], resume=False,
                     init_from=str(tiny_run))
        # the source is gone: a resume that read it would fail
        summary = run_training(None, str(run), ["train.max_steps=3"], resume=True,
                               init_from=str(tmp_path / "no-such-run"))
    finally:
        for s, h in handlers.items():
            signal.signal(s, h)
        torch.set_num_threads(threads)
    assert summary["step"] == 3


def test_cli_errors(tiny_corpus, tmp_path, capsys):
    assert main(["train", str(tiny_corpus.config), "--out", str(tmp_path / "a"), "--init-optimizer"]) == 2
    assert "--init-optimizer needs --init-from" in capsys.readouterr().err
    assert main(["train", str(tiny_corpus.config), "--out", str(tmp_path / "b"),
                 "--init-from", str(tmp_path / "nothing")]) == 2
    assert "not a training run directory" in capsys.readouterr().err
