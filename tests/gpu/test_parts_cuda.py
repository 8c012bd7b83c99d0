"""The model's other paths on the device under test against the CPU in fp32 (TF32 off):

* the fused loss (arch.fused_loss.fused_linear_cross_entropy, chunked, -100 ignored) against plain
  F.cross_entropy on the same device and against the CPU: loss and both gradients, atol 1e-5 / rtol 1e-5;
* KV-cache greedy generation: the same argmax tokens as the CPU (and as the device without the cache), for every
  position encoding and GQA + window, on a model first trained on the CPU to confident predictions (a margin
  test: near-ties would make argmax a coin toss between two correct kernels);
* hooks: every activation of run_with_cache (embed, resid_pre/post, attention patterns, final) within 1e-5;
* export: arch.convert.to_hf of a model on the device is a model on the device whose logits equal ours on the
  CPU within 1e-5 (GPT-2 and Llama families);
* the encoder-decoder (arch.encdec) trained 20 steps: every step's loss within 1e-4 relative of the CPU's.
"""

from __future__ import annotations

import copy

import pytest

from arch import EncDecConfig, ModelConfig, PosConfig, build_model

from .conftest import FP32_RTOL, lm_batches, rel_diff, train_curve

pytestmark = pytest.mark.gpu

ATOL = 1e-5
V, CTX = 256, 32


def _model(pos: str = "learned", **kw):
    import torch

    torch.manual_seed(0)
    return build_model(ModelConfig(**{**dict(vocab_size=V, n_ctx=CTX, d_model=32, n_layers=2, n_heads=2,
                                             pos=PosConfig(kind=pos)), **kw}))


def test_fused_loss_matches_cross_entropy(device):
    import torch
    import torch.nn.functional as F

    from arch.fused_loss import fused_linear_cross_entropy

    g = torch.Generator().manual_seed(0)
    h0, w0 = torch.randn(96, 32, generator=g), 0.2 * torch.randn(300, 32, generator=g)  # (N, C), (V, C)
    targets0 = torch.randint(0, 300, (96,), generator=g)
    targets0[::7] = -100

    def run(dev, fused: bool):
        h, w = h0.to(dev).requires_grad_(), w0.to(dev).requires_grad_()
        t = targets0.to(dev)
        loss = (fused_linear_cross_entropy(h, w, t, chunk_size=20) if fused  # 5 chunks, the last one short
                else F.cross_entropy(h @ w.t(), t, ignore_index=-100))
        (2.5 * loss).backward()  # an incoming gradient other than 1
        return [x.detach().cpu() for x in (loss, h.grad, w.grad)]

    fused, plain, cpu = run(device, True), run(device, False), run("cpu", False)
    for got, want, name in zip(fused, plain, ("loss", "grad h", "grad W")):
        torch.testing.assert_close(got, want, atol=ATOL, rtol=ATOL, msg=f"{name}: fused vs plain on {device}")
    for got, want, name in zip(fused, cpu, ("loss", "grad h", "grad W")):
        torch.testing.assert_close(got, want, atol=ATOL, rtol=ATOL, msg=f"{name}: {device} vs cpu")
    assert fused[1][::7].abs().max() == 0  # ignored rows get no gradient


def _confident(model):
    """The model trained on the CPU for 100 steps on lm_batches' Markov chain: its greedy choices have margins."""
    import torch

    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for ids, targets in lm_batches(V, 8, CTX, steps=100, seed=1):
        loss = model.loss(ids, targets)
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


GEN_CASES = [dict(pos=p) for p in ("learned", "sinusoidal", "relative", "alibi", "rope", "none")] + \
            [dict(pos="rope", n_heads=4, n_kv_heads=2, window=5)]


