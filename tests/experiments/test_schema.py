"""The typed run config (experiments.config.schema): conf/ composes onto it exactly as it composed without it,
validate() hands back typed objects, and the schema's choice lists are the registries' keys.

tests/experiments/golden/composed_configs.json was recorded from conf/ before the schema existed (every experiment,
every model preset, the defaults and task=seq2seq; ARCHLAB_CACHE=/CACHE). The only changes since: the data keys of
HELD_OUT_DEFAULTS (no test split, no extra corpus, no separator: today's behaviour), train.sampler,
train.max_epochs and schedule.warmup_ratio, added later with the defaults that keep the behaviour recorded (random
windows, no limit, warmup_steps), model.param / model.base_width (sp, null: the standard parametrization); and
the schema writes down defaults the YAML left out: every PosConfig field of model.pos (arch.PosConfig's defaults, which a
model got anyway). A RunConfig also lists every argument of arch.shape_for in a model.shape that is set (null:
shape_for's default).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from arch import ModelConfig
from arch.config import PosConfig
from experiments.config.check import validate
from experiments.config.compose import compose_config
from experiments.config.data_schema import DATA_SCHEMAS, TextData
from experiments.config.errors import ConfigError
from experiments.config.model_schema import EncDecModelNode, ModelNode
from experiments.config.schema import (LOGGER_NAMES, OPTIMIZER_NAMES, SCHEDULE_NAMES, TASK_NAMES, LoadedTokenizer,
                                       RunConfig, TrainedTokenizer)

GOLDEN = json.loads((Path(__file__).parent / "golden" / "composed_configs.json").read_text())["configs"]
SHAPE_ARGS = ("n_params", "n_layers", "aspect_ratio", "n_heads", "d_head")  # arch.shape_for's arguments
# data keys added since (issue 32: a test split, extra eval corpora, documents cut at a separator line), with the
# defaults that keep the behaviour recorded: no test split, no extra corpus, a file is one document
HELD_OUT = {"test_fraction": 0.0, "test_max_tokens": None, "extra_eval": {}}
HELD_OUT_DEFAULTS = {"embedded": HELD_OUT, "hf": HELD_OUT, "text": {"doc_separator": None, **HELD_OUT},
                     "tokens": {"test_max_tokens": None, "extra_eval": {}}}
JOBLIB = importlib.util.find_spec("hydra_plugins.hydra_joblib_launcher") is not None


def _with_written_defaults(cfg: dict, shape: bool = False) -> dict:
    """The golden config with the defaults the schema writes down (see the module docstring)."""
    cfg = json.loads(json.dumps(cfg))
    cfg["train"] = {**cfg["train"], "sampler": "random", "max_epochs": None}  # knobs added since, at today's behaviour
    cfg["schedule"] = {**cfg["schedule"], "warmup_ratio": None}
    cfg["data"] = {**cfg["data"], **HELD_OUT_DEFAULTS.get(cfg["data"]["source"], {})}
    model = cfg["model"]
    model.update({"param": "sp", "base_width": None})
    model["pos"] = {**dataclasses.asdict(PosConfig()), **model["pos"]}
    if shape and model.get("shape") is not None:
        model["shape"] = {**dict.fromkeys(SHAPE_ARGS), **model["shape"]}
    return cfg


@pytest.mark.parametrize("case", sorted(GOLDEN))
def test_conf_composes_as_it_did_before_the_schema(case, monkeypatch):
    if "finding_" in case and not JOBLIB:
        pytest.skip("the finding experiments name the joblib launcher (pip install -e '.[joblib]')")
    monkeypatch.setenv("ARCHLAB_CACHE", "/CACHE")
    cfg = compose_config([] if case == "<defaults>" else case.split(" "), return_hydra_config=True)
    hydra = OmegaConf.to_container(cfg.hydra, resolve=False)
    plain = OmegaConf.to_container(OmegaConf.masked_copy(cfg, [k for k in cfg if k != "hydra"]), resolve=True)
    assert plain == _with_written_defaults(GOLDEN[case]["cfg"])
    assert {k: hydra[k] for k in ("sweeper", "launcher", "sweep")} == GOLDEN[case]["hydra"]


@pytest.mark.parametrize("case", ["<defaults>", "experiment=depth_vs_width", "task=seq2seq",
                                  "experiment=seq2seq_reverse"])
def test_validate_returns_the_composed_config_typed(case, monkeypatch):
    monkeypatch.setenv("ARCHLAB_CACHE", "/CACHE")
    cfg = compose_config([] if case == "<defaults>" else [case, "train.device=cpu"])
    rc = validate(cfg)
    assert isinstance(rc, RunConfig)
    composed = OmegaConf.to_container(cfg, resolve=True)
    assert rc.to_dict() == _with_written_defaults(composed, shape=True)  # to_dict is what config.yaml holds
    assert RunConfig.from_dict(rc.to_dict()) == rc
    assert isinstance(rc.optim.lr, float) and isinstance(rc.train.steps, int) and isinstance(rc.model.pos, PosConfig)
    assert type(rc.model) is (EncDecModelNode if "seq2seq" in case else ModelNode)


def test_values_arrive_with_their_types():
    rc = validate(compose_config(["optim.lr=1", "train.steps=5", "model.dropout=0", "data=text",
                                  f"data.paths=[{__file__}]", "train.device=cpu"]))
    assert rc.optim.lr == 1.0 and type(rc.optim.lr) is float  # an int on the command line, a float field
    assert type(rc.model.dropout) is float and rc.train.steps == 5
    assert isinstance(rc.data, TextData) and rc.data.paths == [__file__]


@pytest.mark.parametrize("option,schema", [("embedded", "EmbeddedData"), ("text", "TextData"), ("hf", "HFData"),
                                           ("tinystories", "HFData"), ("tokens", "TokensData"),
                                           ("seq2seq_pairs", "Seq2SeqPairsData"),
                                           ("seq2seq_synthetic", "Seq2SeqSyntheticData")])
def test_each_data_option_is_typed_by_its_source(option, schema):
    cfg = compose_config([f"data={option}"])
    assert OmegaConf.get_type(cfg.data).__name__ == schema
    assert set(cfg.data) == {f.name for f in dataclasses.fields(DATA_SCHEMAS[cfg.data.source])}


def test_tokenizer_options_are_typed_by_mode():
    assert OmegaConf.get_type(compose_config([]).tokenizer) is TrainedTokenizer
    assert OmegaConf.get_type(compose_config(["tokenizer=load"]).tokenizer) is LoadedTokenizer


@pytest.mark.parametrize("overrides,message", [
    (["optim.lrr=1"], "optim.lrr"),                      # Hydra: not in the schema
    (["data.path=x"], "data.path"),                      # data=embedded has no path
    (["model.n_encoder_layers=2"], "model.n_encoder_layers"),  # a seq2seq key in a decoder-only run
    (["seed=abc"], "seed"),
])
def test_composition_refuses_what_is_outside_the_schema(overrides, message):
    with pytest.raises(ConfigError) as e:  # one line naming the key, not Hydra's ConfigCompositionException
        compose_config(overrides)
    assert str(e.value).startswith(f"{message}: ") and "\n" not in str(e.value), str(e.value)


@pytest.mark.parametrize("override,message", [
    ("+optim.lrr=1", "optim.lrr: unknown key; did you mean optim.lr?"),   # Hydra adds a `+` key even to a schema
    ("+data.paths=[a.txt]", "data.paths: unknown key"),
])
def test_validate_refuses_added_keys(override, message):
    with pytest.raises(ConfigError) as e:
        validate(compose_config([override]))
    assert str(e.value).startswith(message)


def test_model_node_is_model_config():
    """ModelNode has ModelConfig's fields and defaults, except the five run-time ones; plus shape."""
    model = {f.name: f for f in dataclasses.fields(ModelConfig)}
    node = {f.name: f for f in dataclasses.fields(ModelNode)}
    assert list(node) == [*model, "shape"]
    for name, f in model.items():
        if name not in ("vocab_size", "n_ctx", "d_model", "n_layers", "n_heads", "pos"):
            assert node[name].default == f.default, name
    assert node["pos"].default_factory() == PosConfig()
    assert [f.name for f in dataclasses.fields(EncDecModelNode)][len(node):] == ["n_encoder_layers", "n_decoder_layers",
                                                                                  "scale_embeddings"]


