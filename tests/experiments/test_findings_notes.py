"""The dated audit notes on the v2 findings' docs (issue 32 §3): a blockquote between `<!-- audit-note:start -->` and
`<!-- audit-note:end -->` under each doc's title, the registered text left as it was.

Checked here: each noted doc is its pre-note text (sha256 pinned below: `git show 3eea256:docs/findings/<name>.md |
sha256sum`, the docs as the v2 runs wrote them) plus exactly that block under the title, its metadata line first;
`python -m experiments.findings --index` keeps every block byte-for-byte, also where it has to insert a
newer-version pointer into a noted doc (the index's own markers, under the title); the numbers a note derives: the
v3 labels (experiments/findings/outcome.py's table on the CI printed in the registered text below the note), the
μP optima spans recomputed from the doc's own table, and the QK-norm note's bound, gain groups and Adam step bound
against independent computations. Not checked: the notes' prose.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import re
import shutil
from pathlib import Path

import pytest
import torch

from experiments.findings import FINDINGS
from experiments.findings import index as index_lib
from experiments.findings.cli import main
from experiments.findings.doc import NEWER_END, NEWER_START
from experiments.findings.outcome import at_level, classify

from .conftest import REPO

DOCS = REPO / "docs" / "findings"
START, END = "<!-- audit-note:start -->", "<!-- audit-note:end -->"
HEAD = "> **Note (2026-11-29, issue 32 audit).** Written after the run; the registered text below is unchanged."
BEFORE = {  # sha256 of each doc before its note (the v2 run's own text)
    "xiong_postln_warmup_v2": "094fc7a90a47dda54ad30d2c02e7c5a68f10b39b6a72b79d6ac761ffeebcb55c",
    "rmsnorm_vs_layernorm_v2": "c6b2011a06340969ab434c7f946a4b529727e842e1ba3f7a4186e53e49a7c580",
    "gqa_vs_mha": "6ad40bb15a6b9a9be7cc4f189ed175aaba1cfb40026159b16e231de02ea2636b",
    "tied_vs_untied": "c92cf6eb3c84bbed48ede06ffa6486ed613a7037ff4b95ff756ddb58b1b94d98",
    "mup_lr_transfer": "a1bd2fc732f9ad4e9771c747ab1330387b8b5bfa168cbdfedd043e4c4ec4e4e7",
    "kaplan_aspect_ratio_mup": "ad044dd6d3f0a30a948de6c1007bda95b7aef37cf0208af30348dba2e73ce43e",
    "qk_norm_lr_sensitivity": "61a3c3de94704134b8a02a475c98d875b34b2d46ab74b1234d43feb83a8fa1aa",
}
NOTED = sorted(BEFORE)


def _cut(text: str, start: str, end: str) -> tuple[str, str | None]:
    """(text without the first start..end block and the blank line mark_superseded / the note put before it,
    the block) ; (text, None) when there is none."""
    m = re.search(rf"\n\n({re.escape(start)}\n.*?\n{re.escape(end)})\n", text, re.S)
    return (text, None) if m is None else (text[:m.start()] + "\n" + text[m.end():], m.group(1))


def _split(text: str) -> tuple[str, str]:
    """(the doc as registered: without its audit note and the index's newer-version pointer, the note block)."""
    text, _ = _cut(text, NEWER_START, NEWER_END)
    rest, note = _cut(text, START, END)
    assert note is not None, "no audit note"
    return rest, note


def _flat(note: str) -> str:
    """The note's text as one line (the quote's line breaks are spaces when rendered)."""
    return re.sub(r"\n>(?: |$)", " ", note, flags=re.M)


@pytest.mark.parametrize("name", NOTED)
def test_a_note_sits_under_the_title_and_the_rest_is_the_registered_text(name):
    text = (DOCS / f"{name}.md").read_text()
    assert text.count(START) == text.count(END) == 1
    rest, note = _split(text)
    assert hashlib.sha256(rest.encode()).hexdigest() == BEFORE[name]  # nothing else changed, the metadata included
    lines = _cut(text, NEWER_START, NEWER_END)[0].split("\n")  # (the index may put its pointer above the note)
    assert lines[0].startswith("<!-- archlab-finding: ") and lines[0] == rest.split("\n")[0]
    assert lines[1].startswith("# ") and lines[2] == "" and lines[3] == START  # right under the title
    body = note.split("\n")[1:-1]
    assert body[0].startswith(HEAD) and all(line == ">" or line.startswith("> ") for line in body)
    assert not any(line[2:3] in ("|", "#", "-") for line in body)  # no table row, heading or list inside the quote


def test_index_keeps_every_note_byte_for_byte(tmp_path, capsys):
    docs = tmp_path / "findings"
    docs.mkdir()
    for p in DOCS.glob("*.md"):
        shutil.copy(p, docs / p.name)
    before = {n: (docs / f"{n}.md").read_bytes() for n in NOTED}
    assert main(["--index", "--docs-dir", str(docs)]) == 0
    capsys.readouterr()
    assert {n: (docs / f"{n}.md").read_bytes() for n in NOTED} == before  # latest versions: untouched

    # a newer version with a full-run doc: the index inserts its pointer under each noted doc's title
    fakes = []
    for n in NOTED:
        base, v = index_lib.split_version(n)
        newer = dataclasses.replace(FINDINGS[n], name=f"{base}_v{v + 7}")
        meta = {"name": newer.name, "verdict": "reproduced", "key_number": "k", "smoke": False}
        (docs / f"{newer.name}.md").write_text(f"<!-- archlab-finding: {json.dumps(meta)} -->\n# {newer.name}\n")
        fakes.append(newer)
    index_lib.write_index([*FINDINGS.values(), *fakes], docs)
    for n, newer in zip(NOTED, fakes):
        text = (docs / f"{n}.md").read_text()
        assert f"[{newer.name}]({newer.name}.md)" in text.split(START)[0]  # the pointer, above the note
        rest, note = _split(text)
        assert note == _split(before[n].decode())[1]  # the note: byte-for-byte
        assert hashlib.sha256(rest.encode()).hexdigest() == BEFORE[n]
    again = {n: (docs / f"{n}.md").read_bytes() for n in NOTED}
    index_lib.write_index([*FINDINGS.values(), *fakes], docs)
    assert {n: (docs / f"{n}.md").read_bytes() for n in NOTED} == again  # idempotent


# ------------------------------------------------------------------------------------------------ the notes' numbers

# (doc, the 95% CI of d = arm − baseline as the registered text prints it, claim, SESOI, the label the note gives,
#  the interval the note quotes at the level read: the 90% one for an equivalence claim, n = 3 paired: 2 df)
LABELS = [
    ("xiong_postln_warmup_v2", "+0.018 [-0.003, 0.040]", "higher", 0.02, "inconclusive", None),
    ("xiong_postln_warmup_v2", "+0.132 [0.114, 0.150]", "equal", 0.02, "not reproduced", "[0.120, 0.144]"),
    ("rmsnorm_vs_layernorm_v2", "-0.009 [-0.052, 0.033]", "equal", 0.02, "inconclusive", "[-0.038, 0.019]"),
    ("gqa_vs_mha", "+0.022 [-0.034, 0.078]", "equal", 0.02, "inconclusive", "[-0.016, 0.060]"),
    ("gqa_vs_mha", "-0.030 [-0.057, -0.002]", "equal", 0.02, "inconclusive", "[-0.048, -0.011]"),
    ("tied_vs_untied", "-0.001 [-0.043, 0.041]", "higher", 0.02, "inconclusive", None),
    ("tied_vs_untied", "-0.009 [-0.026, 0.008]", "higher", 0.02, "not reproduced", None),
]


def _ci(printed: str) -> tuple[float, float]:
    lo, hi = re.search(r"\[(\S+), (\S+)\]", printed).groups()
    return float(lo), float(hi)


@pytest.mark.parametrize("name, printed, claim, sesoi, label, quoted", LABELS)
def test_a_notes_v3_label_is_the_table_s_on_the_docs_own_ci(name, printed, claim, sesoi, label, quoted):
    rest, note = _split((DOCS / f"{name}.md").read_text())
    note = _flat(note)
    assert printed in rest and printed.split(" ", 1)[1] in note  # the CI is the registered text's, quoted as is
    ci = _ci(printed)
    if claim == "equal":
        ci = at_level(ci, 2, 0.90)
        assert quoted == f"[{ci[0]:.3f}, {ci[1]:.3f}]" and quoted in note
    assert classify(ci, claim, sesoi) == label and f"**{label}**" in note


def test_rmsnorm_note_speed_half_at_the_papers_smallest_saving():
    rest, note = _split((DOCS / "rmsnorm_vs_layernorm_v2.md").read_text())
    note = _flat(note)
    assert "0.993 [0.971, 1.015]" in rest
    log_ci, delta = (math.log(0.971), math.log(1.015)), -math.log(1 - 0.07)
    assert classify(log_ci, "lower", delta) == "equivalent" and f"±{delta:.3f}" in note
    assert f"{1 - 0.971:.1%}" in note  # the largest saving the CI leaves


def test_mup_note_spans_without_d64_from_the_docs_table():
    rest, note = _split((DOCS / "mup_lr_transfer.md").read_text())
    note = _flat(note)
    rows = re.findall(r"^\| (sp|mup) \| (\d+) \| [\d,]+ \| [^|(]+\((\S+)\)[^|]*\| [^|(]+\((\S+)\)[^|]*\| "
                      r"[^|(]+\((\S+)\)[^|]*\|", rest, re.M)
    assert len(rows) == 8
    for param, want in (("mup", ("0.68", "0.15", "0.49")), ("sp", ("1.60", "1.79", "1.70"))):
        wide = [r for r in rows if r[0] == param and r[1] != "64"]
        assert len(wide) == 3
        for col, w in zip((2, 3, 4), want):  # seed 0, seed 1, seed mean
            values = [float(r[col]) for r in wide]
            assert f"{max(values) - min(values):.2f}" == w and w in note
    d64 = re.search(r"^\| sp \| 64 \| (.+) \|$", rest.split("**Final val/loss per lr")[1], re.M).group(1)
    seed0 = [float(m) for m in re.findall(r"\((\S+) / ", d64)]
    assert seed0.index(min(seed0)) == 6 and f"{seed0[4] - seed0[6]:.3f}" == "0.002"  # top edge, by 0.002 nats


# ------------------------------------------------------------------------------------------------ the QK-norm note


def _qk_model(seed: int):
    from arch import ModelConfig, build_model

    torch.manual_seed(seed)
    cfg = ModelConfig(vocab_size=64, n_ctx=32, d_model=32, n_layers=2, n_heads=2, qk_norm="layernorm")  # learned pos
    return build_model(cfg).eval()


def _max_logits(model, ids) -> dict[int, float]:
    out: dict[int, float] = {}

    def read(scores, hook):
        out[hook.layer] = float(scores.max())

    with model.hooks([(lambda n: n.endswith("attn.hook_attn_scores"), read)]), torch.no_grad():
        model(ids)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_qk_norm_bound_on_the_max_logit(seed):
    # |q·k|/√d ≤ max_i |g_q,i g_k,i| · √d for LayerNorm'd q, k without shift: at unit gains, √d
    model = _qk_model(seed)
    d = model.cfg.d_head
    ids = torch.randint(0, 64, (4, 32))
    assert all(v <= math.sqrt(d) + 1e-5 for v in _max_logits(model, ids).values())
    for blk in model.blocks:  # random gains, q and k different, some negative
        blk.attn.q_norm.weight.data = torch.randn(d) * 3
        blk.attn.k_norm.weight.data = torch.randn(d) * 3
        blk.attn.c_attn.weight.data *= 20  # large pre-norm q, k: the norm removes their scale
    for i, v in _max_logits(model, ids).items():
        attn = model.blocks[i].attn
        bound = float((attn.q_norm.weight * attn.k_norm.weight).detach().abs().max()) * math.sqrt(d)
        assert v <= bound + 1e-4


def test_qk_norm_gains_are_trained_without_decay():
    from experiments.config.schema import OptimConfig
    from experiments.run.optim import build_optimizer

    model = _qk_model(0)
    cfg = OptimConfig(name="adamw", lr=1e-3, betas=[0.9, 0.95], eps=1e-8, weight_decay=0.1, decay_embeddings=False)
    groups = build_optimizer(model, cfg, torch.device("cpu"), say=False).param_groups
    wd = {id(p): g["weight_decay"] for g in groups for p in g["params"]}
    gains = [p for n, p in model.named_parameters() if n.endswith(("q_norm.weight", "k_norm.weight"))]
    assert len(gains) == 2 * model.cfg.n_layers
    assert all(p.requires_grad and wd[id(p)] == 0.0 and bool((p == 1).all()) for p in gains)
    assert any(w == 0.1 for w in wd.values())  # the matrices do decay: the groups are not all zero


def test_qk_norm_note_adam_step_and_schedule_numbers():
    rest, note = _split((DOCS / "qk_norm_lr_sensitivity.md").read_text())
    note = _flat(note)
    # Adam's largest step / lr with betas 0.9/0.95: torch's AdamW on the gradients that attain Cauchy–Schwarz's
    # bound (growing as (β2/β1)^s) tends to (1 − β1)/√(1 − β2) / √(1 − β1²/β2)
    b1, b2 = 0.9, 0.95
    limit = (1 - b1) / math.sqrt(1 - b2) / math.sqrt(1 - b1 * b1 / b2)
    p = torch.zeros(1, dtype=torch.float64, requires_grad=True)
    opt = torch.optim.AdamW([p], lr=1.0, betas=(b1, b2), eps=0.0, weight_decay=0.0)
    steps = []
    for s in range(400):
        before = float(p.detach())
        p.grad = torch.tensor([-(b2 / b1) ** s], dtype=torch.float64)
        opt.step()
        steps.append(float(p.detach()) - before)
    assert max(steps) <= limit + 1e-9 and steps[-1] == pytest.approx(limit, rel=1e-6) and f"{limit:.3f}" in note
    # the final runs' lrs: 977 steps at 1e-3, linear warmup over round(0.05 · 977) = 49, cosine to 0.1x
    w, total = 49, 977
    lrs = [1e-3 * (t + 1) / w for t in range(w)]
    lrs += [1e-3 * (0.1 + 0.45 * (1 + math.cos(math.pi * (t + 1) / (total - w)))) for t in range(total - w)]
    drift = limit * sum(lrs)
    assert f"{sum(lrs):.3f}" in note and f"1 ± {drift:.2f}" in note
    assert f"= {(1 + drift) ** 2 * math.sqrt(32):.1f}" in note and (1 + drift) ** 2 * math.sqrt(32) < 16.38
    assert "5.55–5.59" in rest and "5.31–24.17" in rest and "16.38–18.16" in rest
    assert f"{24.17 / math.sqrt(32):.2f}" in note and f"{5.55 / math.sqrt(32):.3f}–{5.59 / math.sqrt(32):.3f}" in note
    p_max = math.exp(2 * math.sqrt(32)) / (math.exp(2 * math.sqrt(32)) + 127)  # one key of 128 at +√32, the rest −√32
    assert f"{p_max:.3f}" in note