@pytest.mark.parametrize("kw", GEN_CASES, ids=lambda kw: "-".join(f"{v}" for v in kw.values()))
def test_kv_cache_greedy_generation(device, kw):
    import torch

    model = _confident(_model(**kw))
    prompt = lm_batches(V, 3, 6, steps=1, seed=2)[0][0]  # (3, 6)
    new = 40  # past n_ctx 32: learned positions crop (and drop the cache), the others regrow their tables
    want = model.generate(prompt, max_new_tokens=new, temperature=0.0)
    logits = model(want[:, -CTX:])[:, -new // 2:]  # (3, 20, V)
    top2 = logits.topk(2, dim=-1).values
    assert (top2[..., 0] - top2[..., 1]).min() > 1e-3, "near-ties: argmax would not be a fair comparison"
    on_device = copy.deepcopy(model).to(device)
    got = on_device.generate(prompt.to(device), max_new_tokens=new, temperature=0.0)
    uncached = on_device.generate(prompt.to(device), max_new_tokens=new, temperature=0.0, use_cache=False)
    assert torch.equal(got.cpu(), want), f"cached greedy tokens differ on {device}"
    assert torch.equal(uncached.cpu(), want), f"uncached greedy tokens differ on {device}"


@pytest.mark.parametrize("pos", ["relative", "rope"])
def test_run_with_cache_values(device, pos):
    import torch

    model = _model(pos, n_heads=4, n_kv_heads=2).eval()
    ids = lm_batches(V, 2, CTX, steps=1)[0][0]
    with torch.no_grad():
        want_logits, want = model.run_with_cache(ids)
        got_logits, got = copy.deepcopy(model).to(device).run_with_cache(ids.to(device))
    assert set(got) == set(want) and {"embed", "attn_pattern.1", "resid_post.1", "final"} <= set(want)
    for key in want:
        assert got[key].device.type == device.type, key
        torch.testing.assert_close(got[key].cpu(), want[key], atol=ATOL, rtol=ATOL, msg=key)
    torch.testing.assert_close(got_logits.cpu(), want_logits, atol=ATOL, rtol=ATOL)


@pytest.mark.parametrize("family", ["gpt2", "llama"])
def test_export_to_hf_logits(device, family):
    import torch

    pytest.importorskip("transformers")
    from arch.convert import to_hf

    kw = {} if family == "gpt2" else dict(norm_type="rmsnorm", activation="swiglu", bias=False,
                                          n_heads=4, n_kv_heads=2)
    model = _model("learned" if family == "gpt2" else "rope", **kw).eval()
    ids = lm_batches(V, 2, CTX, steps=1)[0][0]
    with torch.no_grad():
        want = model(ids)  # ours on the CPU
        hf = to_hf(copy.deepcopy(model).to(device))
        assert next(hf.parameters()).device.type == device.type  # exported where the model is
        got = hf(ids.to(device)).logits
    torch.testing.assert_close(got.cpu(), want, atol=ATOL, rtol=0)


def test_encoder_decoder_trains_as_on_cpu(device, cpu_curves):
    import torch

    cfg = EncDecConfig(vocab_size=V, n_ctx=CTX, d_model=32, n_encoder_layers=2, n_decoder_layers=2, n_heads=2,
                       pos=PosConfig(kind="relative"), src_pad_id=0)
    torch.manual_seed(0)
    model = build_model(cfg)
    batches = []
    for src, tgt in zip(*(lm_batches(V, 4, 24, seed=s) for s in (3, 4))):
        src, tgt = src[0].clone(), tgt[0]  # (4, 24) each
        src[src == 0] = 1
        src[2, 18:] = 0  # a padded source row (src_pad_id)
        tgt_out = tgt[:, 1:].clone()
        tgt_out[3, 15:] = -100  # padded target labels
        batches.append((src, tgt[:, :-1], tgt_out))
    want = cpu_curves("encdec", model, batches)
    got = train_curve(model, batches, device)
    assert max(want) - min(want) > 0.02, want
    assert rel_diff(got, want) <= FP32_RTOL, f"got  {got}\nwant {want}"
