"""The markdown of a finding: docs/findings/<name>.md (plus its figures in docs/findings/<name>/).

    text = render_doc(finding, verdict, comparison, records, meta, figures, fig_dir_name)

A doc opens with one HTML comment holding its metadata as JSON (name, verdict, key number, smoke, setup status),
which is all the index (index.py) reads back, so the index never re-parses prose. Sections: claim; setup (the
registration check computed at run time: "unchanged since registration on <date>" with the sha256s, or the diff;
then the registered text and what was run, the data named with its sha256); figures; results table (comparison.json:
per group mean [95% CI], difference vs baseline [95% CI], p, Holm-adjusted p when there are several comparisons)
and the rule's own tables; multiple comparisons (the family the rule read: k, raw and Holm-adjusted p); verdict with
the rule's explanation and, for a finding with a SESOI, the seeds needed against it; "What was tried / likely
reason" when not reproduced; the finding's post-hoc text under its own heading; command.
A smoke doc says "pipeline OK" or "pipeline failed" (naming what failed) and shows no verdict, no rule reading, no
multiple-comparison reading and no seeds-needed line: a few steps of a tiny model are not evidence.
Not handled: computing anything (the rules, experiments.compare, the registration check), running the sweep (cli.py).
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path
from typing import Any, Sequence

from experiments.findings.attempts import killed_text
from experiments.findings.data import DATA_DEFAULT, DATA_FILE, DATA_FILES, DATA_HUB, HUB_OPTION, WHAT, used_text
from experiments.findings.doc_budget import cost_lines, seen_lines, tuning_lines
from experiments.findings.doc_meta import meta_line
from experiments.findings.doc_provenance import provenance_lines
from experiments.findings.evidence import RunRecord, SeedsNeeded, Verdict, fmt_ci, fmt_mean_ci, fmt_signed
from experiments.findings.figdata import plot_json
from experiments.findings.multiple import ALPHA, Family, holm
from experiments.findings.md import md_table
from experiments.findings.registration import REGISTERED, SetupCheck
from experiments.findings.registry import Finding
from experiments.rundir.layout import RunStatus

NEWER_START, NEWER_END = "<!-- newer-version:start -->", "<!-- newer-version:end -->"
FIGURE_CAPTIONS = {
    "extrapolation.png": "Validation loss at 1×, 2×, 4×, 8× the training length, per encoding (mean ± std over seeds).",
    "curve_val_loss.png": "Validation loss against training tokens (mean ± std over seeds).",
    "curve_train_loss.png": "Training loss against training tokens (mean ± std over seeds; diverged runs dashed, ×).",
    "final_val_loss.png": "Final validation loss per group, one dot per seed.",
    "final_test_loss.png": "Final loss on the held-out test split per group, one dot per seed.",
    "grad_norm_per_layer.png": "Gradient norm per layer during training (first 10% of steps and whole run).",
    "aspect_ratio.png": "Final validation loss against d_model / n_layers at ~0.8M non-embedding parameters.",
    "init_grad_norms.png": "Gradient norm of each layer's MLP output projection W^{2} at initialisation, one fixed batch.",
    "basin.png": ("Learning-rate basin of the tuning runs: final val/loss against lr per arm (line: mean over the "
                  "tuning seeds; × diverged; the best lr ringed; a red star: the best at a grid edge)."),
    "encdec_grad_norms.png": ("Gradient norm of each decoder layer's MLP output projection W^{2} of the "
                              "transformer-base encoder-decoder at Xavier init, one fixed batch, post-LN and pre-LN."),
}


def shell_join(args: Sequence[str]) -> str:
    """The command as a user would type it: quote only what needs quoting ('data.paths=[a.txt]')."""
    import shlex

    return " ".join(a if re.fullmatch(r"[\w./=:,@%+-]+", a) else shlex.quote(a) for a in args)


def finding_command(name: str, args: Sequence[str]) -> list[str]:
    return ["python", "-m", "experiments.findings", name, *args]


def _without_data(args: Sequence[str]) -> list[str]:
    """The arguments less the data overrides (finding/data=... too) and --data-file with its value."""
    kept: list[str] = []
    for a in args:
        if kept[-1:] == ["--data-file"]:
            kept.pop()
        elif not re.match(r"^[+~]*(data(\.|=|/)|finding/data=)", a):
            kept.append(a)
    return kept


def hub_variant(args: Sequence[str], data: str = "tinystories") -> list[str]:
    """The same arguments with the data replaced by the hub's TinyStories (data=tinystories, or for a finding whose
    YAML selects its data, finding/data=tinystories)."""
    return [*_without_data(args), *(HUB_OPTION if data in DATA_FILES else DATA_HUB)]


def copy_variant(args: Sequence[str], data: str = "tinystories") -> list[str] | None:
    """The same arguments on a local copy of the pre-registered file (`--data-file`); None for other data."""
    if data in DATA_FILES:
        if "--smoke" in args and "--data-file" not in args:  # a smoke run's own data is the embedded corpus
            return None
        if any(re.match(r"^[+~]*(data\.|finding/data=)", a) for a in args) and "--data-file" not in args:
            return None
        return ["--data-file", Path(DATA_FILES[data].path).name, *_without_data(args)]
    if not all(a in args for a in DATA_DEFAULT) and "--data-file" not in args:
        return None
    return ["--data-file", Path(DATA_FILE).name, *_without_data(args)]


def command_section(name: str, args: Sequence[str], data: str = "tinystories") -> list[str]:
    """The doc's "Command" section: the command as run, on a copy of its data file, on the hub's TinyStories."""
    lines = ["## Command", "", "```bash", shell_join(finding_command(name, args)), "```", ""]
    if (copy := copy_variant(args, data)) is not None:
        source = "a copy" if data in DATA_FILES else "a download"  # ELTEC has no public copy of its bytes
        lines += [f"Without `../shared/data`: the same data from {source}, checked by its sha256 (what it is and where "
                  "to get it: [README.md#data](README.md#data)):", "", "```bash",
                  shell_join(finding_command(name, copy)), "```", ""]
    hub = hub_variant(args, data)
    return lines + [f"On the hub's TinyStories instead (`{hub[-1]}`, needs network on first use):", "",
                    "```bash", shell_join(finding_command(name, hub)), "```", ""]


def full_run_data_line(finding: Finding) -> str:
    """The setup's "Data of the full run" bullet: the finding's pre-registered data and its alternative."""
    if finding.data in DATA_FILES:
        d = DATA_FILES[finding.data]
        return (f"- Data of the full run: `finding/data={d.key}`, selected by the sweep YAML "
                f"(`conf/finding/data/{d.key}.yaml`): `{d.path}`, {d.what}, sha256 `{d.sha256}`; "
                f"`{HUB_OPTION[0]}` (the hub's TinyStories) as the alternative.")
    return (f"- Data of the full run: `{shell_join(DATA_DEFAULT)}` ({WHAT[0].upper() + WHAT[1:]}; the last 10% of "
            "the text held out), the findings command's default; `data=tinystories` (the hub's TinyStories, first "
            "100k stories) as the alternative.")


METRIC_WORDS = {"val/loss": "validation loss", "test/loss": "loss on the held-out test split"}


def results_table(comparison: dict[str, Any], records: list[RunRecord], name: str = "final val/loss",
                  verdicts: bool = True) -> list[str]:
    """Per group: runs (+ excluded), mean [95% CI], difference vs baseline [95% CI], p and, with k > 1 comparisons
    against the baseline, the Holm-adjusted p; then compare's verdict read at the adjusted p (verdicts=False: no
    verdict column, as in a smoke doc)."""
    block = next((m for m in comparison.get("metrics", []) if m.get("name") == name), None)
    if not block:
        return [f"(no `{name}` in comparison.json: no run completed)"]
    compared = [g for g in block["groups"] if g.get("vs_baseline") is not None]
    k = len(compared)
    adjusted = dict(zip((g["label"] for g in compared), holm([g["vs_baseline"].get("p") for g in compared])))
    rows = []
    for g in block["groups"]:
        statuses = [r.status for r in records if r.group == g["label"]]
        extra = {s: statuses.count(s) for s in dict.fromkeys(statuses) if s != RunStatus.COMPLETED}
        runs = str(g["n"]) + (" (" + ", ".join(f"+{n} {s}" for s, n in extra.items()) + ")" if extra else "")
        vs = g.get("vs_baseline")
        if vs is None:
            diff, p, p_holm, verdict = "baseline", "", "", ""
        else:
            diff = f"{fmt_signed(vs.get('diff'))} {fmt_ci(vs.get('ci'))}"
            p = "—" if vs.get("p") is None else f"{vs['p']:.3g}"
            p_holm = "—" if vs.get("p") is None else f"{adjusted[g['label']]:.3g}"
            said = vs.get("verdict", "")
            if k > 1 and said in ("better", "worse") and adjusted[g["label"]] > ALPHA:
                said = "not distinguishable after Holm"
            verdict = said + (f" ({vs['test']})" if vs.get("test") else "") + (f"; {vs['note']}" if vs.get("note") else "")
        rows.append([g["label"], runs, fmt_mean_ci(g.get("mean"), g.get("ci")), diff, p,
                     *([p_holm] if k > 1 else []), *([verdict] if verdicts else [])])
    head = ["group", "runs", f"{name} (mean [95% CI])", "Δ vs baseline [95% CI]", "p",
            *([f"p Holm (k={k})"] if k > 1 else []), *(["verdict"] if verdicts else [])]
    note = [f"p Holm (k={k}): p adjusted by Holm's procedure across the {k} comparisons against the baseline"
            + ("; the verdict column reads the adjusted p (the intervals are not adjusted)." if verdicts else ".")]
    return md_table(head, rows) + (["", *note] if k > 1 else [])


def family_lines(family: Family | None) -> list[str]:
    """The "Multiple comparisons" section's body: the tests the rule read, k, raw and Holm-adjusted p."""
    if family is None:  # no p-values: e.g. the v3 rules, which read each part on a Bonferroni-level interval
        return ["The rule reads no p-value against a baseline, so Holm's correction does not apply; a correction the "
                "rule makes itself (e.g. intervals at a Bonferroni level across sizes or comparisons) is in its "
                "registered text (Setup).", ""]
    if family.k == 1:
        p = "—" if family.p[0] is None else f"{family.p[0]:.3g}"
        return [f"The rule reads one comparison ({family.what}): k = 1, so Holm's correction leaves its p as it is "
                f"(p = {p}{', ' + family.readings[0] if family.readings else ''}).", ""]
    rows = [[label, "—" if p is None else f"{p:.3g}", "—" if p is None else f"{adj:.3g}",
             family.readings[i] if i < len(family.readings) else ""]
            for i, (label, p, adj) in enumerate(zip(family.labels, family.p, family.adjusted))]
    return [f"Holm's correction across the k = {family.k} comparisons the rule reads ({family.what}), family-wise "
            f"α = {ALPHA:g}: a comparison counts only when its Holm-adjusted p is ≤ {ALPHA:g}, and the verdict reads "
            "the adjusted values (a comparison without a p-value counts as p = 1).", "",
            *md_table(["comparison", "raw p", "Holm-adjusted p", "reading (after the correction)"], rows), ""]


