"""Training on groups of a batch's rows at once (train/row_groups.py) gives the gradients of one
pass over the whole batch, and the trainer uses it on CPU unless train.row_groups = 1."""

import torch

from attnmt.config import ModelConfig
from attnmt.data.batching import collate
from attnmt.data.vocab import PAD
from attnmt.models.seq2seq import Seq2Seq
from attnmt.train.row_groups import group_count, grouped_backward, groups_for, split_rows


def _batch(rows=6):
    g = torch.Generator().manual_seed(0)
    src = [torch.randint(4, 20, (n,), generator=g).tolist() for n in (5, 2, 7, 3, 6, 4)[:rows]]
    tgt = [torch.randint(4, 18, (n,), generator=g).tolist() for n in (3, 8, 2, 6, 1, 5)[:rows]]
    return collate(src, tgt, list(range(rows)))


def test_split_rows_deals_by_target_length_and_trims_padding():
    b = _batch()
    parts = split_rows(b, 2)
    assert sorted(torch.cat([p.index for p in parts]).tolist()) == list(range(6))
    lengths = [sorted((p.tgt_out != PAD).sum(1).tolist(), reverse=True) for p in parts]
    assert lengths == [[9, 6, 3], [7, 4, 2]]  # target lengths 9 7 6 4 3 2 dealt in turn
    for p in parts:
        assert p.tgt_out.size(1) == int((p.tgt_out != PAD).sum(1).max())  # no column of padding only
        assert p.src.size(1) == int(p.src_lengths.max())
        for i, row in enumerate(p.index.tolist()):
            n = int(p.src_lengths[i])
            assert p.src[i, :n].tolist() == b.src[row, :n].tolist()
    assert group_count(64, 2) == 2 and group_count(20, 2) == 1 and group_count(64, 1) == 1
    assert groups_for(0, 64, 2, 512) == 2 and groups_for(0, 64, 2, 256) == 1  # auto
    assert groups_for(0, 64, 2, 256, "processes") == 2 and groups_for(0, 64, 2, 128, "processes") == 1
    assert groups_for(1, 64, 2, 512) == 1 and groups_for(2, 64, 2, 256) == 2 and groups_for(4, 64, 2, 512) == 2


def test_grouped_backward_equals_one_pass():
    torch.manual_seed(1)
    cfg = ModelConfig(layers=2, hidden=12, embed=8, attention="global", score="general", input_feed=True,
                      dropout=0.0)
    model = Seq2Seq(cfg, 20, 18, init_uniform=0.3).double().train()
    b = _batch()
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        loss = grouped_backward(model, b, 2, 0.25, 0.1)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    got = {n: p.grad.clone() for n, p in model.named_parameters()}
    model.zero_grad()
    want = model.token_loss(b.src, b.src_lengths, b.tgt_in, b.tgt_out, 0.1)
    (want * 0.25).backward()
    assert abs(loss - float(want.detach())) < 1e-9
    for n, p in model.named_parameters():
        torch.testing.assert_close(got[n], p.grad, atol=1e-10, rtol=0, msg=n)


def test_trainer_runs_row_groups_on_cpu_and_keeps_the_update(tiny_corpus, tmp_path, monkeypatch, fixed_update):
    from attnmt.config import load_config
    from attnmt.train import row_groups
    from attnmt.train.training import Trainer

    monkeypatch.setattr(row_groups, "MIN_GROUP_ROWS", 2)
    threads = torch.get_num_threads()
    cfg = load_config(tiny_corpus.config, ["model.dropout=0.0", "model.layers=2", "train.threads=2",
                                           "train.row_workers=threads"])
    trainer = Trainer(cfg, tmp_path / "run")
    try:
        torch.set_num_threads(2)
        calls = []
        real = row_groups.grouped_backward
        monkeypatch.setattr("attnmt.train.update.grouped_backward", lambda *a: calls.append(a[2]) or real(*a))
        one_step = fixed_update(trainer)

        got = one_step(2)
        assert calls == [2]  # two groups, one per thread
        want = one_step(1)
        assert calls == [2]  # row_groups = 1: one pass
        assert got[1] == want[1] and abs(got[0] - want[0]) < 1e-4 * abs(want[0])
        for name in want[2]:
            torch.testing.assert_close(got[2][name], want[2][name], atol=1e-5, rtol=0, msg=name)
    finally:
        torch.set_num_threads(threads)
