"""arch.generate: cached vs recomputed decoding, filters against brute force, seeded sampling, beam search
against exhaustive search and a plain-Python reference beam search, eos handling, context cropping."""

from __future__ import annotations

import itertools
import math

import pytest
import torch
from torch import nn

from arch.build import build_model
from arch.config import POS_KINDS, ModelConfig, PosConfig
from arch.generate import _beam_search, generate, top_k_filter, top_p_filter

NEG_INF = float("-inf")


def tiny_model(pos: str = "rope", vocab_size: int = 11, n_ctx: int = 32, seed: int = 0, **kw) -> nn.Module:
    """A float64 random model with input-dependent, non-degenerate greedy and beam continuations.

    GPT-2 init (std 0.02) gives near-uniform logits; larger random weights with biases or tied embeddings
    collapse to "repeat the last token" or "always token j". Untied, bias-free matrices of std 0.1 don't.
    float64: cached and recomputed logits then agree to ~1e-15, so no argmax flips between them.
    """
    torch.manual_seed(seed)
    kw = dict(dict(bias=False, tie_embeddings=False), **kw)
    cfg = ModelConfig(vocab_size=vocab_size, n_ctx=n_ctx, d_model=16, n_layers=2, n_heads=2, pos=PosConfig(kind=pos), **kw)
    model = build_model(cfg).double()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() == 2:
                p.normal_(0.0, 0.1)
    return model.eval()


@torch.no_grad()
def naive_greedy(model: nn.Module, ids: torch.Tensor, n: int) -> torch.Tensor:
    """nanoGPT's loop: full forward over the (cropped) sequence every step, argmax of the last position."""
    for _ in range(n):
        window = ids if model.max_len is None else ids[:, -model.max_len :]
        nxt = model(window)[:, -1, :].argmax(-1)
        ids = torch.cat([ids, nxt[:, None]], dim=1)
    return ids


# ---------------------------------------------------------------------------------------------------------
# greedy: cache vs recompute


@pytest.mark.parametrize("pos", POS_KINDS)
def test_greedy_with_cache_equals_full_recompute(pos):
    model = tiny_model(pos)
    ids = torch.randint(0, 11, (3, 5), generator=torch.Generator().manual_seed(1))
    ref = naive_greedy(model, ids, 12)
    assert torch.equal(generate(model, ids, 12, temperature=0.0, use_cache=True), ref)
    assert torch.equal(generate(model, ids, 12, temperature=0.0, use_cache=False), ref)
    assert len(set(ref[:, 5:].flatten().tolist())) > 1  # not a degenerate constant continuation


@pytest.mark.parametrize("pos", ["learned", "rope"])
def test_generation_past_max_len(pos):
    # learned positions: crop to the last n_ctx tokens (cache dropped); rope: no limit, keeps the cache
    model = tiny_model(pos, n_ctx=8)
    ids = torch.randint(0, 11, (2, 6), generator=torch.Generator().manual_seed(2))
    ref = naive_greedy(model, ids, 10)  # runs to length 16 = 2 * n_ctx
    assert model.max_len == (8 if pos == "learned" else None)
    assert torch.equal(generate(model, ids, 10, temperature=0.0), ref)
    assert torch.equal(generate(model, ids, 10, temperature=0.0, use_cache=False), ref)
    # a prompt already longer than n_ctx
    long = torch.randint(0, 11, (2, 11), generator=torch.Generator().manual_seed(3))
    assert torch.equal(generate(model, long, 3, temperature=0.0), naive_greedy(model, long, 3))


def test_model_generate_delegates_and_1d_prompt():
    model = tiny_model("alibi")
    ids = torch.tensor([3, 1, 4])
    out = generate(model, ids, 4, temperature=0)
    assert out.shape == (7,) and torch.equal(out[:3], ids)
    assert torch.equal(model.generate(ids[None], max_new_tokens=4, temperature=0)[0], out)
    assert torch.equal(generate(model, ids[None], 0, temperature=0), ids[None])


def test_training_flag_is_restored_and_dropout_is_off():
    model = tiny_model("rope", dropout=0.5).train()
    ids = torch.tensor([[1, 2, 3]])
    a = generate(model, ids, 6, temperature=0)
    assert model.training
    assert torch.equal(a, generate(model, ids, 6, temperature=0))  # eval mode inside: deterministic
    assert torch.equal(a, naive_greedy(model.eval(), ids, 6))


