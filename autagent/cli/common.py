"""What every subcommand shares: ``--set key=value`` read as YAML, the run's config, JSON on stdout."""

from __future__ import annotations

import json


def overrides(pairs: list[str] | None) -> dict:
    import yaml

    from ..config import ConfigError

    result = {}
    for pair in pairs or []:
        if "=" not in pair:
            raise ConfigError(f"--set expects key=value, got {pair!r}")
        key, value = pair.split("=", 1)
        try:
            result[key] = yaml.safe_load(value)
        except yaml.YAMLError as err:
            raise ConfigError(f"--set {key}: value is not YAML ({err})") from err
    return result


def config_of(args):
    from ..config import load_config

    pairs = overrides(getattr(args, "set", None))
    if getattr(args, "profile", None):
        pairs["tools.profile"] = args.profile
    return load_config(getattr(args, "config", None), pairs)


def print_json(obj) -> None:
    print(json.dumps(obj, indent=2, ensure_ascii=False))
