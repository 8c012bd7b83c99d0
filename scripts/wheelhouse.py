"""Write the wheels archlab needs beyond an installed torch into one folder, for an install with no network.

    python scripts/wheelhouse.py [--out wheelhouse] [--set full|core] [--python-version 3.12]
                                 [--platform manylinux_2_28_x86_64 ...] [--have numpy,scipy,...]
    make wheelhouse WHEELHOUSE=dir WHEELHOUSE_SET=core WHEELHOUSE_PYTHON=3.12 WHEELHOUSE_HAVE=numpy,scipy

On the machine with no network, torch already installed (docs/gpu.md):

    pip install --no-index --find-links wheelhouse -r wheelhouse/requirements.txt
    pip install --no-index --no-deps --find-links wheelhouse archlab

What it writes into the folder: archlab's own wheel (built from this checkout), a wheel for every package archlab
needs (its dependencies and theirs, with the `joblib` extra: parallel sweeps), `requirements.txt` (archlab's
requirements in this set, `torch>=2.4` among them, so the install checks the installed torch and fails in one
pip line if it is older), `INSTALL.txt` (the two commands) and `manifest.json` (set, target, files, sizes).

Sets: `full` is every requirement of archlab. `core` leaves out wandb and datasets, which archlab imports only
where they are used (logger=wandb*, `data=hf`/`bpe train --dataset`, `compare --wandb`): training with
`logger=disabled` (a missing wandb is one warning with the default logger too), sweeps, the report and the GPU
self-check run without them. `--have` leaves out packages the target already has (and what only they need), e.g.
a GPU box's numpy, scipy and matplotlib: that keeps a core set to a few MiB.

torch is never in the folder: it is never asked for, and a download that brings it (or triton / nvidia-*,
torch's own) is refused. With `--no-index` pip cannot replace the installed torch from this folder, whatever
it holds; `torch>=2.4` is checked against the installed one.

A target Python or platform other than this machine's (`--python-version`, `--platform`, as `pip download`
takes them; binary wheels only) is handled: a requirement that has no wheel at all (antlr4-python3-runtime
4.9.3, omegaconf's, is an sdist) is built here and kept only if the build is pure Python (`py3-none-any`).
Needs pip and the package index here; bad arguments are one line `wheelhouse: error: ...`, exit 2.
Not handled: sdist-only packages with compiled code for another platform (refused, naming the package), and
several target platforms of different OS or architecture in one folder.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

try:
    from packaging.markers import default_environment
    from packaging.requirements import Requirement
    from packaging.utils import canonicalize_name, parse_wheel_filename
except ImportError:  # a bare Python: pip carries its own copy
    from pip._vendor.packaging.markers import default_environment
    from pip._vendor.packaging.requirements import Requirement
    from pip._vendor.packaging.utils import canonicalize_name, parse_wheel_filename

REPO = Path(__file__).resolve().parents[1]
SETS = ("full", "core")
LAZY = {"wandb", "datasets"}  # imported only where used; left out of the core set
EXTRAS = ("joblib",)  # archlab's extras in every set: hydra-joblib-launcher (parallel sweeps)
TORCH = {"torch", "triton"}  # never in a wheelhouse: the target's own torch is used (and nvidia-*, below)
MAX_BUILDS = 10  # sdist-only requirements built here before giving up


class WheelhouseError(Exception):
    """Bad input or a failed step: one line for the user."""


def is_torch(name: str) -> bool:
    name = canonicalize_name(name)
    return name in TORCH or name.startswith("nvidia-")


# ---- the target: pip's flags and the environment its markers are evaluated in ----------------------------------

_PLATFORM = re.compile(r"^(?:(?:many|musl)linux_\d+_\d+|manylinux(?:1|2010|2014)|linux)_(?P<linux>.+)$"
                       r"|^macosx_\d+_\d+_(?P<mac>.+)$|^win_(?P<win>.+)$|^win32$")


def marker_env(python_version: str | None, platforms: list[str]) -> dict[str, str]:
    """The marker environment of the target: this machine's, with the Python version and the platform replaced."""
    env = dict(default_environment())
    if python_version:
        env["python_version"] = python_version
        env["python_full_version"] = python_version + ".0"
        env["implementation_name"], env["platform_python_implementation"] = "cpython", "CPython"
    kinds = set()
    for tag in platforms:
        m = _PLATFORM.match(tag)
        if not m:
            raise WheelhouseError(f"--platform {tag}: not a platform tag (e.g. manylinux_2_28_x86_64, "
                                  "macosx_11_0_arm64, win_amd64)")
        if m["linux"]:
            kinds.add(("linux", "Linux", m["linux"], "posix"))
        elif m["mac"]:
            kinds.add(("darwin", "Darwin", m["mac"], "posix"))
        else:
            kinds.add(("win32", "Windows", {"amd64": "AMD64", None: "x86"}.get(m["win"], m["win"]), "nt"))
    if len(kinds) > 1:
        raise WheelhouseError(f"--platform {' '.join(platforms)}: one OS and architecture per wheelhouse")
    if kinds:
        (env["sys_platform"], env["platform_system"], env["platform_machine"], env["os_name"]), = kinds
    return env