# ---------------------------------------------------------------------------------------------------------
# filters against brute force


def ref_top_k(row: list[float], k: int) -> list[float]:
    kth = sorted(row, reverse=True)[min(k, len(row)) - 1]
    return [x if x >= kth else NEG_INF for x in row]


def ref_top_p(row: list[float], p: float) -> list[float]:
    m = max(row)
    e = [math.exp(x - m) for x in row]
    probs = [x / sum(e) for x in e]
    keep, mass = set(), 0.0
    for i in sorted(range(len(row)), key=lambda i: -probs[i]):
        if mass >= p:
            break
        keep.add(i)
        mass += probs[i]
    return [x if i in keep else NEG_INF for i, x in enumerate(row)]


def test_top_k_filter_matches_brute_force():
    g = torch.Generator().manual_seed(0)
    for trial in range(300):
        V = int(torch.randint(1, 30, (), generator=g))
        k = int(torch.randint(1, V + 3, (), generator=g))
        logits = torch.randn(4, V, generator=g, dtype=torch.float64)
        if trial % 3 == 0:  # integer logits: plenty of ties at the k-th value
            logits = torch.randint(-3, 3, (4, V), generator=g).double()
        before = logits.clone()
        out = top_k_filter(logits, k)
        assert out.tolist() == [ref_top_k(r, k) for r in logits.tolist()]
        assert torch.equal(logits, before)  # not modified in place


def test_top_p_filter_matches_brute_force():
    g = torch.Generator().manual_seed(1)
    for _ in range(300):
        V = int(torch.randint(1, 30, (), generator=g))
        p = float(torch.rand((), generator=g)) * 0.999 + 0.001
        logits = torch.randn(4, V, generator=g, dtype=torch.float64) * 2
        before = logits.clone()
        out = top_p_filter(logits, p)
        assert out.tolist() == [ref_top_p(r, p) for r in logits.tolist()]
        assert torch.equal(logits, before)
    x = torch.randn(2, 3, 7, generator=g)  # leading batch dims
    assert torch.equal(top_p_filter(x, 0.5)[1, 2], top_p_filter(x[1, 2], 0.5))
    assert torch.equal(top_p_filter(x, 1.0), x) and torch.equal(top_k_filter(x, 7), x)


def test_filters_reject_bad_arguments():
    x = torch.zeros(1, 4)
    for bad in (0.0, -0.1, 1.5):
        with pytest.raises(ValueError, match="top_p"):
            top_p_filter(x, bad)
    with pytest.raises(ValueError, match="top_k"):
        top_k_filter(x, 0)


# ---------------------------------------------------------------------------------------------------------
# sampling


class FixedLogits(nn.Module):
    """Stub model: the same next-token logits for every row and position. No cache support."""

    max_len = None

    def __init__(self, logits: list[float]):
        super().__init__()
        self.register_buffer("row", torch.tensor(logits, dtype=torch.float64))

    def forward(self, ids):
        return self.row.expand(*ids.shape, -1)


@pytest.mark.parametrize("top_k,top_p", [(None, None), (3, None), (None, 0.6), (4, 0.8)])
def test_sampling_distribution_matches_filtered_softmax(top_k, top_p):
    logits = [2.0, 1.5, 1.0, 0.3, 0.0, -1.0]
    model = FixedLogits(logits)
    n = 20_000
    out = generate(model, torch.zeros(n, 1, dtype=torch.long), 1, temperature=0.7, top_k=top_k, top_p=top_p,
                   use_cache=False, generator=torch.Generator().manual_seed(0))[:, 1]  # fmt: skip
    # expected: temperature, then top-k, then top-p (brute-force references), then softmax
    row = [x / 0.7 for x in logits]
    if top_k is not None:
        row = ref_top_k(row, top_k)
    if top_p is not None:
        row = ref_top_p(row, top_p)
    expected = torch.tensor(row).softmax(-1)
    freq = torch.bincount(out, minlength=len(logits)).double() / n
    assert torch.all(freq[expected == 0] == 0)  # filtered tokens never appear
    assert torch.allclose(freq, expected.double(), atol=4 * (0.25 / n) ** 0.5)  # 4 sigma


