"""The run config: how conf/ is found and composed, the checks that refuse a bad value in one line, resolvers.

    compose.py    CONF_DIR and compose_config (the compose API: demo, benchmarks, tests)
    check.py      validate(cfg): every value checked before any data is read; cfg.model -> arch.ModelConfig
    precheck.py   command-line checks before Hydra starts (a bad group option, a run dir that holds a run)
    resolvers.py  OmegaConf resolvers used by conf/ (${archlab_dirname:...})
    errors.py     ConfigError, the one exception for a configuration that cannot run
"""
