"""On a CUDA device (skipped without one; CI has none): the Transformer's incremental search and the
window mask's recomputing backward agree with their definitions there, and both trunks train with
mixed precision, save, resume-free reload and translate on the GPU end to end."""

from __future__ import annotations

import pytest
import torch

from attnmt.attention.window import KEEP_TOKEN_TERMS_ON, window_mask
from attnmt.models import build_model
from test_transformer import VARIANTS, _batch, _cfg, _incremental

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
CUDA = torch.device("cuda")


@pytest.fixture(autouse=True)
def _exact_float32_products():
    """float32 products as float32 (no TF32), so CPU and GPU agree to float32's rounding."""
    before = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    yield
    torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = before


@pytest.mark.parametrize("variant", VARIANTS)
def test_incremental_decoding_on_cuda_equals_full_forward_and_the_cpu(variant):
    cross = "standard" if variant == "relative" else variant
    cfg = _cfg(enc_self_attention=variant, dec_self_attention=variant, cross_attention=cross)
    torch.manual_seed(0)
    model = build_model(cfg, 30, 31).eval()
    src, lengths, tgt = _batch()
    with torch.no_grad():
        cpu, _ = model(src, lengths, tgt)
        model = model.to(CUDA)
        on_gpu = [t.to(CUDA) for t in (src, lengths, tgt)]
        full, _ = model(*on_gpu)
        inc, _ = _incremental(model, *on_gpu, reorder=True)
    torch.testing.assert_close(inc, full, atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(full.cpu(), cpu, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("segment,mask", [(0, "exact"), (0, "sum"), (0, "union"), (3, "exact"), (5, "sum")])
def test_window_mask_backward_on_cuda_equals_the_cpus(segment, mask):
    """A GPU recomputes a token mask's cumulative sums in the backward (KEEP_TOKEN_TERMS_ON), the CPU
    keeps them: one gradient, in float64."""
    assert "cuda" not in KEEP_TOKEN_TERMS_ON
    g = torch.Generator().manual_seed(segment * 7 + len(mask))
    phi = torch.softmax(torch.randn(2, 3, 2, 5, 13, generator=g, dtype=torch.float64), -1)
    grad = torch.randn(2, 3, 5, 13, generator=g, dtype=torch.float64)
    results = []
    for device in ("cpu", "cuda"):
        p = phi.to(device).requires_grad_()
        m = window_mask(p, segment, mask)
        m.backward(grad.to(device))
        results.append((m.detach().cpu(), p.grad.cpu()))
    torch.testing.assert_close(results[1][0], results[0][0], atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(results[1][1], results[0][1], atol=1e-12, rtol=1e-12)


def _write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")


@pytest.mark.parametrize("model", [
    "{type: transformer, layers: 1, hidden: 16, heads: 2, ff: 32, enc_self_attention: window-add-seg, "
    "cross_attention: window-mul, dec_self_attention: window-add}",
    "{type: transformer, layers: 2, hidden: 16, heads: 2, ff: 32}",
    "{type: lstm, layers: 2, hidden: 16, embed: 16, attention: global, score: general, input_feed: true}",
])
def test_train_and_translate_on_cuda_with_mixed_precision(tmp_path, model):
    from attnmt.decode.translate import Translator
    from attnmt.train.run import run_training

    words = "a b c d e f g h".split()
    g = torch.Generator().manual_seed(0)
    src = [[words[i] for i in torch.randint(0, 8, (int(n),), generator=g)]
           for n in torch.randint(2, 7, (200,), generator=g)]
    _write(tmp_path / "train.en", [" ".join(s) for s in src])
    _write(tmp_path / "train.es", [" ".join(w.upper() for w in reversed(s)) for s in src])
    _write(tmp_path / "dev.en", [" ".join(s) for s in src[:20]])
    _write(tmp_path / "dev.es", [" ".join(w.upper() for w in reversed(s)) for s in src[:20]])
    config = tmp_path / "c.yaml"
    config.write_text(
        f"data: {{train: {tmp_path}/train, dev: {tmp_path}/dev, tokenizer: word}}\n"
        f"model: {model}\n"
        "train: {optimizer: adam, lr: 0.003, warmup: 5, batch_size: 50, max_steps: 8, valid_every: 4, "
        "device: cuda, amp: true}\n")
    summary = run_training(str(config), str(tmp_path / "run"), [], False)
    assert summary["step"] == 8 and summary["best_dev_ppl"] < float("inf")
    translator = Translator.from_run(tmp_path / "run", device="cuda")
    out = translator.translate(["a b c", "d e"], beam=3)
    assert len(out) == 2 and all(isinstance(hyps[0].text, str) and hyps[0].score <= 0 for hyps in out)
    assert translator.device.type == "cuda" and next(translator.model.parameters()).is_cuda