def seeds_lines(finding: Finding, need: SeedsNeeded | None) -> list[str]:
    """The seeds-needed paragraph: only against the finding's pre-registered SESOI, never the observed effect."""
    if finding.sesoi is None or need is None:
        return []
    test = ("paired t-test on the per-seed differences" if need.test == "paired" else
            "two-sample t-test (equal seeds per group)")
    spread = "sd of the per-seed differences" if need.test == "paired" else "pooled sd"
    how_many = (f"about {need.n} seeds per group give" if need.n is not None else
                "more than 10,000 seeds per group would be needed for")
    return [f"**Seeds needed (against the pre-registered smallest effect of interest).** SESOI = {finding.sesoi:g} "
            f"nats: {finding.sesoi_why} At the spread observed here ({spread} {need.sd:.4f} nats, n = {need.n_now}), "
            f"{how_many} the {test}, two-sided at 95%, 80% power against a true difference of {finding.sesoi:g} "
            "nats (exact power from the noncentral t; the spread is an estimate from this sweep).", ""]


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _duration(s: float | None) -> str:
    if s is None:
        return "not measured"
    s = int(round(s))
    h, m, sec = s // 3600, s % 3600 // 60, s % 60
    return f"{h} h {m:02d} min" if h else f"{m} min {sec:02d} s" if m else f"{sec} s"


