"""Every option of every config group composes (Hydra compose API) and passes validate(); bad configs fail
with one ConfigError before any data is read, and the CLI reports them as one line without a traceback.

Options are discovered from the files in conf/<group>/, so a new option is covered without editing this test."""

from __future__ import annotations

import importlib
import importlib.util
import re
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from experiments.config.check import validate
from experiments.config.errors import ConfigError
from experiments.run.train import train

from experiments.config.compose import compose_config

from .conftest import CONF, PYTHON, REPO

GROUPS = ["model", "model/pos", "model/norm", "model/norm_type", "model/activation", "model/attention", "model/block",
          "model/qk_norm", "model/init", "data", "tokenizer", "optim", "schedule", "train", "logger", "experiment"]
OPTIONS = [(g, p.stem) for g in GROUPS for p in sorted((CONF / g).glob("*.yaml"))]
LAUNCHER_PLUGINS = {"joblib_2": "hydra_plugins.hydra_joblib_launcher", "slurm": "hydra_plugins.hydra_submitit_launcher"}


def test_every_group_has_options():
    found = {g for g, _ in OPTIONS}
    assert found == set(GROUPS)
    assert {"learned", "sinusoidal", "relative", "alibi", "rope", "none"} <= {o for g, o in OPTIONS if g == "model/pos"}


@pytest.fixture
def required_values(tmp_path, cache_dir):
    """Values for the options whose config has a mandatory `???` field."""
    text = tmp_path / "corpus.txt"
    text.write_text("hello world. " * 200)
    jsonl = tmp_path / "corpus.jsonl"
    jsonl.write_text("".join(f'{{"text": "document {i} says hello"}}\n' for i in range(20)))
    tok = tmp_path / "tok.json"
    from tokenizer import Tokenizer
    from tokenizer.tokenfile import write_tokens

    Tokenizer([]).save(tok)  # a real one: validate loads it (experiments/config/tokenizer_file.py)

    write_tokens(tmp_path / "train.bin", [range(256)], vocab_size=256, fingerprint="f" * 64)
    pairs = tmp_path / "pairs.tsv"
    pairs.write_text("12\t21\n")
    return {
        ("data", "tokens"): [f"data.train_path={tmp_path / 'train.bin'}"],
        ("data", "text"): [f"data.paths=[{text}]"],
        ("data", "hf"): [f"data.name={jsonl}"],
        ("tokenizer", "load"): [f"tokenizer.path={tok}"],
        ("data", "seq2seq_synthetic"): ["task=seq2seq"],  # seq2seq data needs the seq2seq task
        ("data", "seq2seq_pairs"): ["task=seq2seq", f"data.path={pairs}"],
    }


@pytest.mark.parametrize("group,option", OPTIONS, ids=[f"{g}={o}" for g, o in OPTIONS])
def test_option_composes_and_validates(group, option, required_values, cache_dir, monkeypatch):
    # a hub preset (tinystories) is checked without the network: the hub "answers", offline flags are off
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr("tokenizer.datasets_source.hub_reachable", lambda timeout=3.0: True)
    cfg = compose_config(["logger=disabled", f"data.cache_dir={cache_dir}", f"{group}={option}",
                       *required_values.get((group, option), [])])
    c = validate(cfg)
    if group == "model/pos":
        assert c.model.pos.kind == option
    if group == "experiment":
        assert c.experiment_name == option


@pytest.mark.parametrize("option", sorted(p.stem for p in (CONF / "hydra" / "launcher").glob("*.yaml")))
def test_launcher_options_compose(option, cache_dir):
    if importlib.util.find_spec(LAUNCHER_PLUGINS.get(option, "hydra")) is None:
        pytest.skip(f"launcher plugin for {option} is not installed (pip install -e '.[slurm]')")
    cfg = compose_config([f"hydra/launcher={option}"], return_hydra_config=True)
    assert "_target_" in cfg.hydra.launcher


def test_experiments_sweep_what_they_say(cache_dir):
    def params(name):
        return yaml.safe_load((CONF / "experiment" / f"{name}.yaml").read_text())["hydra"]["sweeper"]["params"]

    assert params("pos_encodings")["model/pos"].split(",") == ["learned", "sinusoidal", "relative", "alibi", "rope", "none"]
    assert len(params("pos_encodings")["seed"].split(",")) == 3
    # the grids of docs/experiments.md: pre/post x warmup 0/100 x 3 seeds; n_layers 1..16 x 3 seeds; 4 encodings
    assert set(params("norm_placement")["model/norm"].split(",")) == {"pre", "post"}
    assert params("norm_placement")["schedule.warmup_steps"].split(",") == ["0", "100"]
    assert params("depth_vs_width")["model.shape.n_layers"].split(",") == ["1", "2", "4", "8", "16"]
    for name in ("norm_placement", "depth_vs_width"):
        assert params(name)["seed"].split(",") == ["0", "1", "2"], name
    assert params("demo")["model/pos"].split(",") == ["learned", "sinusoidal", "alibi", "rope"]


