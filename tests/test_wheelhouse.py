"""scripts/wheelhouse.py (`make wheelhouse`): which requirements each set holds (torch never among the wheels), the
dependency walk over downloaded wheels (markers, extras, what the target has), the sdist-only build, the folder
handling and bad arguments, all without the network (fake wheels, a fake pip); and, marked slow because building
needs the package index, the real thing: a core wheelhouse installed with no network into a fresh venv that sees
an existing torch, where two training steps run and torch is the same one afterwards; a stub CUDA 13 torch is
accepted and an older one refused by pip, neither replaced.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tomllib
import zipfile
from importlib import metadata
from pathlib import Path

import pytest

from .conftest import REPO_ROOT

SCRIPT = REPO_ROOT / "scripts" / "wheelhouse.py"
_spec = importlib.util.spec_from_file_location("wheelhouse", SCRIPT)
wh = importlib.util.module_from_spec(_spec)
sys.modules["wheelhouse"] = wh  # dataclasses look their module up by name
_spec.loader.exec_module(wh)

LINUX_312 = wh.marker_env("3.12", ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64"])


def archlab_metadata() -> str:
    """Requires-Dist lines as archlab's wheel carries them, from pyproject.toml."""
    project = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]
    lines = [f"Requires-Dist: {r}" for r in project["dependencies"]]
    lines += [f'Requires-Dist: {r}; extra == "{extra}"' for extra, reqs in project["optional-dependencies"].items()
              for r in reqs]
    return "Metadata-Version: 2.4\nName: archlab\n" + "\n".join(lines) + "\n"


def names(reqs) -> list[str]:
    return sorted(wh.canonicalize_name(r.name) for r in reqs)


def test_each_set_holds_archlab_requirements_with_torch_for_the_check_only():
    full = wh.roots(archlab_metadata(), "full", LINUX_312)
    core = wh.roots(archlab_metadata(), "core", LINUX_312)
    assert {"wandb", "datasets", "hydra-core", "scipy", "safetensors", "hydra-joblib-launcher", "torch"} <= set(names(full))
    assert set(names(full)) - set(names(core)) == {"wandb", "datasets"}
    assert not {"pytest", "transformers", "hydra-submitit-launcher"} & set(names(full))  # dev, hf, slurm extras
    (torch,) = [r for r in core if r.name == "torch"]
    assert str(torch) == "torch>=2.4"  # requirements.txt checks the installed torch against this
    assert all(r.marker is None for r in core)  # the joblib extra's marker is dropped: asked for directly


def fake_wheel(folder: Path, name: str, version: str = "1.0", requires: list[str] = (),
               tag: str = "py3-none-any") -> Path:
    """A wheel file with only a METADATA (what the dependency walk reads)."""
    path = folder / f"{name.replace('-', '_')}-{version}-{tag}.whl"
    with zipfile.ZipFile(path, "w") as z:
        z.writestr(f"{name.replace('-', '_')}-{version}.dist-info/METADATA",
                   f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
                   + "".join(f"Requires-Dist: {r}\n" for r in requires))
    return path


@pytest.fixture
def downloaded(tmp_path):
    """A download folder: app needs lib (which needs torch and numpy), plugin[fast] (its extra needs speedup) and,
    on Windows only, winlib; numpy needs nothing; extra is downloaded but needed by no one."""
    for name, requires in {"lib": ["torch>=2.4", "numpy"], "plugin": ['speedup; extra == "fast"'],
                           "speedup": [], "numpy": [], "winlib": [], "extra": []}.items():
        fake_wheel(tmp_path, name, requires=requires)
    return wh.by_name(tmp_path)


def reqs(*specs):
    return [wh.Requirement(s) for s in specs]