def as_run(meta: dict[str, Any], records: list[RunRecord]) -> list[str]:
    """'As run' bullets: data, tokenizer, shape and params per group, tokens and budget, seeds, launcher, wall time."""
    cfg = meta.get("config") or {}
    by_group: dict[str, RunRecord] = {}
    for r in records:
        if r.get("params") is not None:
            by_group.setdefault(r.group, r)
    shapes = "; ".join(f"{g}: {int(r.get('params')):,} params ({int(r.get('non_embedding_params') or 0):,} "
                       f"non-embedding)" for g, r in by_group.items())
    seeds = sorted({r.seed for r in records if r.seed is not None})
    jobs = meta.get("jobs", 1)
    at_a_time = ("the runs that differ only in seed, lr, ... trained as one stacked model, one pack at a time"
                 if meta.get("launcher") == "packed" else f"{jobs} job{'s' if jobs != 1 else ''} at a time")
    launcher = (f"`{meta.get('launcher')}`: {at_a_time}, "
                f"{cfg.get('train.num_threads') or 'cpu_count / jobs'} torch thread(s) each")
    data = used_text(meta["data"]) if meta.get("data") else "not recorded"
    lines = [
        f"- Data actually used: {data}.",
        f"- Tokenizer: byte-level BPE, vocab {cfg.get('tokenizer.vocab_size')}.",
        f"- Model: d_model {cfg.get('model.d_model')}, {cfg.get('model.n_layers')} layers, {cfg.get('model.n_heads')} "
        f"heads, n_ctx {cfg.get('train.n_ctx')}, batch {cfg.get('train.batch_size')} (first run; the sweep varies "
        f"{', '.join(f'`{k}`' for k in meta.get('by', []))}). Parameters: {shapes or 'no run reported them'}.",
        f"- Tokens per run: {cfg.get('train.tokens')}. {meta.get('budget_text') or ''}".rstrip(),
        f"- Seeds: {', '.join(map(str, seeds)) or '—'} ({len(records)} runs: "
        + ", ".join(f"{n} {s}" for s, n in _counts(r.status for r in records).items()) + ").",
        f"- Launcher: {launcher}.",
        f"- Wall time of the whole sweep on this machine: {_duration(meta.get('wall_s'))} "
        f"({meta.get('cpus', '?')} CPUs{', ' + meta['device'] if meta.get('device') else ''}; measured by the findings "
        "command around the training command"
        + (f"; the sum of {meta['attempts']} attempts: stopped, then resumed with `--resume`{killed_text(meta)}"
           if int(meta.get("attempts") or 1) > 1 else killed_text(meta)) + ").",
    ]
    return lines