def test_choice_lists_are_the_registries():
    from experiments.data import corpus, pairs
    from experiments.rundir.tracking import LOGGERS
    from experiments.run.optim import OPTIMIZERS
    from experiments.run.schedule import SCHEDULES
    from experiments.run.tasks import TASKS

    assert sorted(OPTIMIZER_NAMES) == sorted(OPTIMIZERS)
    assert sorted(SCHEDULE_NAMES) == sorted(SCHEDULES)
    assert sorted(LOGGER_NAMES) == sorted(LOGGERS)
    assert sorted(TASK_NAMES) == sorted(TASKS)
    assert sorted(DATA_SCHEMAS) == sorted([*corpus.SOURCES, corpus.TOKEN_SOURCE, *pairs.SOURCES])


def test_the_loaders_take_the_typed_data_node(tmp_path):
    """experiments.data reads the typed node (attribute access) and still takes the plain dict of config.yaml."""
    from experiments.data.corpus import load_corpus
    from experiments.data.pairs import identity, load_pairs

    text = tmp_path / "a.txt"
    text.write_text("one two three. " * 50)
    rc = validate(compose_config(["data=text", f"data.paths=[{text}]", "train.device=cpu"]))
    typed, plain = load_corpus(rc.data), load_corpus(rc.to_dict()["data"])
    assert (typed.key, typed.identity) == (plain.key, plain.identity) and typed.train_docs
    rc = validate(compose_config(["task=seq2seq", "data.n_train=50", "train.device=cpu"]))
    assert load_pairs(rc.data) == load_pairs(rc.to_dict()["data"])
    assert identity(rc.data) == identity(rc.to_dict()["data"])