@dataclass
class Target:
    python_version: str | None = None  # "3.12"; None: this interpreter
    platforms: list[str] = field(default_factory=list)  # pip's --platform tags; empty: this machine's

    def pip_flags(self) -> list[str]:
        flags = ["--only-binary=:all:"]
        if self.python_version:
            flags += ["--python-version", self.python_version, "--implementation", "cp"]
        for tag in self.platforms:
            flags += ["--platform", tag]
        return flags

    def describe(self) -> str:
        py = self.python_version or f"{sys.version_info.major}.{sys.version_info.minor} (this Python)"
        return f"Python {py}, platform {' '.join(self.platforms) or 'this machine'}"


# ---- which requirements, which wheels --------------------------------------------------------------------------

def requires_dist(metadata: str) -> list[Requirement]:
    """The Requires-Dist lines of a wheel's METADATA."""
    return [Requirement(line.split(":", 1)[1].strip()) for line in metadata.splitlines()
            if line.startswith("Requires-Dist:")]


def roots(metadata: str, which: str, env: dict[str, str]) -> list[Requirement]:
    """archlab's own requirements in set `which` for the target: its dependencies (torch kept: requirements.txt
    checks it against the installed one) and those of its EXTRAS, without LAZY in the core set."""
    out = []
    for req in requires_dist(metadata):
        if which == "core" and canonicalize_name(req.name) in LAZY:
            continue
        if req.marker is None or any(req.marker.evaluate({**env, "extra": e}) for e in ("", *EXTRAS)):
            out.append(Requirement(str(req).split(";")[0]) if req.marker else req)
    return out


def wheel_metadata(path: Path) -> str:
    """The METADATA text of a wheel file."""
    with zipfile.ZipFile(path) as z:
        (name,) = [n for n in z.namelist() if re.fullmatch(r"[^/]+\.dist-info/METADATA", n)]
        return z.read(name).decode("utf-8")


def closure(reqs: list[Requirement], wheels: dict[str, Path], have: set[str],
            env: dict[str, str]) -> dict[str, Path]:
    """The wheels (name -> file, from `wheels`) that installing `reqs` needs on the target: their dependencies
    and theirs, each under the markers of `env` and the extras asked for; torch and the `have` packages are
    left out, and so is what only they need. A needed package with no wheel in `wheels` is an error."""
    keep: dict[str, Path] = {}
    extras_done: dict[str, set[str]] = {}
    todo = [(req, "") for req in reqs]
    while todo:
        req, extra = todo.pop()
        name = canonicalize_name(req.name)
        if is_torch(name) or name in have:
            continue
        if req.marker is not None and not req.marker.evaluate({**env, "extra": extra}):
            continue
        if name not in wheels:
            raise WheelhouseError(f"{req} is needed on the target but pip downloaded no wheel of it")
        new_extras = {""} | set(req.extras)
        if name in keep and new_extras <= extras_done[name]:
            continue
        keep[name] = wheels[name]
        extras_done.setdefault(name, set()).update(new_extras)
        for sub in requires_dist(wheel_metadata(wheels[name])):
            todo += [(sub, e) for e in new_extras]
    return keep


def by_name(folder: Path) -> dict[str, Path]:
    """The wheels in a folder by canonical project name."""
    out = {}
    for path in sorted(folder.glob("*.whl")):
        name = canonicalize_name(parse_wheel_filename(path.name)[0])
        if name in out:
            raise WheelhouseError(f"two wheels of {name} in {folder}: {out[name].name}, {path.name}")
        out[name] = path
    return out


# ---- the steps that run pip ------------------------------------------------------------------------------------