def test_the_walk_follows_markers_and_extras_and_leaves_out_torch_and_what_the_target_has(downloaded):
    roots = reqs("torch>=2.4", "lib", "plugin[fast]", 'winlib; sys_platform == "win32"')
    assert sorted(wh.closure(roots, downloaded, set(), LINUX_312)) == ["lib", "numpy", "plugin", "speedup"]
    windows = wh.marker_env("3.12", ["win_amd64"])
    assert "winlib" in wh.closure(roots, downloaded, set(), windows)
    assert sorted(wh.closure(roots, downloaded, {"numpy"}, LINUX_312)) == ["lib", "plugin", "speedup"]
    assert sorted(wh.closure(reqs("plugin"), downloaded, set(), LINUX_312)) == ["plugin"]  # no extra, no speedup


def test_a_needed_package_with_no_wheel_is_an_error(downloaded):
    with pytest.raises(wh.WheelhouseError, match=r"^missing>=2 is needed on the target but pip downloaded no wheel"):
        wh.closure(reqs("lib", "missing>=2"), downloaded, set(), LINUX_312)


def test_the_target_environment():
    assert (LINUX_312["python_version"], LINUX_312["sys_platform"], LINUX_312["platform_machine"]) == \
           ("3.12", "linux", "x86_64")
    mac = wh.marker_env(None, ["macosx_11_0_arm64"])
    assert (mac["sys_platform"], mac["platform_machine"]) == ("darwin", "arm64")
    assert mac["python_version"] == f"{sys.version_info.major}.{sys.version_info.minor}"
    with pytest.raises(wh.WheelhouseError, match="one OS and architecture per wheelhouse"):
        wh.marker_env("3.12", ["manylinux_2_28_x86_64", "manylinux_2_28_aarch64"])
    assert wh.Target("3.12", ["manylinux_2_28_x86_64"]).pip_flags() == [
        "--only-binary=:all:", "--python-version", "3.12", "--implementation", "cp", "--platform",
        "manylinux_2_28_x86_64"]
    assert wh.Target().pip_flags() == ["--only-binary=:all:"]


class FakePip:
    """pip download fails once for a requirement that has only an sdist; pip wheel builds it (with `tag`)."""

    def __init__(self, built: Path, tag: str):
        self.built, self.tag, self.calls = built, tag, []

    def __call__(self, *args, cwd=None):
        self.calls.append(args)
        out = ""
        if args[0] == "download" and not list(self.built.glob("antlr4*.whl")):
            rc, err = 1, ("ERROR: Could not find a version that satisfies the requirement antlr4-python3-runtime==4.9.*"
                          " (from omegaconf)\nERROR: No matching distribution found for antlr4-python3-runtime==4.9.*\n")
        elif args[0] == "wheel":
            fake_wheel(self.built, "antlr4-python3-runtime", "4.9.3", tag=self.tag)
            rc, err = 0, ""
        else:
            rc, err = 0, ""
        return subprocess.CompletedProcess(["pip", *args], rc, out, err)


def test_an_sdist_only_requirement_is_built_here_when_pure_python(tmp_path, monkeypatch):
    fake = FakePip(tmp_path, "py3-none-any")
    monkeypatch.setattr(wh, "pip", fake)
    wh.download(reqs("hydra-core", "torch>=2.4"), wh.Target("3.12"), tmp_path / "dl", tmp_path)
    assert [c[0] for c in fake.calls] == ["download", "wheel", "download"]
    assert "antlr4-python3-runtime==4.9.*" in fake.calls[1] and "--no-binary" in fake.calls[1]
    assert "torch>=2.4" not in fake.calls[0] and "hydra-core" in fake.calls[0]  # torch is never downloaded
    assert fake.calls[2][fake.calls[2].index("--find-links") + 1] == str(tmp_path)


def test_an_sdist_only_requirement_with_compiled_code_is_refused(tmp_path, monkeypatch):
    monkeypatch.setattr(wh, "pip", FakePip(tmp_path, "cp311-cp311-linux_x86_64"))
    with pytest.raises(wh.WheelhouseError, match=r"antlr4-python3-runtime==4\.9\.\* has no wheel for the target and is "
                                                 r"not pure Python"):
        wh.download(reqs("hydra-core"), wh.Target("3.12"), tmp_path / "dl", tmp_path)