def _counts(items) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out


def setup_lines(meta: dict[str, Any]) -> list[str]:
    """The setup check as computed at run time (meta["setup"], finding.json), and when the doc was written
    (meta["setup_doc"]) if the files changed in between."""
    if not meta.get("setup"):
        return ["**Setup hashes not recorded.** This sweep ran before registration existed (its finding.json holds "
                "no setup check), so this doc cannot say whether the setup changed.", ""]
    c = SetupCheck.from_meta(meta["setup"])
    record = f"`{REGISTERED.as_posix()}/{c.name}.json`"
    if c.status == "unchanged":
        files = "; ".join(f"`{f.path}` sha256 `{f.sha256}`" for f in c.files)
        lines = [f"**Setup unchanged since registration on {c.registered}**: at run time the files hashed to the "
                 f"registered values ({files}; the registration: {record})."]
    elif c.status == "changed":
        lines = [f"**Setup changed since registration on {c.registered}**: at run time "
                 f"{', '.join(f'`{p}`' for p in c.changed_paths())} differed from the registered text ({record}). A "
                 "smoke run reports this; a full run refuses it (a changed setup is a new version). The diff, "
                 "registered → as run:", "", "```diff", c.diff().rstrip("\n"), "```"]
    else:
        lines = [f"**Not registered**: at run time there was no {record}, so nothing fixed this setup before the run "
                 "(a full run refuses this)."]
    if c.note:
        lines += ["", f"Registration note: {c.note}"]
    now = SetupCheck.from_meta(meta["setup_doc"]) if meta.get("setup_doc") else None
    if now is not None and [f.sha256 for f in now.files] != [f.sha256 for f in c.files]:
        lines += ["", "**Changed since the run**: when this doc was written the files differed from their state at "
                  "run time, so the rule that judged the runs is the module as it is now"
                  + (": diff, registered → now:" if now.diff() else "."), ""]
        lines += ["```diff", now.diff().rstrip("\n"), "```"] if now.diff() else []
    return lines + [""]