def test_sampling_is_deterministic_with_a_seeded_generator():
    model = tiny_model("rope")
    ids = torch.tensor([[1, 2], [3, 4]])
    kw = dict(temperature=1.5, top_k=8, top_p=0.95)
    a = generate(model, ids, 15, generator=torch.Generator().manual_seed(7), **kw)
    b = generate(model, ids, 15, generator=torch.Generator().manual_seed(7), **kw)
    c = generate(model, ids, 15, generator=torch.Generator().manual_seed(8), **kw)
    d = generate(model, ids, 15, generator=torch.Generator().manual_seed(7), use_cache=False, **kw)
    assert torch.equal(a, b) and torch.equal(a, d)
    assert not torch.equal(a, c)


def test_temperature_zero_is_argmax_and_low_temperature_approaches_it():
    model = tiny_model("relative")
    ids = torch.tensor([[5, 6, 7]])
    greedy = naive_greedy(model, ids, 8)
    assert torch.equal(generate(model, ids, 8, temperature=0.0), greedy)
    cold = generate(model, ids, 8, temperature=1e-6, generator=torch.Generator().manual_seed(0))
    assert torch.equal(cold, greedy)


# ---------------------------------------------------------------------------------------------------------
# beam search


@torch.no_grad()
def seq_logprob(model: nn.Module, prompt: list[int], cont: list[int], eos_id: int | None = None) -> float:
    """Sum of log p(token) over `cont`, up to and including the first eos."""
    ids = torch.tensor([prompt + cont])
    logp = torch.log_softmax(model(ids)[0].double(), -1)
    total = 0.0
    for j, tok in enumerate(cont):
        total += float(logp[len(prompt) - 1 + j, tok])
        if tok == eos_id:
            break
    return total


@torch.no_grad()
def exhaustive_best(model, prompt: list[int], n: int, V: int, eos_id: int | None = None) -> list[int]:
    """Score every continuation of length n (eos-padded after the first eos) in one batched forward."""
    conts = []
    for cont in itertools.product(range(V), repeat=n):
        if eos_id is not None and eos_id in cont:  # canonical form: only eos after the first eos
            i = cont.index(eos_id)
            if any(t != eos_id for t in cont[i:]):
                continue
        conts.append(list(cont))
    seqs = torch.tensor([prompt + c for c in conts])  # (N, T + n)
    logp = torch.log_softmax(model(seqs).double(), -1)  # (N, T + n, V)
    scores = []
    for r, cont in enumerate(conts):
        total = 0.0
        for j, tok in enumerate(cont):
            total += float(logp[r, len(prompt) - 1 + j, tok])
            if tok == eos_id:
                break
        scores.append(total)
    return prompt + conts[max(range(len(conts)), key=scores.__getitem__)]


@torch.no_grad()
def reference_beam_search(model, prompt: list[int], n: int, K: int, eos_id: int | None = None) -> list[int]:
    """Textbook beam search in plain Python, full recompute per hypothesis, no cache."""
    beams = [(0.0, prompt)]
    for _ in range(n):
        cands = []
        for score, seq in beams:
            if eos_id is not None and len(seq) > len(prompt) and seq[-1] == eos_id:
                cands.append((score, seq + [eos_id]))
                continue
            logp = torch.log_softmax(model(torch.tensor([seq]))[0, -1].double(), -1).tolist()
            cands += [(score + lp, seq + [v]) for v, lp in enumerate(logp)]
        beams = sorted(cands, key=lambda c: -c[0])[:K]
    return beams[0][1]


def likely_eos(model, prompt: list[int], step: int) -> int:
    """The greedy token at `step` after `prompt`: as eos it makes early-finishing hypotheses competitive."""
    return int(naive_greedy(model, torch.tensor([prompt]), step + 1)[0, len(prompt) + step])


@pytest.mark.parametrize("use_eos", [False, True])
@pytest.mark.parametrize("pos", ["learned", "relative"])
def test_beam_search_is_exact_when_beams_cover_all_prefixes(use_eos, pos):
    V, n = 5, 3
    model = tiny_model(pos, vocab_size=V, seed=3)
    prompts = [[1, 3], [4, 0]]
    eos_id = likely_eos(model, prompts[0], 1) if use_eos else None
    out = generate(model, torch.tensor(prompts), n, num_beams=V ** (n - 1), eos_id=eos_id)  # 25 beams
    for b, prompt in enumerate(prompts):
        assert out[b].tolist() == exhaustive_best(model, prompt, n, V, eos_id)


