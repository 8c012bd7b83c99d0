"""The markdown of a finding: docs/findings/<name>.md (plus its figures in docs/findings/<name>/), and the index
table of docs/findings/README.md.

    text = render_doc(finding, verdict, comparison, records, meta, figures)
    write_index(Path("docs/findings"))   # the README's table, from the docs present

A doc opens with one HTML comment holding its metadata as JSON (name, verdict, key number, smoke), which is all the
index reads back, so the index never re-parses prose. Sections: claim, setup (pre-registered, then as run), figures,
results table (comparison.json: per group mean [95% CI], difference vs baseline [95% CI], verdict) and the rule's own
tables, verdict with the rule's explanation, "What was tried / likely reason" when not reproduced, command.
Not handled: computing anything (the rules, experiments.compare), running the sweep (cli.py).
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path
from typing import Any, Sequence

from experiments.findings.data import DATA_DEFAULT, DATA_FILE, DATA_HUB
from experiments.findings.evidence import RunRecord, Verdict, fmt_ci, fmt_mean_ci, fmt_signed
from experiments.findings.registry import Finding
from experiments.rundir.layout import RunStatus

META_RE = re.compile(r"^<!-- archlab-finding: (\{.*\}) -->$", re.M)
INDEX_START, INDEX_END = "<!-- findings-index:start -->", "<!-- findings-index:end -->"
FIGURE_CAPTIONS = {
    "extrapolation.png": "Validation loss at 1×, 2×, 4×, 8× the training length, per encoding (mean ± std over seeds).",
    "curve_val_loss.png": "Validation loss against training tokens (mean ± std over seeds).",
    "curve_train_loss.png": "Training loss against training tokens (mean ± std over seeds; diverged runs dashed, ×).",
    "final_val_loss.png": "Final validation loss per group, one dot per seed.",
    "grad_norm_per_layer.png": "Gradient norm per layer during training (first 10% of steps and whole run).",
    "aspect_ratio.png": "Final validation loss against d_model / n_layers at ~0.8M non-embedding parameters.",
    "init_grad_norms.png": "Gradient norm of each layer's MLP output projection W^{2} at initialisation, one fixed batch.",
}


def _cell(s: Any) -> str:
    return str(s).replace("|", "\\|").replace("\n", " ")


def md_table(head: Sequence[str], rows: Sequence[Sequence[Any]]) -> list[str]:
    out = ["| " + " | ".join(_cell(h) for h in head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    return out + ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]


def shell_join(args: Sequence[str]) -> str:
    """The command as a user would type it: quote only what needs quoting ('data.paths=[a.txt]')."""
    import shlex

    return " ".join(a if re.fullmatch(r"[\w./=:,@%+-]+", a) else shlex.quote(a) for a in args)


def finding_command(name: str, args: Sequence[str]) -> list[str]:
    return ["python", "-m", "experiments.findings", name, *args]


def _without_data(args: Sequence[str]) -> list[str]:
    """The arguments less the data overrides and --data-file with its value."""
    kept: list[str] = []
    for a in args:
        if kept[-1:] == ["--data-file"]:
            kept.pop()
        elif not re.match(r"^[+~]*data(\.|=|/)", a):
            kept.append(a)
    return kept


def hub_variant(args: Sequence[str]) -> list[str]:
    """The same arguments with the data replaced by data=tinystories."""
    return [*_without_data(args), *DATA_HUB]


def copy_variant(args: Sequence[str]) -> list[str] | None:
    """The same arguments on a local copy of the pre-registered file (`--data-file`); None for other data."""
    if not all(a in args for a in DATA_DEFAULT) and "--data-file" not in args:
        return None
    return ["--data-file", Path(DATA_FILE).name, *_without_data(args)]


def command_section(name: str, args: Sequence[str]) -> list[str]:
    """The doc's "Command" section: the command as run, on a copy of its data file, on the hub's TinyStories."""
    lines = ["## Command", "", "```bash", shell_join(finding_command(name, args)), "```", ""]
    if (copy := copy_variant(args)) is not None:
        lines += ["Without `../shared/data`: the same data from a download, checked by its sha256 (what it is and where "
                  "to get it: [README.md#data](README.md#data)):", "", "```bash",
                  shell_join(finding_command(name, copy)), "```", ""]
    return lines + ["On the hub's TinyStories instead (`data=tinystories`, needs network on first use):", "",
                    "```bash", shell_join(finding_command(name, hub_variant(args))), "```", ""]


def results_table(comparison: dict[str, Any], records: list[RunRecord], name: str = "final val/loss") -> list[str]:
    """Per group: runs (+ excluded), mean [95% CI], difference vs baseline [95% CI], p, compare's verdict."""
    block = next((m for m in comparison.get("metrics", []) if m.get("name") == name), None)
    if not block:
        return [f"(no `{name}` in comparison.json: no run completed)"]
    rows = []
    for g in block["groups"]:
        statuses = [r.status for r in records if r.group == g["label"]]
        extra = {s: statuses.count(s) for s in dict.fromkeys(statuses) if s != RunStatus.COMPLETED}
        runs = str(g["n"]) + (" (" + ", ".join(f"+{n} {s}" for s, n in extra.items()) + ")" if extra else "")
        vs = g.get("vs_baseline")
        if vs is None:
            diff, p, verdict = "baseline", "", ""
        else:
            diff = f"{fmt_signed(vs.get('diff'))} {fmt_ci(vs.get('ci'))}"
            p = "—" if vs.get("p") is None else f"{vs['p']:.3g}"
            verdict = vs.get("verdict", "") + (f" ({vs['test']})" if vs.get("test") else "") + \
                (f"; {vs['note']}" if vs.get("note") else "")
        rows.append([g["label"], runs, fmt_mean_ci(g.get("mean"), g.get("ci")), diff, p, verdict])
    return md_table(["group", "runs", f"{name} (mean [95% CI])", "Δ vs baseline [95% CI]", "p", "verdict"], rows)


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]


