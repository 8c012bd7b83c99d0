"""Exactness against Hugging Face GPT-2 (randomly initialised, no download): logits, loss and gradients."""

from __future__ import annotations

import pytest
import torch

from arch.convert import from_hf_gpt2

transformers = pytest.importorskip("transformers")


def hf_gpt2(seed=0, **kw):
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(**{**dict(n_layer=2, n_embd=64, n_head=4, vocab_size=100, n_positions=32), **kw})
    model = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():  # HF zero-inits biases and unit-inits LayerNorms: randomise them so they are tested
        for name, p in model.named_parameters():
            if name.endswith("bias") or "ln_" in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


def test_small_logits_loss_and_grads_match():
    hf = hf_gpt2()
    ours = from_hf_gpt2(hf).eval()
    assert ours.cfg.n_heads == 4 and ours.cfg.d_mlp == 256 and ours.cfg.tie_embeddings
    ids = torch.randint(0, 100, (3, 32))
    out = hf(ids, labels=ids)
    torch.testing.assert_close(ours(ids), out.logits, atol=1e-5, rtol=0)
    loss = ours.loss(ids[:, :-1], ids[:, 1:])
    torch.testing.assert_close(loss, out.loss, atol=1e-5, rtol=0)
    out.loss.backward()
    loss.backward()
    hf_params = dict(hf.named_parameters())
    torch.testing.assert_close(ours.wte.weight.grad, hf_params["transformer.wte.weight"].grad, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(ours.blocks[1].attn.c_attn.weight.grad,
                               hf_params["transformer.h.1.attn.c_attn.weight"].grad.t(), atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(ours.blocks[0].mlp.c_fc.bias.grad, hf_params["transformer.h.0.mlp.c_fc.bias"].grad,
                               atol=1e-5, rtol=1e-4)


def test_from_bare_state_dict_and_untied_head():
    hf = hf_gpt2(seed=1, tie_word_embeddings=False, n_inner=96)
    with torch.no_grad():
        hf.lm_head.weight.normal_()
    ids = torch.randint(0, 100, (2, 20))
    want = hf(ids).logits
    ours = from_hf_gpt2(hf).eval()
    assert not ours.cfg.tie_embeddings and ours.cfg.d_mlp == 96
    torch.testing.assert_close(ours(ids), want, atol=1e-5, rtol=0)
    bare = from_hf_gpt2(hf.state_dict(), n_heads=4).eval()
    assert bare.cfg == ours.cfg
    torch.testing.assert_close(bare(ids), want, atol=1e-5, rtol=0)


def test_bare_state_dict_head_count():
    hf = hf_gpt2()
    with torch.no_grad():  # sharpen attention so that the head split visibly matters
        for block in hf.transformer.h:
            block.attn.c_attn.weight.mul_(20)
    ids = torch.randint(0, 100, (1, 16))
    assert from_hf_gpt2(hf.state_dict()).cfg.n_heads == 1  # default d_model // 64, as in released GPT-2s
    wrong = from_hf_gpt2(hf.state_dict(), n_heads=2).eval()  # shapes cannot tell 2 heads from 4
    assert (wrong(ids) - hf(ids).logits).abs().max() > 1e-2
    torch.testing.assert_close(from_hf_gpt2(hf.state_dict(), n_heads=4)(ids), hf(ids).logits, atol=1e-5, rtol=0)


@pytest.mark.slow
def test_gpt2_small_shape():
    hf = hf_gpt2(n_layer=12, n_embd=768, n_head=12, vocab_size=50257, n_positions=1024)
    ours = from_hf_gpt2(hf).eval()
    assert sum(p.numel() for p in ours.parameters()) == 124_439_808  # GPT-2 small
    ids = torch.randint(0, 50257, (1, 64))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), hf(ids).logits, atol=1e-4, rtol=1e-4)