def pipeline_lines(meta: dict[str, Any], records: list[RunRecord]) -> list[str]:
    """A smoke doc's "Pipeline: OK / failed" line, naming what failed."""
    problems = (meta.get("pipeline") or {}).get("problems", [])
    if problems:
        return [f"**Pipeline failed.** {'; '.join(problems)}.", ""]
    return [f"**Pipeline OK.** All {len(records)} runs produced a result, and the report, the rule and this doc "
            "were built from them.", ""]


def tried_lines(meta: dict[str, Any], records: list[RunRecord], finding: Finding) -> list[str]:
    """"What was tried", from what this command knows: this sweep dir's runs and attempts, and the setup check."""
    status = (meta.get("setup") or {}).get("status", "not recorded")
    setup = {"unchanged": "unchanged since its registration", "changed": "changed since its registration",
             "unregistered": "not registered", "not recorded": "not checked (no registration at the time)"}[status]
    attempts = int(meta.get("attempts") or 1)
    counts = ", ".join(f"{n} {s}" for s, n in _counts(r.status for r in records).items())
    return [f"**What was tried.** This sweep: {len(records)} runs ({counts}) in `{meta.get('sweep_dir', '?')}`, "
            f"{attempts} attempt{'s' if attempts != 1 else ''}{' (stopped, then resumed)' if attempts > 1 else ''}; "
            f"the setup {setup}. This command knows only this sweep dir: runs made outside it (earlier attempts, "
            "earlier versions) are disclosed only where the finding says so"
            + (" (\"Written after seeing the results\" below)" if finding.post_hoc else "") + ".", ""]


def newer_block(newer: Sequence[str]) -> list[str]:
    """The pointer an earlier version's doc carries to the newer versions of its finding (between markers)."""
    if not newer:
        return []
    links = ", ".join(f"[{n}]({n}.md)" for n in newer)
    return [NEWER_START, f"> **Superseded.** A newer version of this finding, with its own registered setup: {links}. "
            "This doc is kept as the record of its own run.", NEWER_END, ""]