def test_depth_vs_width_shapes_share_one_budget(cache_dir):
    from arch import count_params
    from experiments.config.check import model_config

    counts = {}
    for n_layers in (1, 2, 4, 8, 16):
        c = validate(compose_config(["logger=disabled", f"data.cache_dir={cache_dir}", "experiment=depth_vs_width",
                                  f"model.shape.n_layers={n_layers}"]))
        mc = model_config(c.model, vocab_size=1024)
        assert mc.n_layers == n_layers
        counts[n_layers] = count_params(mc, non_embedding=True)
    budget = 800_000
    assert all(abs(n - budget) / budget < 0.03 for n in counts.values()), counts  # "within ~3%" (the yaml)


def test_model_presets_state_their_real_non_embedding_count():
    from arch import ModelConfig, count_params

    for path in sorted((CONF / "model").glob("*.yaml")):
        text = path.read_text()
        stated = re.search(r"non-embedding (?:params|count): ([\d,]+)", text, re.I)
        assert stated, f"{path.name} does not state its non-embedding count"
        d = yaml.safe_load(text)  # sparse: only what differs from ModelConfig's defaults
        d.update(vocab_size=1024, n_ctx=64)
        assert int(stated.group(1).replace(",", "")) == count_params(ModelConfig.from_dict(d), non_embedding=True), path.name


# -- one name everywhere: group option files == arch registry keys; presets == ModelConfig defaults + PRESETS ----

# group -> (the ModelConfig field it sets, the arch registry module and dict whose keys are the valid values)
MODEL_GROUPS = {
    "model/pos": ("pos.kind", "arch.components.positional", "POSITIONAL"),
    "model/norm": ("norm", "arch.components.block", "BLOCKS"),
    "model/norm_type": ("norm_type", "arch.components.norms", "NORMS"),
    "model/activation": ("activation", "arch.components.mlp", "MLPS"),
    "model/attention": ("attention", "arch.components.attention", "ATTENTION"),
    "model/block": ("block", "arch.components.block", "BLOCK_KINDS"),
    "model/init": ("init", "arch.components.init", "INITS"),
    "model/param": ("param", "arch.config", "PARAMETRIZATIONS"),  # arch.mup: sp | mup
}
NEEDS = {"model/param=mup": ["model.base_width=32"]}  # an option that cannot run alone


@pytest.mark.parametrize("group", list(MODEL_GROUPS))
def test_model_group_options_are_the_arch_registry(group):
    field, module, name = MODEL_GROUPS[group]
    registry = getattr(importlib.import_module(module), name)
    assert sorted(p.stem for p in (CONF / group).glob("*.yaml")) == sorted(registry)
    for option in registry:  # each option file sets that field to its own name (the report column value)
        c = validate(compose_config(["logger=disabled", f"{group}={option}", *NEEDS.get(f"{group}={option}", [])]))
        value = c.model.pos.kind if field == "pos.kind" else getattr(c.model, field)
        assert value == option


def test_qk_norm_group_is_none_or_a_norm_type():
    from arch.components.norms import NORMS

    assert sorted(p.stem for p in (CONF / "model/qk_norm").glob("*.yaml")) == sorted([*NORMS, "none"])
    for option in ("none", *NORMS):  # none.yaml is qk_norm: null (ModelConfig's "off")
        c = validate(compose_config(["logger=disabled", f"model/qk_norm={option}"]))
        assert c.model.qk_norm == (None if option == "none" else option)


def test_decoder_knob_keys_compose():
    c = validate(compose_config(["logger=disabled", "model/pos=rope", "model.n_kv_heads=2", "model.window=16",
                                 "model.pos.rope_scaling=yarn", "model.pos.rope_scaling_factor=4"]))
    m = c.model
    assert (m.n_kv_heads, m.window) == (2, 16)
    assert (m.pos.rope_scaling, m.pos.rope_scaling_factor) == ("yarn", 4)


