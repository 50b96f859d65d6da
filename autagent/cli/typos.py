"""Suggestions ("did you mean") for the command line: Python 3.11's argparse has no ``suggest_on_error``
(3.14 does), and a typo of a required flag (``--plugn``) was reported as the required flag missing, the
typo never named."""

from __future__ import annotations

import argparse
import difflib
import re


def did_you_mean(message: str, given: list[str], parser: argparse.ArgumentParser) -> str:
    """`` (--plugn: did you mean --plugin?)`` for each flag in ``given`` that ``parser`` does not know and one
    it knows resembles; for an invalid choice (a subcommand), the choice it resembles; else ``""``."""
    hints = []
    choice = re.search(r"invalid choice: '([^']*)'", message)
    if choice:
        known = [c for a in parser._actions if a.choices and choice.group(1) not in a.choices for c in a.choices]
        close = difflib.get_close_matches(choice.group(1), [str(c) for c in known], n=1, cutoff=0.6)
        hints += [f"{choice.group(1)}: did you mean {close[0]}?"] if close else []
    parser = _chosen(parser, given)  # "unrecognized arguments" is the top parser's error, about a subcommand's
    flags = list(parser._option_string_actions)
    for token in given:
        if token == "--":
            break
        flag = token.split("=", 1)[0]
        if not flag.startswith("-") or flag in flags or _is_number(flag):
            continue
        close = difflib.get_close_matches(flag, flags, n=1, cutoff=0.6)
        if close:
            hints.append(f"{flag}: did you mean {close[0]}?")
    return f" ({'; '.join(dict.fromkeys(hints))})" if hints else ""


def _chosen(parser: argparse.ArgumentParser, given: list[str]) -> argparse.ArgumentParser:
    """The (sub)parser that ``given`` ends in: ``tools run ...`` -> ``tools``' ``run``."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for i, token in enumerate(given):
                if token in action.choices:
                    return _chosen(action.choices[token], given[i + 1 :])
    return parser


def _is_number(token: str) -> bool:
    try:
        float(token)
    except ValueError:
        return False
    return True