@pytest.mark.parametrize("K", [2, 3])
@pytest.mark.parametrize("use_eos", [False, True])
def test_beam_search_matches_reference_beam_search(K, use_eos):
    V, n = 6, 5
    model = tiny_model("rope", vocab_size=V, seed=4)
    prompts = [[0, 2], [5, 5], [3, 1]]
    eos_id = likely_eos(model, prompts[1], 2) if use_eos else None
    ids = torch.tensor(prompts)
    out_cache = generate(model, ids, n, num_beams=K, eos_id=eos_id)
    out_nocache = generate(model, ids, n, num_beams=K, eos_id=eos_id, use_cache=False)
    assert torch.equal(out_cache, out_nocache)
    for b, prompt in enumerate(prompts):
        ref = reference_beam_search(model, prompt, n, K, eos_id)
        assert out_cache[b, : len(ref)].tolist() == ref
        if len(ref) < out_cache.shape[1]:  # stopped early for another row? then pad is eos
            assert set(out_cache[b, len(ref) :].tolist()) == {eos_id}


def test_beam_search_with_one_beam_is_greedy():
    model = tiny_model("sinusoidal")
    ids = torch.tensor([[1, 2, 3], [4, 5, 6]])
    assert torch.equal(_beam_search(model, ids, 10, 1, None, True), naive_greedy(model, ids, 10))
    assert torch.equal(generate(model, ids, 10, num_beams=1, temperature=0), naive_greedy(model, ids, 10))


def test_beam_search_scores_at_least_greedy():
    model = tiny_model("learned", vocab_size=7, seed=5)
    prompt = [2, 4]
    greedy = naive_greedy(model, torch.tensor([prompt]), 6)[0, 2:].tolist()
    beam = generate(model, torch.tensor([prompt]), 6, num_beams=4)[0, 2:].tolist()
    assert seq_logprob(model, prompt, beam) >= seq_logprob(model, prompt, greedy) - 1e-12


def test_beam_search_rejects_sampling_filters():
    model = tiny_model()
    with pytest.raises(ValueError, match="beam"):
        generate(model, torch.tensor([[1]]), 2, num_beams=2, top_k=3)


# ---------------------------------------------------------------------------------------------------------
# eos


class NextToken(nn.Module):
    """Stub model whose greedy choice is (last token + 1) % V; a KV cache is accepted and ignored."""

    max_len = None

    def __init__(self, V: int = 6):
        super().__init__()
        self.V = V

    def forward(self, ids, kv_cache=None):
        return torch.nn.functional.one_hot((ids + 1) % self.V, self.V).double() * 10


def test_eos_stops_each_row_and_pads_with_eos():
    model = NextToken()
    ids = torch.tensor([[0], [2], [5]])
    out = generate(model, ids, 10, temperature=0, eos_id=3, use_cache=False)
    # row 0 reaches 3 after three steps, row 1 after one, row 2 (5 -> 0 -> 1 -> 2 -> 3) after four; then stop
    assert out.tolist() == [[0, 1, 2, 3, 3], [2, 3, 3, 3, 3], [5, 0, 1, 2, 3]]
    # without eos_id the same model runs all 10 steps
    assert generate(model, ids, 10, temperature=0, use_cache=False).shape == (3, 11)


def test_eos_with_a_real_model():
    model = tiny_model("rope")
    ids = torch.tensor([[1, 2, 3], [7, 8, 9]])
    free = naive_greedy(model, ids, 8)
    eos = int(free[0, 5])  # row 0's third generated token
    out = generate(model, ids, 8, temperature=0, eos_id=eos)
    first = free[0, 3:].tolist().index(eos) + 3  # first occurrence in row 0's continuation
    assert out[0, : first + 1].tolist() == free[0, : first + 1].tolist()
    assert set(out[0, first + 1 :].tolist()) <= {eos}
    for b in range(2):  # every row agrees with free running up to its first eos, eos after
        row, ref = out[b].tolist(), free[b].tolist()
        cut = ref[3:].index(eos) + 3 if eos in ref[3:] else len(ref)
        assert row[: cut + 1] == ref[: min(cut + 1, len(row))][: len(row)]
        assert all(t == eos for t in row[cut + 1 :])


def test_argument_validation():
    model = tiny_model()
    ids = torch.tensor([[1]])
    with pytest.raises(ValueError, match="temperature"):
        generate(model, ids, 2, temperature=-1)
    with pytest.raises(ValueError, match="num_beams"):
        generate(model, ids, 2, num_beams=0)
    with pytest.raises(ValueError, match="max_new_tokens"):
        generate(model, ids, -1)