def fake_make(tmp_path, monkeypatch, also: dict[str, list[str]]):
    """make() with the build and the download replaced: archlab needs torch, hydra-core and numpy; the download
    brings hydra-core, numpy and `also`."""
    own = fake_wheel(tmp_path, "archlab", "0.1.0", ["torch>=2.4", "hydra-core<1.4,>=1.3.8", "numpy",
                                                    'wandb; extra == "never"'])
    monkeypatch.setattr(wh, "build_archlab", lambda tmp: own)

    def download(reqs, target, dest, built):
        for name, requires in {"hydra-core": [], "numpy": [], **also}.items():
            fake_wheel(dest, name, requires=requires)
    monkeypatch.setattr(wh, "download", download)


def test_make_writes_the_wheels_and_a_requirements_file_that_checks_torch(tmp_path, monkeypatch):
    fake_make(tmp_path, monkeypatch, {})
    out = tmp_path / "house"
    manifest = wh.make(out, "core", wh.Target(), {"numpy"})
    assert sorted(p.name for p in out.glob("*.whl")) == ["archlab-0.1.0-py3-none-any.whl",
                                                         "hydra_core-1.0-py3-none-any.whl"]
    assert (out / "requirements.txt").read_text().splitlines()[1:] == ["torch>=2.4", "hydra-core<1.4,>=1.3.8"]
    assert manifest["total_bytes"] == sum(p.stat().st_size for p in out.glob("*.whl"))
    assert json.loads((out / "manifest.json").read_text())["install"] == [
        f"pip install --no-index --find-links {out} -r {out}/requirements.txt",
        f"pip install --no-index --no-deps --find-links {out} archlab"]
    # again into the same folder: the earlier wheelhouse's files are replaced, a stranger's file is refused
    wh.make(out, "core", wh.Target(), set())
    assert "numpy-1.0-py3-none-any.whl" in os.listdir(out)
    (out / "notes.txt").write_text("mine")
    with pytest.raises(wh.WheelhouseError, match=r"holds files that are not the wheelhouse's \(notes.txt\)"):
        wh.make(out, "core", wh.Target(), set())
    assert (out / "notes.txt").read_text() == "mine"


def test_a_download_that_brings_torch_is_refused(tmp_path, monkeypatch):
    fake_make(tmp_path, monkeypatch, {"triton": [], "nvidia-cublas-cu12": []})
    with pytest.raises(wh.WheelhouseError, match=r"pulled nvidia-cublas-cu12, triton: the wheelhouse never holds"):
        wh.make(tmp_path / "house", "full", wh.Target(), set())
    assert not list((tmp_path / "house").glob("*.whl"))


@pytest.mark.parametrize("args, message", [
    (["--set", "tiny"], "--set tiny: choose full or core"),
    (["--python-version", "312"], "--python-version 312: write it as 3.N (e.g. 3.12)"),
    (["--have", "numpy,sci py"], "--have sci py: not a package name"),
    (["--have", "torch"], "--have torch: torch is never in a wheelhouse; no need to name it"),
    (["--platform", "linux-x86_64"], "--platform linux-x86_64: not a platform tag"),
    (["--out", "{tmp}"], "--out {tmp}: not empty and not a wheelhouse (no readable manifest.json)"),
    (["--out", "{tmp}/a_file"], "--out {tmp}/a_file: not a folder"),
])
def test_bad_arguments_are_one_line_and_exit_2(tmp_path, args, message):
    """Each is refused before anything is built or downloaded (a refusal that reached pip would take seconds and
    print pip's lines)."""
    (tmp_path / "a_file").write_text("x")
    args = [a.format(tmp=tmp_path) for a in args]
    proc = subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr.startswith("wheelhouse: error: " + message.format(tmp=tmp_path)), proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout == ""


