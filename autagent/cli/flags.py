"""The parser's class and the options several of ``autagent``'s subcommands share (the config and
``--set``, the cache folder, a query to a plugin, the dial, a pinned hash); :mod:`.parser` builds the
subcommands with them."""

from __future__ import annotations

import argparse
import os
import sys

from .typos import did_you_mean


class Parser(argparse.ArgumentParser):
    """A parser, and every subcommand's (argparse makes them of the parent's class), that takes no
    abbreviation: a mistyped or shortened flag is an error, never another flag (``serve --api-key X``
    once set ``--api-key-env``); help taken from docstrings loses their reStructuredText quotes."""

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        for key in ("description", "help"):
            if isinstance(kwargs.get(key), str):
                kwargs[key] = kwargs[key].replace("``", "")
        super().__init__(*args, **kwargs)

    def add_argument(self, *args, **kwargs):
        if isinstance(kwargs.get("help"), str):
            kwargs["help"] = kwargs["help"].replace("``", "")
        return super().add_argument(*args, **kwargs)

    def parse_known_args(self, args=None, namespace=None):
        self._given = list(sys.argv[1:] if args is None else args)  # what error() looks for a typo in
        return super().parse_known_args(args, namespace)

    def error(self, message):
        """argparse's error, with "did you mean" for a mistyped flag or subcommand: Python 3.11's argparse
        has no ``suggest_on_error``, and a typo of a required flag (``--plugn``) was reported as the
        required flag missing, the typo itself never named."""
        super().error(message + did_you_mean(message, getattr(self, "_given", []), self))


CHOICES_HELP = "the answer choices, each one argument: --choices '90 BPM' '120 BPM'"


def with_config(p):
    p.add_argument("--config", help="experiment YAML (default: the embedded defaults)")
    p.add_argument("--set", action="append", metavar="KEY=VALUE", help="override a config field, e.g. grpo.steps=50")
    return with_cache_dir(p)


class CacheDir(argparse.Action):
    """``--cache-dir DIR``: sets ``$AUTAGENT_CACHE_DIR`` for this command (and the processes it starts), so
    every ``.cache/...`` default resolves under DIR (:mod:`autagent.data.user_cache`)."""

    def __call__(self, parser, namespace, values, option_string=None):
        from ..data.user_cache import ENV

        os.environ[ENV] = os.path.abspath(os.path.expanduser(values))
        setattr(namespace, self.dest, os.environ[ENV])


def with_cache_dir(p):
    p.add_argument(
        "--cache-dir",
        action=CacheDir,
        metavar="DIR",
        help="the caches' folder (tool records, answers, the cascade's model; default $AUTAGENT_CACHE_DIR, else "
        "$XDG_CACHE_HOME/autagent, else ~/.cache/autagent): the same from every folder",
    )
    return p


def with_query(p, required: bool):
    p.add_argument("--plugin", required=True, metavar="DIR", help="a plugin folder (make train writes one)")
    p.add_argument("--audio", required=required, metavar="CLIP", help="the clip: wav, flac, mp3, ogg ...")
    p.add_argument("--question", required=required, help="the question asked about the clip")
    p.add_argument(
        "--profile",
        choices=["embedded", "cluster"],
        help="the tools' backends: embedded (offline, CPU) or cluster (the paper's); default the plugin's",
    )
    return p


def with_dial(p):
    p.add_argument(
        "--tools",
        type=int,
        metavar="K",
        dest="dial_tools",
        help="the dial: call exactly the plugin's K most probable tools per query (a point of the eval's cost "
        "curve; default: the plugin's certified point, else its threshold)",
    )
    p.add_argument(
        "--max-tools",
        type=int,
        metavar="K",
        help="the dial: call at most K of the tools the plugin's threshold calls, the most probable first",
    )
    p.add_argument(
        "--uncertified",
        action="store_true",
        help="use the plugin's trained threshold even where autagent adapt --certify gave it a certified point",
    )
    p.add_argument(
        "--latency-budget-ms",
        type=float,
        metavar="MS",
        help="the dial: call tools, most probable first, while their seconds measured at export fit in MS",
    )
    return p


def with_pin(p):
    p.add_argument("--plugin-sha256", metavar="HEX", help="refuse the plugin unless its content hash is HEX")
    return p