def _duration(s: float | None) -> str:
    if s is None:
        return "not measured"
    s = int(round(s))
    h, m, sec = s // 3600, s % 3600 // 60, s % 60
    return f"{h} h {m:02d} min" if h else f"{m} min {sec:02d} s" if m else f"{sec} s"


def _data_text(cfg: dict[str, Any]) -> str:
    src = cfg.get("data.source")
    if src == "embedded":
        return "the embedded corpus (Python's help topics, `tokenizer/corpus.py`), last 10% held out"
    if src == "text":
        paths = cfg.get("data.paths") or []
        return f"local text {', '.join(f'`{p}`' for p in paths)} (`data=text`), last {cfg.get('data.val_fraction', 0.1):g} held out"
    if src == "hf":
        return f"`{cfg.get('data.name')}` (`data=hf`/`tinystories`), {cfg.get('data.max_documents')} documents at most"
    if src == "tokens":
        return f"token files `{cfg.get('data.train_path')}`"
    return str(src)


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
    launcher = (f"`{meta.get('launcher')}`: {jobs} job{'s' if jobs != 1 else ''} at a time, "
                f"{cfg.get('train.num_threads') or 'cpu_count / jobs'} torch thread(s) each")
    lines = [
        f"- Data: {_data_text(cfg)}.",
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
        + (f"; the sum of {meta['attempts']} attempts: stopped, then resumed with `--resume`"
           if int(meta.get("attempts") or 1) > 1 else "") + ").",
    ]
    return lines


def _counts(items) -> dict[str, int]:
    out: dict[str, int] = {}
    for x in items:
        out[x] = out.get(x, 0) + 1
    return out