def pip(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pip", *args], cwd=cwd, capture_output=True, text=True)


def last_error(proc: subprocess.CompletedProcess) -> str:
    lines = [line.strip() for line in (proc.stderr + proc.stdout).splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    return (errors or lines or ["(no output)"])[-1]


def build_archlab(tmp: Path) -> Path:
    """archlab's wheel, built from a copy of the checkout's files (git's tracked and untracked-not-ignored ones),
    so that a stale build/ in the checkout never reaches it."""
    src = tmp / "src"
    listed = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], cwd=REPO, capture_output=True)
    files = [f for f in listed.stdout.decode().split("\0") if f] if listed.returncode == 0 else []
    if not files:
        raise WheelhouseError(f"{REPO} is not a git checkout: cannot tell its files from build leftovers")
    for rel in files:
        if (REPO / rel).is_file():
            (src / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / rel, src / rel)
    proc = pip("wheel", "--no-deps", "-q", "-w", str(tmp / "own"), ".", cwd=src)
    if proc.returncode != 0:
        raise WheelhouseError(f"building archlab's wheel failed: {last_error(proc)}")
    (wheel,) = (tmp / "own").glob("archlab-*.whl")
    return wheel


_NO_MATCH = re.compile(r"No matching distribution found for (\S+)")


def download(reqs: list[Requirement], target: Target, dest: Path, built: Path) -> None:
    """`pip download` of reqs and their dependencies for the target (binary wheels only). A requirement with no
    such wheel is built here from its sdist, kept if it is pure Python, and the download tried again."""
    specs = [str(r) for r in reqs if not is_torch(r.name)]
    for _ in range(MAX_BUILDS):
        proc = pip("download", "-q", "--dest", str(dest), "--find-links", str(built), *target.pip_flags(), *specs)
        if proc.returncode == 0:
            return
        missing = _NO_MATCH.findall(proc.stderr + proc.stdout)
        if not missing:
            raise WheelhouseError(f"pip download failed: {last_error(proc)}")
        spec = missing[-1]
        name = canonicalize_name(Requirement(spec).name)
        if any(canonicalize_name(parse_wheel_filename(p.name)[0]) == name for p in built.glob("*.whl")):
            raise WheelhouseError(f"pip download failed: {last_error(proc)}")
        done = pip("wheel", "--no-deps", "-q", "--no-binary", name, "-w", str(built), spec)
        if done.returncode != 0:
            raise WheelhouseError(f"{spec} has no wheel for the target and building it here failed: "
                                  f"{last_error(done)}")
        wheel = next(p for p in built.glob("*.whl") if canonicalize_name(parse_wheel_filename(p.name)[0]) == name)
        if not wheel.name.endswith("-none-any.whl"):
            raise WheelhouseError(f"{spec} has no wheel for the target and is not pure Python ({wheel.name}): "
                                  "install it on the target another way")
    raise WheelhouseError(f"pip download failed: more than {MAX_BUILDS} requirements had no wheel")


# ---- the folder ------------------------------------------------------------------------------------------------

MANIFEST = "manifest.json"


def prepare_out(out: Path) -> None:
    """An empty or new folder, or an earlier wheelhouse (its own files are removed); anything else is refused."""
    if out.exists() and not out.is_dir():
        raise WheelhouseError(f"--out {out}: not a folder")
    if not out.exists() or not any(out.iterdir()):
        out.mkdir(parents=True, exist_ok=True)
        return
    try:
        old = json.loads((out / MANIFEST).read_text())
        own = {MANIFEST, *old["files"]}
    except (OSError, ValueError, KeyError, TypeError):
        raise WheelhouseError(f"--out {out}: not empty and not a wheelhouse (no readable {MANIFEST}); "
                              "name a new or empty folder") from None
    strangers = sorted(p.name for p in out.iterdir() if p.name not in own)
    if strangers:
        raise WheelhouseError(f"--out {out}: holds files that are not the wheelhouse's ({', '.join(strangers[:3])}); "
                              "name a new or empty folder")
    for name in own:
        (out / name).unlink(missing_ok=True)


def install_commands(out: str) -> list[str]:
    return [f"pip install --no-index --find-links {out} -r {out}/requirements.txt",
            f"pip install --no-index --no-deps --find-links {out} archlab"]


def mib(n: int) -> str:
    return f"{n / 2**20:.1f} MiB"