# ---- slow: the real wheelhouse, installed with no network ------------------------------------------------------

def torch_site(root: Path) -> Path:
    """A folder that shows this interpreter's torch and its own dependencies (symlinks to their installed files,
    nothing copied or reinstalled), as a GPU box's Python has them."""
    site = root / "torch-site"
    site.mkdir()
    todo, seen = ["torch"], set()
    while todo:
        dist = metadata.distribution(todo.pop())
        name = wh.canonicalize_name(dist.metadata["Name"])
        if name in seen:
            continue
        seen.add(name)
        base = Path(dist.locate_file(""))
        for top in {Path(f).parts[0] for f in dist.files or []}:
            if not (site / top).exists() and (base / top).exists() and not top.startswith(".."):
                (site / top).symlink_to(base / top)
        todo += [r.name for r in map(wh.Requirement, dist.requires or [])
                 if r.marker is None or r.marker.evaluate({"extra": ""})]
    return site


def offline_env() -> dict[str, str]:
    """No pip configuration at all (this machine's pip.conf adds indexes and find-links): the wheelhouse is the only
    source."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    return {**env, "PIP_CONFIG_FILE": os.devnull, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "WANDB_MODE": "disabled"}


def fresh_venv(root: Path, sees: Path) -> Path:
    """A new venv (no system site-packages) whose sys.path also holds `sees`, through a .pth file; its python.
    The venv's own setuptools (Python < 3.12 puts an old one in every venv) is removed first, before `sees` is
    visible: it would shadow the one torch was installed with (torch 2.13 needs setuptools>=77.0.3), which a box
    whose torch came with its dependencies does not have."""
    subprocess.run([sys.executable, "-m", "venv", str(root)], check=True, capture_output=True, timeout=300)
    python = root / "bin" / "python"
    subprocess.run([python, "-m", "pip", "uninstall", "-q", "-y", "setuptools"], env=offline_env(), check=True,
                   capture_output=True, timeout=300)
    purelib = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             capture_output=True, text=True, check=True).stdout.strip()
    Path(purelib, "box-site.pth").write_text(f"{sees}\n")
    return python


def run(python: Path, *args: str, cwd: Path, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(python), *args], cwd=cwd, env=offline_env(), capture_output=True, text=True,
                          timeout=600, **kw)


@pytest.fixture(scope="module")
def core_wheelhouse(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheelhouse") / "core"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--set", "core"], capture_output=True,
                          text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    return out


@pytest.mark.slow
def test_an_offline_install_trains_and_keeps_the_installed_torch(core_wheelhouse, tmp_path):
    import torch

    site = torch_site(tmp_path)
    python = fresh_venv(tmp_path / "venv", site)
    away = tmp_path / "away"  # not the checkout: what is imported must be the installed archlab
    away.mkdir()
    probe = "import json, torch; print(json.dumps([torch.__version__, torch.__file__]))"
    before = json.loads(run(python, "-c", probe, cwd=away, check=True).stdout)
    assert before == [torch.__version__, str(site / "torch" / "__init__.py")]
    manifest = json.loads((core_wheelhouse / "manifest.json").read_text())
    assert not [f for f in manifest["files"] if wh.is_torch(f.split("-")[0])]
    for command in manifest["install"]:
        proc = run(python, "-m", *command.split(), cwd=away)  # pip install --no-index ...
        assert proc.returncode == 0, proc.stdout + proc.stderr
    assert json.loads(run(python, "-c", probe, cwd=away, check=True).stdout) == before
    purelib = Path(run(python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))", cwd=away,
                       check=True).stdout.strip())
    assert not (purelib / "torch").exists() and not list(purelib.glob("torch-*.dist-info"))
    imports = run(python, "-c", "import arch, tokenizer, experiments, hydra_plugins.archlab_tuned_sweeper as t; "
                                "print(experiments.__file__)", cwd=away)
    assert imports.returncode == 0 and imports.stdout.strip().startswith(str(purelib)), imports.stderr
    train = run(python, "-m", "experiments.train", "train.steps=2", "logger=disabled", "train.device=cpu",
                f"hydra.run.dir={tmp_path / 'run'}", f"data.cache_dir={tmp_path / 'cache'}", cwd=away)
    assert train.returncode == 0, train.stderr[-3000:]
    assert json.loads((tmp_path / "run" / "summary.json").read_text())["status"] == "completed"
    assert run(python, "-m", "pip", "check", cwd=away).stdout.count("torch") == 0  # nothing torch-related is off


@pytest.mark.slow
def test_the_full_set_installs_with_one_command(tmp_path):
    """`pip install --no-index --find-links DIR archlab`: the full set resolves archlab's declared requirements, wandb
    and datasets included, from the folder alone, beside the existing torch."""
    import torch

    out = tmp_path / "full"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr
    python = fresh_venv(tmp_path / "venv", torch_site(tmp_path))
    proc = run(python, "-m", "pip", "install", "--no-index", "--find-links", str(out), "archlab", cwd=tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    probe = run(python, "-c", "import torch, wandb, datasets, experiments; print(torch.__version__, torch.__file__)",
                cwd=tmp_path)
    assert probe.stdout.split() == [torch.__version__, str(tmp_path / "torch-site" / "torch" / "__init__.py")], probe.stderr


@pytest.mark.slow
@pytest.mark.parametrize("version, accepted", [("2.3.0", False), ("2.11.0+cu130", True)])
def test_an_installed_torch_is_checked_never_replaced(core_wheelhouse, tmp_path, version, accepted):
    """A stub torch dist (metadata only) in the venv's view: a CUDA 13 build of 2.11 (the local version label is
    ignored by >=) satisfies torch>=2.4 and stays; a 2.3 fails the install in pip's line and stays too."""
    old = tmp_path / "box-torch"
    dist = old / f"torch-{version}.dist-info"
    dist.mkdir(parents=True)
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: torch\nVersion: {version}\n")
    (dist / "RECORD").write_text("")
    python = fresh_venv(tmp_path / "venv", old)
    manifest = json.loads((core_wheelhouse / "manifest.json").read_text())
    proc = run(python, "-m", *manifest["install"][0].split(), cwd=tmp_path)
    assert (proc.returncode == 0) == accepted, proc.stdout + proc.stderr
    if not accepted:
        assert "No matching distribution found for torch>=2.4" in proc.stderr
    assert run(python, "-c", "from importlib.metadata import version; print(version('torch'))", cwd=tmp_path,
               check=True).stdout.strip() == version
    assert sorted(p.name for p in old.iterdir()) == [f"torch-{version}.dist-info"]


@pytest.mark.slow
def test_a_wheelhouse_for_another_python_holds_only_wheels_that_install_there(tmp_path):
    from packaging.tags import compatible_tags, cpython_tags

    platforms = ["manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64"]
    out = tmp_path / "py312"
    proc = subprocess.run([sys.executable, str(SCRIPT), "--out", str(out), "--set", "core", "--python-version", "3.12",
                           *(a for p in platforms for a in ("--platform", p))], capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stderr
    supported = {*cpython_tags((3, 12), platforms=platforms), *compatible_tags((3, 12), "cp312", platforms)}
    wheels = sorted(out.glob("*.whl"))
    assert {"antlr4-python3-runtime", "hydra-core", "omegaconf", "archlab"} <= {
        wh.canonicalize_name(w.name.split("-")[0]) for w in wheels}
    for wheel in wheels:
        assert wh.parse_wheel_filename(wheel.name)[3] & supported, wheel.name
    assert not [w for w in wheels if wh.is_torch(wh.parse_wheel_filename(w.name)[0])]
