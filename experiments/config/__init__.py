"""The run config: typed schemas, how conf/ is found and composed, the checks that refuse a bad value in one line.

    schema.py        RunConfig and one dataclass per group (train, optim, schedule, tokenizer, logger, task),
                     registered with Hydra's ConfigStore: composition type-checks and refuses unknown keys
    model_schema.py  the `model` node (arch.ModelConfig's fields) and the one conversion -> arch.ModelConfig
    data_schema.py   the `data` node: one schema per source (embedded, text, hf, tokens, seq2seq_*)
    rules.py         Rule: what a value must be (bounds, choices), declared on the schema field; errors in words
    compose.py       CONF_DIR and compose_config (the compose API: demo, benchmarks, tests); registers the schemas
    check.py         validate(cfg) -> RunConfig: every value checked before any data is read
    precheck.py      command-line checks before Hydra starts (argv.py: what Hydra cannot read; rundir_check.py:
                     run dirs that cannot be made or must not be written)
    resolvers.py     OmegaConf resolvers used by conf/ (${archlab_dirname:...})
    errors.py        ConfigError, the one exception for a configuration that cannot run
"""