def write(out: Path, which: str, target: Target, have: set[str], reqs: list[Requirement], own: Path,
          wheels: dict[str, Path]) -> dict:
    """Copy the wheels and write requirements.txt, INSTALL.txt and manifest.json; the manifest's dict."""
    files = [own, *sorted(wheels.values(), key=lambda p: p.name)]
    for path in files:
        shutil.copy2(path, out / path.name)
    (out / "requirements.txt").write_text(
        f"# archlab's requirements in the {which} set (torch: the installed one is checked, never replaced)\n"
        + "".join(f"{r}\n" for r in reqs if canonicalize_name(r.name) not in have))
    commands = install_commands(str(out))
    (out / "INSTALL.txt").write_text(
        f"archlab wheelhouse ({which} set; {target.describe()}). torch is not here: the installed one is used.\n"
        "With the target's Python (its venv activated), no network needed:\n\n" + "".join(f"  {c}\n" for c in commands))
    sizes = {p.name: p.stat().st_size for p in files}
    manifest = {"set": which, "python_version": target.python_version, "platforms": target.platforms,
                "have": sorted(have), "left_out": sorted(LAZY) if which == "core" else [],
                "files": [*sizes, "requirements.txt", "INSTALL.txt"], "sizes": sizes,
                "total_bytes": sum(sizes.values()), "install": commands}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def make(out: Path, which: str, target: Target, have: set[str]) -> dict:
    env = marker_env(target.python_version, target.platforms)
    prepare_out(out)
    with tempfile.TemporaryDirectory(prefix="wheelhouse-") as tmp_name:
        tmp = Path(tmp_name)
        (tmp / "dl").mkdir()
        (tmp / "built").mkdir()
        own = build_archlab(tmp)
        reqs = roots(wheel_metadata(own), which, env)
        download([r for r in reqs if canonicalize_name(r.name) not in have], target, tmp / "dl", tmp / "built")
        got = by_name(tmp / "dl")
        if pulled := sorted(n for n in got if is_torch(n)):
            raise WheelhouseError(f"a requirement pulled {', '.join(pulled)}: the wheelhouse never holds torch's wheels")
        return write(out, which, target, have, reqs, own, closure(reqs, got, have, env))


class Parser(argparse.ArgumentParser):
    """argparse with a usage error raised as WheelhouseError (one line). tokenizer.cli_args.OneLineParser does the
    same, but this script runs on a bare Python (pip alone), where importing archlab's packages fails."""

    def error(self, message: str):  # type: ignore[override]
        raise WheelhouseError(f"{message} (see '{self.prog} --help')")


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = Parser(prog="wheelhouse", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("wheelhouse"), help="the folder (default: wheelhouse)")
    parser.add_argument("--set", dest="which", default="full",
                        help="full: every requirement; core: without wandb and datasets (default: full)")
    parser.add_argument("--python-version", help="the target's Python, e.g. 3.12 (default: this one)")
    parser.add_argument("--platform", action="append", default=[],
                        help="a target platform tag, as pip download takes it; repeatable (default: this machine)")
    parser.add_argument("--have", default="", help="comma-separated packages the target already has: left out")
    args = parser.parse_args(argv)
    if args.which not in SETS:
        parser.error(f"--set {args.which}: choose {' or '.join(SETS)}")
    if args.python_version is not None and not re.fullmatch(r"3\.\d{1,2}", args.python_version):
        parser.error(f"--python-version {args.python_version}: write it as 3.N (e.g. 3.12)")
    names = [n.strip() for n in args.have.split(",") if n.strip()]
    bad = [n for n in names if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", n)]
    if bad:
        parser.error(f"--have {bad[0]}: not a package name")
    if any(is_torch(n) for n in names):
        parser.error("--have torch: torch is never in a wheelhouse; no need to name it")
    args.have = {canonicalize_name(n) for n in names}
    return args


def main(argv: list[str] | None = None) -> int:
    try:
        args = parse_args(argv)
        target = Target(args.python_version, args.platform)
        manifest = make(args.out, args.which, target, args.have)
    except WheelhouseError as e:
        print(f"wheelhouse: error: {e}", file=sys.stderr)
        return 2
    print(f"{args.out}: {len(manifest['sizes'])} wheels, {mib(manifest['total_bytes'])} ({args.which} set; "
          f"{target.describe()}; torch not included"
          + (f"; left out, the target has them: {', '.join(manifest['have'])}" if manifest["have"] else "") + ")")
    print("install there, with no network:\n" + "".join(f"  {c}\n" for c in manifest["install"]), end="")
    return 0


if __name__ == "__main__":
    sys.exit(main())
