"""experiments.run.eval_lm against independent references: closed forms (ln V loss of a uniform model, ln(t+1)
entropy of uniform causal rows, hand-computed bpb) and brute-force per-token loops over windows."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from torch import nn

from experiments.run.eval_lm import (
    attention_entropy,
    bits_per_byte,
    evaluate_model,
    length_extrapolation,
    spread,
    window_starts,
)

V = 13


class ToyLM(nn.Module):
    """Causal toy LM: logits at t from the mean of embeddings 0..t (+ learned positions when max_len is set).

    Its "attention" is the uniform causal average, which run_with_cache reports as attn_pattern.{i}.
    """

    def __init__(self, vocab=V, d=8, max_len=None, n_layers=2, n_heads=3, seed=0):
        super().__init__()
        torch.manual_seed(seed)
        self.emb = nn.Embedding(vocab, d)
        self.pos = nn.Embedding(max_len, d) if max_len else None
        self.head = nn.Linear(d, vocab)
        self.drop = nn.Dropout(0.5)  # must be off in evaluation
        self.max_len, self.n_layers, self.n_heads = max_len, n_layers, n_heads

    def forward(self, ids):
        B, T = ids.shape
        if self.max_len is not None and T > self.max_len:
            raise ValueError(f"T={T} > max_len={self.max_len}")
        x = self.emb(ids)  # (B, T, d)
        if self.pos is not None:
            x = x + self.pos(torch.arange(T))
        x = x.cumsum(1) / torch.arange(1, T + 1)[None, :, None]  # causal prefix mean
        return self.head(self.drop(torch.tanh(3 * x)))  # (B, T, V)

    def run_with_cache(self, ids):
        B, T = ids.shape
        pattern = torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1)[:, None]  # row t uniform over 0..t
        cache = {f"attn_pattern.{i}": pattern.expand(B, self.n_heads, T, T) for i in range(self.n_layers)}
        return self(ids), cache


class UniformLM(nn.Module):
    """All-zero logits: every token has probability 1/V."""

    max_len = None

    def __init__(self, vocab=V):
        super().__init__()
        self.vocab = vocab
        self.dummy = nn.Parameter(torch.zeros(()))

    def forward(self, ids):
        return torch.zeros(*ids.shape, self.vocab) + 0 * self.dummy


def _tokens(n, vocab=V, seed=1):
    return np.random.default_rng(seed).integers(0, vocab, size=n).astype(np.uint16)


def _logp(model, window):
    with torch.no_grad():
        return torch.log_softmax(model(torch.tensor(window, dtype=torch.long)[None])[0].double(), -1)  # (L, V)


def ref_nonoverlap(model, toks, L, windows=None):
    """Brute force: windows at 0, L, 2L, ... one at a time (only those numbered in `windows`), every target scored."""
    model.eval()
    nats, n, s, w = 0.0, 0, 0, 0
    while s + L + 1 <= len(toks):
        if windows is None or w in windows:
            logp = _logp(model, toks[s : s + L])
            for j in range(L):
                nats -= logp[j, int(toks[s + j + 1])].item()
                n += 1
        s, w = s + L, w + 1
    return nats / n, n


def ref_sliding(model, toks, L, S):
    """Brute force: windows every S; a target is scored by the first window that contains it."""
    model.eval()
    scored = {}  # absolute target index -> (nats, context length)
    s = 0
    while s + L + 1 <= len(toks):
        logp = _logp(model, toks[s : s + L])
        for j in range(L):
            a = s + j + 1
            if a not in scored:
                scored[a] = (-logp[j, int(toks[a])].item(), j + 1)
        s += S
    return sum(v[0] for v in scored.values()) / len(scored), scored


# -- helpers ------------------------------------------------------------------------------------------------


def test_bits_per_byte_by_hand():
    # 1000 tokens at 2.0 nats each over 3500 bytes: 2000 nats = 2885.39 bits -> 0.824399 bits/byte
    assert bits_per_byte(2000.0, 3500) == pytest.approx(2000 / math.log(2) / 3500)
    assert bits_per_byte(2000.0, 3500) == pytest.approx(0.8243966, rel=1e-6)
    assert bits_per_byte(8 * math.log(2), 8) == pytest.approx(1.0)


def test_entropy_of_uniform_causal_rows_is_ln_t_plus_1():
    T = 9
    pattern = torch.tril(torch.ones(T, T)) / torch.arange(1, T + 1)[:, None]
    ent = attention_entropy(pattern)
    assert torch.allclose(ent.double(), torch.log(torch.arange(1, T + 1, dtype=torch.float64)), atol=1e-6)
    assert attention_entropy(torch.eye(T)).abs().max().item() == 0.0  # one-hot rows
    p = torch.tensor([0.5, 0.25, 0.25, 0.0])
    assert attention_entropy(p).item() == pytest.approx(1.5 * math.log(2))  # 0.5 ln2 + 2 * 0.25 ln4


def test_window_starts():
    assert window_starts(10, 4, 4) == [0, 4]  # 0..4 and 4..8 need 5 tokens each; 8..12 does not fit
    assert window_starts(9, 4, 4) == [0, 4]
    assert window_starts(8, 4, 4) == [0]
    assert window_starts(4, 4, 4) == []


# -- evaluate_model -----------------------------------------------------------------------------------------


def test_uniform_model_closed_form():
    toks = _tokens(5 * 16 + 1)
    out = evaluate_model(UniformLM(), toks, n_ctx=16, batch_size=2, max_batches=None, bytes_per_token=3.5, device="cpu")
    assert out["val/loss"] == pytest.approx(math.log(V), rel=1e-6)
    assert out["val/ppl"] == pytest.approx(V, rel=1e-5)
    assert out["val/bpb"] == pytest.approx(math.log2(V) / 3.5, rel=1e-6)
    assert not any(k.startswith("attn_entropy") for k in out)  # no run_with_cache -> omitted


@pytest.mark.parametrize("batch_size, max_batches", [(1, None), (3, None), (2, 2), (4, 1)])
def test_evaluate_matches_brute_force(batch_size, max_batches):
    model = ToyLM()
    model.train()
    toks = _tokens(7 * 12 + 5)
    out = evaluate_model(
        model, toks, n_ctx=12, batch_size=batch_size, max_batches=max_batches, bytes_per_token=2.0, device="cpu"
    )
    assert model.training  # mode restored (dropout was off inside: see the brute-force match below)
    # 7 full windows; 4 of them (2 x 2, 4 x 1) spread over the split are windows 0, 2, 4, 6 (i * 6/3)
    windows = None if max_batches is None else {0, 2, 4, 6}
    ref, n = ref_nonoverlap(model, toks, 12, windows)
    assert n == 12 * (7 if windows is None else 4)
    assert out["val/loss"] == pytest.approx(ref, rel=1e-5)
    assert out["val/ppl"] == pytest.approx(math.exp(ref), rel=1e-5)
    assert out["val/bpb"] == pytest.approx(ref / math.log(2) / 2.0, rel=1e-5)


class RepeatLM(nn.Module):
    """Bets on "the next token repeats this one": logit ln 2 on the input token, 0 on the others (vocab 3), so
    p(repeat) = 2/4 and p(each other token) = 1/4: a repeated target costs ln 2 nats, any other ln 4."""

    def forward(self, ids):
        return math.log(2) * nn.functional.one_hot(ids, 3).float()  # (B, L, 3)


def _easy_prefix_split(L, easy, hard):
    """`easy` windows of one repeated token, then `hard` windows where every token differs from the one before:
    window w (inputs t[wL : wL+L], targets one later) costs ln 2 per token if w < easy, else ln 4."""
    toks = [0] * (easy * L + 1) + [(i % 3) for i in range(1, hard * L + 1)]
    return np.array(toks, dtype=np.uint16)


def test_validation_with_an_easy_prefix_scores_as_the_whole_split():
    """4 easy windows then 12 hard ones: the whole split is (4 ln 2 + 12 ln 4) / 16 = 1.75 ln 2 nats per token.
    Its first 4 windows alone would say ln 2; 4 windows spread over it (0, 5, 10, 15) are 1 easy + 3 hard, the
    same 1.75 ln 2."""
    L, toks = 8, _easy_prefix_split(8, easy=4, hard=12)
    kw = dict(n_ctx=L, bytes_per_token=1.0, device="cpu", attn_entropy=False)
    whole = evaluate_model(RepeatLM(), toks, batch_size=4, max_batches=None, **kw)["val/loss"]
    assert whole == pytest.approx(1.75 * math.log(2), rel=1e-6)
    for batch_size, max_batches in [(2, 2), (4, 1), (1, 4)]:
        sampled = evaluate_model(RepeatLM(), toks, batch_size=batch_size, max_batches=max_batches, **kw)["val/loss"]
        assert sampled == pytest.approx(whole, rel=1e-6)
    assert evaluate_model(RepeatLM(), toks, batch_size=4, max_batches=99, **kw)["val/loss"] == pytest.approx(whole)


class StartRecorder(nn.Module):
    """Records the first input token of every window it is given; uniform logits over `vocab`."""

    def __init__(self, vocab):
        super().__init__()
        self.vocab, self.seen = vocab, []

    def forward(self, ids):
        self.seen += ids[:, 0].tolist()
        return torch.zeros(*ids.shape, self.vocab)


def _scored_starts(n, L, **kw):
    """The starts of the windows evaluate_model scores on a stream whose token i is i (so a window's first token is
    its start)."""
    model = StartRecorder(n)
    evaluate_model(model, np.arange(n, dtype=np.int32), n_ctx=L, bytes_per_token=1.0, device="cpu",
                   attn_entropy=False, **kw)
    return model.seen


def test_eval_windows_cover_the_split_start_middle_and_end():
    """The windows scored at eval_batches x batch_size < all: the first, one near the middle and the last full
    window of the split, evenly spaced (gaps of 1 or 2 windows here), the same every time."""
    starts = window_starts(1000 * 16 + 1, 16, 16)  # 1000 windows
    picked = spread(starts, 20)
    assert picked == spread(starts, 20) == _scored_starts(1000 * 16 + 1, 16, batch_size=4, max_batches=5)
    assert picked[0] == 0 and picked[-1] == starts[-1] == 999 * 16
    assert any(abs(s - 500 * 16) <= 27 * 16 for s in picked)  # a window within half a gap of the middle
    gaps = {(b - a) // 16 for a, b in zip(picked, picked[1:])}
    assert gaps <= {52, 53}  # 999 / 19 = 52.6
    assert spread(starts[:5], 20) == starts[:5]  # fits: every window
    assert spread(starts[:5], 1) == [starts[2]]


def test_attn_entropy_of_uniform_causal_model():
    T = 10
    out = evaluate_model(ToyLM(n_layers=3), _tokens(4 * T + 1), n_ctx=T, batch_size=2, max_batches=None,
                         bytes_per_token=1.0, device="cpu")
    expected = math.lgamma(T + 1) / T  # mean over t of ln(t+1) = ln(T!) / T
    assert [k for k in out if k.startswith("attn_entropy")] == [f"attn_entropy/layer_{i}" for i in range(3)]
    for i in range(3):
        assert out[f"attn_entropy/layer_{i}"] == pytest.approx(expected, rel=1e-6)


def test_evaluate_is_deterministic_and_needs_one_window():
    model, toks = ToyLM(), _tokens(200)
    kw = dict(n_ctx=16, batch_size=4, max_batches=2, bytes_per_token=1.0, device="cpu")
    assert evaluate_model(model, toks, **kw) == evaluate_model(model, toks, **kw)
    with pytest.raises(ValueError, match="n_ctx"):
        evaluate_model(model, toks[:16], **kw)


# -- length_extrapolation -----------------------------------------------------------------------------------


def test_extrapolation_matches_brute_force():
    model, n_ctx = ToyLM(), 6
    toks = _tokens(8 * n_ctx * 3 + 7)
    out = length_extrapolation(model, toks, n_ctx=n_ctx, max_tokens=len(toks), device="cpu", batch_size=3)
    assert sorted(out) == sorted(f"extrap/{m}/loss@{k}x" for m in ("nonoverlap", "sliding") for k in (1, 2, 4, 8))
    for k in (1, 2, 4, 8):
        L = k * n_ctx
        ref, _ = ref_nonoverlap(model, toks, L)
        assert out[f"extrap/nonoverlap/loss@{k}x"] == pytest.approx(ref, rel=1e-5)
        ref_s, scored = ref_sliding(model, toks, L, L // 2)
        assert out[f"extrap/sliding/loss@{k}x"] == pytest.approx(ref_s, rel=1e-5)
        # every target after the first window had at least L - S tokens of context
        assert min(ctx for a, (_, ctx) in scored.items() if a > L) >= L - L // 2


def test_sliding_with_stride_equal_to_length_is_nonoverlap():
    model, n_ctx = ToyLM(), 5
    toks = _tokens(300)
    out = length_extrapolation(model, toks, n_ctx=n_ctx, factors=(1, 3), max_tokens=300, device="cpu",
                               stride=10**6)  # capped at L
    for k in (1, 3):
        assert out[f"extrap/sliding/loss@{k}x"] == pytest.approx(out[f"extrap/nonoverlap/loss@{k}x"], rel=1e-12)
    # and a fixed small stride differs (more context per token), matching its own brute force
    out2 = length_extrapolation(model, toks, n_ctx=n_ctx, factors=(3,), modes=("sliding",), max_tokens=300,
                                device="cpu", stride=4)
    ref, _ = ref_sliding(model, toks, 15, 4)
    assert out2["extrap/sliding/loss@3x"] == pytest.approx(ref, rel=1e-5)
    assert out2["extrap/sliding/loss@3x"] != pytest.approx(out["extrap/nonoverlap/loss@3x"], rel=1e-6)


def test_batch_size_does_not_change_results():
    model, toks = ToyLM(), _tokens(400)
    a = length_extrapolation(model, toks, n_ctx=7, max_tokens=400, device="cpu", batch_size=1)
    b = length_extrapolation(model, toks, n_ctx=7, max_tokens=400, device="cpu", batch_size=16)
    assert a.keys() == b.keys()
    for key in a:
        assert a[key] == pytest.approx(b[key], rel=1e-5)


def test_learned_positions_are_na_past_n_ctx():
    model = ToyLM(max_len=8)
    toks = _tokens(500)
    out = length_extrapolation(model, toks, n_ctx=8, max_tokens=500, device="cpu")
    for mode in ("nonoverlap", "sliding"):
        assert out[f"extrap/{mode}/loss@1x"] == pytest.approx(ref_nonoverlap(model, toks, 8)[0] if mode == "nonoverlap"
                                                              else ref_sliding(model, toks, 8, 4)[0], rel=1e-5)
        for k in (2, 4, 8):
            assert out[f"extrap/{mode}/loss@{k}x"] is None


def test_too_few_tokens_and_failing_forward_are_na(caplog):
    model = ToyLM()
    out = length_extrapolation(model, _tokens(30), n_ctx=8, max_tokens=30, device="cpu")
    assert out["extrap/nonoverlap/loss@2x"] is not None  # 17 tokens needed
    assert out["extrap/nonoverlap/loss@4x"] is None and out["extrap/sliding/loss@8x"] is None

    class Picky(ToyLM):  # rejects long inputs itself, without advertising max_len
        def forward(self, ids):
            if ids.shape[1] > 8:
                raise RuntimeError("too long")
            return super().forward(ids)

    with caplog.at_level("WARNING", logger="experiments.run.eval_lm"):
        out = length_extrapolation(Picky(), _tokens(200), n_ctx=8, factors=(1, 2), max_tokens=200, device="cpu")
    assert out["extrap/nonoverlap/loss@1x"] is not None and out["extrap/nonoverlap/loss@2x"] is None
    assert any("reporting N/A" in r.message for r in caplog.records)


def test_max_tokens_limits_the_stream():
    model, toks = ToyLM(), _tokens(1000)
    out = length_extrapolation(model, toks, n_ctx=10, factors=(1,), modes=("nonoverlap",), max_tokens=101, device="cpu")
    assert out["extrap/nonoverlap/loss@1x"] == pytest.approx(ref_nonoverlap(model, toks[:101], 10)[0], rel=1e-5)
    with pytest.raises(ValueError, match="nonoverlap"):
        length_extrapolation(model, toks, n_ctx=10, modes=("strided",), max_tokens=101, device="cpu")


# -- with the real arch model -------------------------------------------------------------------------------


def _arch_model(kind):
    arch = pytest.importorskip("arch")
    cfg = arch.ModelConfig(vocab_size=V, n_ctx=8, d_model=16, n_layers=2, n_heads=2, pos=arch.PosConfig(kind=kind))
    torch.manual_seed(0)
    return arch.build_model(cfg)


@pytest.mark.parametrize("kind", ["rope", "alibi"])
def test_arch_model_matches_brute_force(kind):
    model = _arch_model(kind)
    toks = _tokens(8 * 8 * 2 + 3)
    out = length_extrapolation(model, toks, n_ctx=8, max_tokens=len(toks), device="cpu", batch_size=4)
    for k in (1, 2, 4, 8):
        assert out[f"extrap/nonoverlap/loss@{k}x"] == pytest.approx(ref_nonoverlap(model, toks, 8 * k)[0], rel=1e-4)
        assert out[f"extrap/sliding/loss@{k}x"] == pytest.approx(ref_sliding(model, toks, 8 * k, 4 * k)[0], rel=1e-4)
    ev = evaluate_model(model, toks, n_ctx=8, batch_size=4, max_batches=None, bytes_per_token=1.0, device="cpu")
    assert ev["val/loss"] == pytest.approx(out["extrap/nonoverlap/loss@1x"], rel=1e-5)
    entropies = [ev[f"attn_entropy/layer_{i}"] for i in range(2)]
    # each row's entropy lies in [0, ln(t+1)], so the mean lies in [0, ln(T!)/T]
    assert all(0.0 <= e <= math.lgamma(9) / 8 + 1e-6 for e in entropies)


def test_arch_learned_is_na_beyond_1x():
    model = _arch_model("learned")
    assert model.max_len == 8
    out = length_extrapolation(model, _tokens(300), n_ctx=8, max_tokens=300, device="cpu")
    assert out["extrap/nonoverlap/loss@1x"] is not None and out["extrap/sliding/loss@1x"] is not None
    assert all(out[f"extrap/{m}/loss@{k}x"] is None for m in ("nonoverlap", "sliding") for k in (2, 4, 8))