def render_doc(finding: Finding, verdict: Verdict, comparison: dict[str, Any], records: list[RunRecord],
               meta: dict[str, Any], figures: Sequence[str], fig_dir_name: str) -> str:
    """The doc's markdown. `figures`: file names present in the figure dir (finding.figures order kept);
    `fig_dir_name`: the figure dir relative to the doc (links are relative)."""
    smoke = bool(meta.get("smoke"))
    head = {"name": finding.name, "verdict": verdict.outcome, "key_number": verdict.key_number, "smoke": smoke,
            "generated": meta.get("generated"), "runs": len(records)}
    lines = [f"<!-- archlab-finding: {json.dumps(head, ensure_ascii=False)} -->", f"# {finding.title}", ""]
    if smoke:
        lines += ["> **Smoke run: not a result.** A seconds-long version of the sweep (tiny model, a few steps, 2 seeds) "
                  "that only shows the pipeline works end to end; the verdict below means nothing.", ""]
    lines += [f"**Claim.** {finding.claim}", "", f"**Source.** {finding.citation}.", "",
              f"**The paper's number.** {finding.paper_number}", "",
              f"**Verdict: {verdict.outcome}.** {verdict.key_number}.", "",
              "## Setup (pre-registered)", "",
              "Fixed in code (`experiments/findings/" + finding.name + ".py`, `conf/experiment/" + finding.experiment
              + ".yaml`) before the full run; nothing was changed after seeing results.", "",
              f"- Data: `{shell_join(DATA_DEFAULT)}` (TinyStories v1, the head of the train split, lowercased, 4.2 MB; "
              "the last 10% of the text held out), the findings command's default; `data=tinystories` (the hub's "
              "TinyStories, first 100k stories) as the alternative.", "", finding.setup, "",
              "**As run.**", "", *as_run(meta, records), ""]
    lines += ["## Figures", ""]
    shown = [f for f in finding.figures if f in figures]
    for f in shown:
        lines += [f"![{f}]({fig_dir_name}/{f})", "", f"*{FIGURE_CAPTIONS.get(f, f)}*", ""]
    missing = [f for f in finding.figures if f not in figures]
    if missing:
        lines += [f"Not drawn for these runs: {', '.join(missing)}.", ""]
    baseline = comparison.get("baseline", {}).get("label", "—")
    lines += ["## Results", "",
              f"Final validation loss per group, mean and 95% t-interval over seeds; differences against the baseline "
              f"`{baseline}` (paired by seed when both groups ran the same seeds, else Welch), from the report's "
              "`comparison.json`.", "", *results_table(comparison, records), ""]
    for t in verdict.tables:
        lines += [f"**{t.title}**", "", *md_table(t.header, t.rows), ""]
    lines += [f"## Verdict: {verdict.outcome}", "", verdict.explanation, ""]
    for part, outcome, text in verdict.parts:
        lines += [f"- **{part} part: {outcome}.** {text}"]
    if verdict.parts:
        lines += [""]
    lines += [f"**Rule (pre-registered).** {finding.rule_text}", ""]
    if verdict.outcome != "reproduced":
        lines += ["## What was tried / likely reason", "",
                  "**What was tried.** The pre-registered setup above, run once as written; no setting was tuned after "
                  "seeing the result.", "",
                  f"**Likely reason.** {_sentence(verdict.likely_reason) or 'The rule gave no reason.'}", ""]
    lines += command_section(finding.name, list(meta.get("args", [])))
    if meta.get("sweep_dir"):
        lines += [f"Runs and the full report of this doc: `{meta['sweep_dir']}/report/report.html` (not committed).", ""]
    return "\n".join(lines)


def write_doc(doc_path: Path, text_for, figures: Sequence[Path]) -> Path:
    """Copy the figures the doc references (those that exist) into <doc without .md>/, then write the doc whose text
    is text_for(present figure names, figure dir name). Returns doc_path."""
    doc_path = Path(doc_path)
    fig_dir = doc_path.with_suffix("")
    fig_dir.mkdir(parents=True, exist_ok=True)
    present = []
    for src in map(Path, figures):
        if src.is_file():
            shutil.copyfile(src, fig_dir / src.name)
            present.append(src.name)
    doc_path.write_text(text_for(present, fig_dir.name))
    return doc_path


# -- the index ---------------------------------------------------------------------------------------------------


def read_meta(doc_path: Path) -> dict[str, Any] | None:
    """The metadata comment of a finding doc, or None (no file, no comment, bad JSON)."""
    try:
        m = META_RE.search(Path(doc_path).read_text())
        return json.loads(m.group(1)) if m else None
    except (OSError, ValueError):
        return None


def index_table(findings: Sequence[Finding], docs_dir: Path) -> list[str]:
    rows = []
    for f in findings:
        meta = read_meta(docs_dir / f"{f.name}.md")
        if meta and not meta.get("smoke"):
            rows.append([f.title, f.paper, f"**{meta.get('verdict')}**", meta.get("key_number", "—"),
                         f"[{f.name}.md]({f.name}.md)"])
        else:
            rows.append([f.title, f.paper, "not run yet", "—", f"`{f.name}`"])
    return md_table(["claim", "paper", "verdict", "key number (95% CI)", "doc"], rows)


def write_index(findings: Sequence[Finding], docs_dir: Path) -> Path:
    """Rewrite the table between the index markers of docs_dir/README.md (create the file, or append the markers,
    when missing); nothing else in the README changes. Returns its path."""
    docs_dir = Path(docs_dir)
    docs_dir.mkdir(parents=True, exist_ok=True)
    path = docs_dir / "README.md"
    block = "\n".join([INDEX_START, *index_table(findings, docs_dir), INDEX_END])
    text = path.read_text() if path.is_file() else "# Findings\n\n"
    if INDEX_START in text and INDEX_END in text:
        before, rest = text.split(INDEX_START, 1)
        after = rest.split(INDEX_END, 1)[1]
        text = before + block + after
    else:
        text = text.rstrip("\n") + "\n\n" + block + "\n"
    path.write_text(text)
    return path