def render_doc(finding: Finding, verdict: Verdict | None, comparison: dict[str, Any], records: list[RunRecord],
               meta: dict[str, Any], figures: Sequence[str], fig_dir_name: str, newer: Sequence[str] = ()) -> str:
    """The doc's markdown. `verdict`: the rule's (None only in a smoke doc whose rule failed); `figures`: file names
    present in the figure dir (finding.figures order kept); `fig_dir_name`: the figure dir relative to the doc;
    `newer`: the names of newer versions of this finding."""
    smoke = bool(meta.get("smoke"))
    setup = meta.get("setup") or {}
    head = {"name": finding.name, "verdict": None if smoke else verdict.outcome,
            "key_number": None if smoke else verdict.key_number, "smoke": smoke,
            **({"pipeline": "failed" if (meta.get("pipeline") or {}).get("problems") else "OK"} if smoke else {}),
            "setup": setup.get("status", "not recorded"), "registered": setup.get("registered"),
            "generated": meta.get("generated"), "runs": len(records)}
    lines = [meta_line(head), f"# {finding.title}", "",
             *newer_block(newer)]
    if smoke:
        lines += ["> **Smoke run: not a result.** A seconds-long version of the sweep (tiny model, a few steps, 2 seeds) "
                  "that only checks that the pipeline runs end to end; no verdict is drawn from it.", "",
                  *pipeline_lines(meta, records)]
    lines += [f"**Claim.** {finding.claim}", "", f"**Source.** {finding.citation}.", "",
              f"**The paper's number.** {finding.paper_number}", ""]
    if not smoke:
        lines += [f"**Verdict: {verdict.outcome}.** {verdict.key_number}.", ""]
    lines += ["## Setup (registered)", "", *setup_lines(meta), full_run_data_line(finding), "", finding.setup,
              "", "**As run.**", "", *as_run(meta, records), *seen_lines(meta), *cost_lines(meta),
              *provenance_lines(meta), "",
              *tuning_lines(meta)]
    lines += ["## Figures", ""]
    for f in (f for f in finding.figures if f in figures):
        lines += [f"![{f}]({fig_dir_name}/{f})", "", f"*{FIGURE_CAPTIONS.get(f, f)}*", ""]
    missing = [f for f in finding.figures if f not in figures]
    if missing:
        lines += [f"Not drawn for these runs: {', '.join(missing)}.", ""]
    baseline = comparison.get("baseline", {}).get("label", "—")
    protocol = (f" Protocol (the report's label): **{comparison['protocol']}**"
                + (": best-vs-best, from the final runs on fresh seeds only." if meta.get("tuning") else ".")
                if comparison.get("protocol") else "")
    lines += ["## Results", "",
              f"Final {METRIC_WORDS.get(finding.metric, finding.metric)} per group, mean and 95% t-interval over "
              f"seeds; differences against the baseline "
              f"`{baseline}` (paired by seed when both groups ran the same seeds, else Welch), from the report's "
              "`comparison.json`" + (" (numbers only: a smoke run is not read)." if smoke else ".") + protocol,
              "", *results_table(comparison, records, name=f"final {finding.metric}", verdicts=not smoke), ""]
    if not smoke:
        for t in verdict.tables:
            lines += [f"**{t.title}**", "", *md_table(t.header, t.rows), ""]
        lines += ["## Multiple comparisons", "", *family_lines(verdict.family)]
        lines += [f"## Verdict: {verdict.outcome}", "", verdict.explanation, ""]
        lines += [f"- **{part} part: {outcome}.** {text}" for part, outcome, text in verdict.parts]
        lines += [""] if verdict.parts else []
        lines += [*seeds_lines(finding, verdict.seeds_needed), f"**Rule (registered).** {finding.rule_text}", ""]
        if verdict.outcome != "reproduced":
            lines += ["## What was tried / likely reason", "", *tried_lines(meta, records, finding),
                      f"**Likely reason.** {_sentence(verdict.likely_reason) or 'The rule gave no reason.'}", ""]
    if finding.post_hoc:
        lines += ["## Written after seeing the results (post hoc)", "",
                  "Not part of the registered setup or rule: text added to the finding after results were seen, shown "
                  "here so that this doc discloses it.", "", finding.post_hoc, ""]
    lines += command_section(finding.name, list(meta.get("args", [])), finding.data)
    if meta.get("sweep_dir"):
        lines += [f"Runs and the full report of this doc: `{meta['sweep_dir']}/report/report.html` (not committed).", ""]
    return "\n".join(lines)


def write_doc(doc_path: Path, text_for, figures: Sequence[Path]) -> Path:
    """Copy the figures the doc references (those that exist, each with its plotted data, figdata.py, when it has
    one) into <doc without .md>/, then write the doc whose text is text_for(present figure names, figure dir name).
    Returns doc_path."""
    doc_path = Path(doc_path)
    fig_dir = doc_path.with_suffix("")
    fig_dir.mkdir(parents=True, exist_ok=True)
    present = []
    for src in map(Path, figures):
        if src.is_file():
            shutil.copyfile(src, fig_dir / src.name)
            if plot_json(src).is_file():
                shutil.copyfile(plot_json(src), plot_json(fig_dir / src.name))
            present.append(src.name)
    doc_path.write_text(text_for(present, fig_dir.name))
    return doc_path
