"""Search and checkpoints: beam 1 equals greedy; beam finds better-scoring outputs; a saved and
reloaded model translates identically; checkpoints are atomic and prunable."""

import os

import torch

from attnmt.config import Config, ModelConfig
from attnmt.data.batching import collate
from attnmt.decode.search import beam_search, greedy_search
from attnmt.models import build_model
from attnmt.models.seq2seq import Seq2Seq
from attnmt.runs.checkpoint import find_checkpoint, list_checkpoints, load_weights, save_checkpoint


def _model(seed=0, **kw):
    torch.manual_seed(seed)
    cfg = ModelConfig(layers=2, hidden=24, embed=16, **kw)
    return Seq2Seq(cfg, 30, 25, init_uniform=0.3).eval()


def _batch(seed=1):
    g = torch.Generator().manual_seed(seed)
    src = [torch.randint(4, 30, (int(n),), generator=g).tolist() for n in (7, 3, 5, 9)]
    return collate(src, None, list(range(len(src))))


def test_beam_size_one_equals_greedy():
    for kw in ({"score": "dot"}, {"score": "location", "max_src_len": 12}, {"attention": "none"}):
        model, batch = _model(**kw), _batch()
        greedy = greedy_search(model, batch.src, batch.src_lengths, need_weights=True)
        beam = beam_search(model, batch.src, batch.src_lengths, beam_size=1, need_weights=True)
        for g, b in zip(greedy, beam):
            assert g[0].tokens == b[0].tokens
            assert abs(g[0].logprob - b[0].logprob) < 1e-4
            if "attention" not in kw:
                torch.testing.assert_close(g[0].attention, b[0].attention)


def test_beam_search_scores_are_true_log_probabilities_and_nbest_is_sorted():
    model, batch = _model(), _batch()
    results = beam_search(model, batch.src, batch.src_lengths, beam_size=4, nbest=3, length_penalty=0.0)
    for i, hyps in enumerate(results):
        assert len(hyps) == 3
        assert [h.score for h in hyps] == sorted((h.score for h in hyps), reverse=True)
        # rescore the best hypothesis with teacher forcing
        best = hyps[0]
        truncated = len(best.tokens) == 2 * int(batch.src_lengths[i]) + 10  # hit the length limit
        tgt = torch.tensor([[2] + best.tokens])
        out = torch.tensor([best.tokens + [3]])
        if truncated:  # no </s> was generated, so it is not part of the score
            tgt, out = tgt[:, :-1], out[:, :-1]
        logits, _ = model(batch.src[i : i + 1, : batch.src_lengths[i]], batch.src_lengths[i : i + 1], tgt)
        logp = torch.log_softmax(logits, -1).gather(-1, out.unsqueeze(-1)).sum()
        assert abs(float(logp.detach()) - best.logprob) < 1e-3
        greedy = greedy_search(model, batch.src[i : i + 1, : batch.src_lengths[i]], batch.src_lengths[i : i + 1])
        assert best.logprob >= greedy[0][0].logprob - 1e-4


def test_checkpoint_round_trip_gives_identical_output(tmp_path):
    model, batch = _model(score="general"), _batch()
    before = beam_search(model, batch.src, batch.src_lengths, beam_size=3)
    ckpt = save_checkpoint(tmp_path, 7, model, {"step": 7}, best=True)
    assert ckpt.name == "step-00000007" and find_checkpoint(tmp_path, "best") == ckpt
    cfg = Config(model=ModelConfig(layers=2, hidden=24, embed=16, score="general"))
    again = build_model(cfg, 30, 25).eval()
    again.load_state_dict(load_weights(ckpt / "model.safetensors"))
    after = beam_search(again, batch.src, batch.src_lengths, beam_size=3)
    assert [h[0].tokens for h in before] == [h[0].tokens for h in after]


def test_checkpoints_are_pruned_but_best_is_kept(tmp_path):
    model = _model()
    save_checkpoint(tmp_path, 1, model, None, best=True, keep=2)
    for step in range(2, 6):
        save_checkpoint(tmp_path, step, model, None, keep=2)
    names = [p.name for p in list_checkpoints(tmp_path)]
    assert names == ["step-00000001", "step-00000004", "step-00000005"]
    assert find_checkpoint(tmp_path, "last").name == "step-00000005"
    assert find_checkpoint(tmp_path, "best").name == "step-00000001"
    assert not [f for f in os.listdir(tmp_path / "checkpoints") if ".tmp" in f]