def test_model_groups_are_in_the_defaults_list_and_dotted_keys_still_work():
    defaults = yaml.safe_load((CONF / "train.yaml").read_text())["defaults"]
    listed = {k for d in defaults if isinstance(d, dict) for k in d}
    assert set(MODEL_GROUPS) | {"model/qk_norm"} <= listed
    c = validate(compose_config(["logger=disabled", "model.norm=post", "model.activation=swiglu"]))
    assert (c.model.norm, c.model.activation) == ("post", "swiglu")
    c = validate(compose_config(["logger=disabled", "model=small", "model/norm=sandwich", "model/norm_type=rmsnorm"]))
    assert (c.model.norm, c.model.norm_type, c.model.d_model) == ("sandwich", "rmsnorm", 128)


def test_model_presets_are_model_config_defaults_plus_presets():
    import dataclasses

    from arch import ModelConfig
    from arch.config import PosConfig
    from arch.presets import PRESETS

    assert sorted(p.stem for p in (CONF / "model").glob("*.yaml")) == sorted(PRESETS)
    defaults = {f.name: f.default for f in dataclasses.fields(ModelConfig)
                if f.default is not dataclasses.MISSING}  # pos has a default_factory: its own group
    grouped = {"norm", "norm_type", "activation", "attention", "pos", "block", "qk_norm", "init", "param"}
    for name, fields in PRESETS.items():
        assert not set(fields) & grouped, name  # a preset would silently beat model/norm=... on the command line
        c = validate(compose_config(["logger=disabled", f"model={name}", "train.n_ctx=32"]))
        model = c.to_dict()["model"]
        assert model.pop("pos") == dataclasses.asdict(PosConfig())  # model/pos=learned: PosConfig's defaults
        assert (model.pop("vocab_size"), model.pop("n_ctx"), model.pop("shape")) == (None, 32, None)
        assert model == {**defaults, **fields}, name


# -- config errors: one clear message, before any data is read ---------------------------------------------------


@pytest.fixture
def no_data_loading(monkeypatch):
    def fail(*a, **k):
        raise AssertionError("data was loaded before the config error was raised")

    monkeypatch.setattr("experiments.data.corpus.load_corpus", fail)


@pytest.mark.parametrize(
    "overrides,message",
    [
        (["model.d_model=30", "model.n_heads=4"], "not divisible by n_heads"),
        (["model.activation=tanh"], "model: unknown activation 'tanh'"),  # arch.ModelConfig's own check
        (["data=text"], "data.paths: is required"),
        (["data=text", "data.paths=[/nonexistent/corpus.txt]"], "no file matches"),
        (["schedule.name=step"], "schedule.name: unknown value 'step'"),
        (["tokenizer.vocab_size=100"], "tokenizer.vocab_size: must be"),
        (["tokenizer=load", "tokenizer.path=/nonexistent/tok.json"], "does not exist"),
        (["train.n_ctx=128", "model.n_ctx=64"], "train.n_ctx: 128 exceeds model.n_ctx"),
        (["train.batch_size=0"], "train.batch_size: must be an integer >= 1"),
    ],
)
def test_config_errors_are_raised_before_data(make_cfg, no_data_loading, overrides, message):
    with pytest.raises(ConfigError, match=re.escape(message)):
        train(make_cfg(*overrides))


def test_unreachable_hub_name_fails_fast_with_local_file_advice(make_cfg, no_data_loading, monkeypatch):
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr("tokenizer.datasets_source.hub_reachable", lambda timeout=3.0: False)
    with pytest.raises(ConfigError, match=r"data=text data.paths="):
        train(make_cfg("data=hf", "data.name=someone/some-dataset"))


def test_offline_hub_name_fails_within_seconds(make_cfg, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    t0 = time.perf_counter()
    with pytest.raises(ConfigError, match=r"local files"):
        train(make_cfg("data=hf", "data.name=someone/surely-not-cached-dataset"))
    assert time.perf_counter() - t0 < 30


def test_cli_config_error_is_one_line_without_traceback(cli_env, tmp_path):
    """The one subprocess test of `python -m experiments.train` in the default suite: a new interpreter, -m, the exit
    status as the shell sees it. The other CLI tests run the command in this process (conftest's train_cli)."""
    proc = subprocess.run([PYTHON, "-m", "experiments.train", "model.n_heads=3", f"hydra.run.dir={tmp_path}/run"],
                          cwd=REPO, env=cli_env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert lines == [lines[0]] and lines[0].startswith("config error: model: d_model=64 is not divisible by n_heads=3")
    assert "Traceback" not in proc.stderr


def test_cli_unknown_option_is_one_line(train_cli, tmp_path):
    proc = train_cli("model/pos=spiral", f"hydra.run.dir={tmp_path}/run")
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("config error: model/pos: unknown option 'spiral'; "
                                   "choose from alibi, learned, none, relative, rope, sinusoidal")
    assert not (Path(tmp_path) / "run" / "metrics.jsonl").exists()
