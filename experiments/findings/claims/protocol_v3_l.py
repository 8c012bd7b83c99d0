"""Protocol v3 at one size, L (docs/findings/PLAN_v3.md, issue 32 §3.2: gqa_vs_mha_v3 and tied_vs_untied_v3): the
setup protocol_v3.py gives the three-size findings, run at size L alone, with several comparisons read together by
experiments/findings/comparisons.py; the constants their modules, YAMLs and tests agree on and the text each SETUP
and RULE holds.

    setup_at_l(arms="...", seeds="...", metric="...")   # a SETUP: protocol_v3's shared bullets, one size
    rule_text(comparisons="...", claim="lower", k=2)    # the RULE's shared sentences
    SHARED_FILES                                         # hashed by both registrations (each EXTRA_FILES)

The Protocol, Data, Batches, Optimizer and Evaluation bullets are protocol_v3.shared_setup's, word for word; the
Arms, Size and Statistics bullets are this module's (one size: no Bonferroni over sizes, no trend; a Bonferroni
family over the comparisons instead). Not handled: a finding's own arms, claim and power plan (its module).
"""

from __future__ import annotations

from experiments.findings.claims import protocol_v3 as v3

SIZE = "l"
D_MODEL, HEADS, NON_EMBEDDING, STEPS = v3.SIZES[SIZE]
TOKENS = STEPS * v3.BATCH * v3.N_CTX  # 3,966,976: 5 tokens per non-embedding parameter, whole steps
SEEDS = tuple(range(v3.SEED_CAP))  # 0-9: both §3.2 plans reach the cap (their SETUPs)
SHARED_FILES = (*(p for p in v3.SHARED_FILES if p != "conf/finding/size/*.yaml"), "conf/finding/size/l.yaml",
                "experiments/findings/claims/protocol_v3_l.py", "experiments/findings/comparisons.py")
KEPT = ("Protocol", "Data", "Batches", "Optimizer", "Evaluation")  # protocol_v3.shared_setup's bullets kept as they are


def shared_bullets() -> dict[str, str]:
    """protocol_v3.shared_setup's bullets by their label ("Protocol": "- Protocol: tuned ...")."""
    text = v3.shared_setup(arms="")
    return {b.split(":", 1)[0]: f"- {b}" for b in text.removeprefix("- ").split("\n- ")}


def setup_at_l(arms: str, seeds: str, metric: str) -> str:
    """A SETUP at size L (markdown): the finding's arms, seeds (its power plan) and metric bullets around the kept
    shared ones."""
    kept = shared_bullets()
    return "\n".join([
        f"- Arms: {arms}; each arm is tuned, confirmed and run on its own.",
        f"- Size: L only (`finding/size=l`, conf/finding/size/l.yaml): 4 layers, d_model {D_MODEL}, pre-LN, "
        f"{NON_EMBEDDING:,} non-embedding parameters in the GELU, 4-head model; {TOKENS:,} training tokens "
        f"({STEPS:,} steps), {v3.TOKENS_PER_PARAM} per non-embedding parameter, for every arm. The sizes S and M "
        "of the three-size findings are not run (PLAN_v3.md, §3.2).",
        *(kept[label] for label in KEPT),
        "- Statistics: each comparison's test-split difference paired by seed, judged by "
        "experiments/findings/outcome.py's table on its interval at the family level (Bonferroni over the "
        "comparisons the rule reads); the second corpus's difference must agree (experiments/findings/"
        "comparisons.py).",
        seeds,
        metric])


def rule_text(comparisons: str, claim: str, k: int) -> str:
    """The RULE's shared sentences for `comparisons` (their words), k of them read for `claim`."""
    from experiments.findings.comparisons import family_level

    level = f"{100 * family_level(claim, k):.4g}%" + (f": Bonferroni over the {k} comparisons" if k > 1 else "")
    if claim == "equal":
        how = ("**reproduced** (equivalent: inside ±0.02, TOST), **not reproduced** (entirely beyond +0.02 or "
               "−0.02: the arms differ), else **inconclusive**; an equivalent comparison whose WikiText-2 mean "
               "difference lies outside ±0.02 reads inconclusive")
    else:
        how = ("**reproduced** (entirely on the claimed side of 0), **opposite** (entirely on the other side), "
               "**equivalent** (inside ±0.02), **not reproduced** (excludes an effect of 0.02 on the claimed side), "
               "else **inconclusive**; a comparison reproduced or opposite whose WikiText-2 difference has the other "
               "sign reads inconclusive")
    return (f"{comparisons} (final test/loss, best vs best, paired by seed), read on its interval at the family "
            f"level ({level}) by experiments/findings/outcome.py's table for its claim with SESOI {v3.SESOI:g} nats: "
            f"{how}. "
            "Overall: the label all comparisons share, else **partly** if any is reproduced, else inconclusive if "
            "any is, else not reproduced (experiments/findings/comparisons.py).")
