#!/usr/bin/env python
"""Mutation testing of the core modules: does the suite catch a small change to the code? (``make mutate``)

For each target module, every small mutation of its syntax tree is made in turn, in a copy of the
project: a comparison flipped (``<`` and ``<=``, ``==`` and ``!=``, ``in`` and ``not in``), an
arithmetic or boolean operator swapped (``+`` and ``-``, ``*`` and ``/``, ``and`` and ``or``), a
``not`` or a unary minus dropped, a number moved by one, ``True`` and ``False`` swapped, ``min`` and
``max`` (and ``torch.minimum``/``maximum``, ``any``/``all``) exchanged, a returned value replaced by
``None``.  The module's tests run against each mutant; a mutant whose tests still pass *survived*:
either a test is missing, or the mutation changes nothing that matters (an equivalent mutant).
Docstrings, strings, raise statements and type annotations are left alone.

Two sets: ``core`` (``make mutate``: the rewards, GRPO, plugin trust) and ``guards`` (``make
mutate-guards``: what the README's newest claims stand on: the answer table's budget, cross-validation,
the exact objective, the address checks of remote audio, the service's limits and the plugin's
signatures).  Each module runs the tests that exercise it directly (fast ones: a mutant costs one run
of them; trust.py's include test_plugin.py, which exports a small plugin first).

Every mutant's tests run in a process forked from one that has already imported the heavy third-party
packages (torch, numpy, pytest...): no project module is imported before the fork, so each mutant is
imported fresh, and a mutant costs its tests, not a Python start with torch (about 25 s on a busy
2-core machine).  ``--timeout`` bounds each run; a mutant that hangs its tests is counted killed.

Usage: .venv/bin/python scripts/mutate.py [--set guards] [--only MODULE] [--timeout 60] [--record FILE]
Prints each module's killed / survived counts and every survivor (file:line, before -> after);
``--record`` writes the same as JSON (per module: mutants, killed, survivors, seconds, and the commit and
time of the pass; with ``--only``, into an existing record of the set, the other modules' entries kept).
"""

from __future__ import annotations

import argparse
import ast
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ROUTER_FAST = [  # tests/test_adapt.py without the ones that train a plugin on the tiny benchmark first
    "tests/test_adapt.py",
    "-k",
    "not warm_started and not autagent_adapt and not price_changes_what_is_learned",
]
SETS = {
    "core": {
        "rewards/__init__.py": ["tests/test_scoring_rewards.py"],
        "rewards/scoring.py": ["tests/test_scoring_rewards.py"],
        "autagent/policies/grpo.py": ["tests/test_grpo.py"],
        "autagent/plugin/trust.py": ["tests/test_plugin.py"],
    },
    "guards": {
        "autagent/policies/router/crossval.py": [
            "tests/test_guards_router.py",
            "tests/test_guards_table.py",
            *ROUTER_FAST,
        ],
        "autagent/policies/router/exact.py": ["tests/test_guards_router.py", *ROUTER_FAST],
        "autagent/policies/router/table.py": [
            "tests/test_guards_router.py",
            "tests/test_guards_table.py",
            "tests/test_soft_reward.py",  # the soft reward's probabilities come from the table's choice scores
            *ROUTER_FAST,
        ],
        "autagent/serve/remote.py": ["tests/test_guards_remote.py"],
        "autagent/serve/limits.py": ["tests/test_guards_limits.py"],
        # the plugin's signatures and confinement (issue 62: the verifier's key decides the algorithm)
        "autagent/plugin/trust.py": ["tests/test_trust_kinds.py", "tests/test_plugin.py"],
    },
}
TARGETS = SETS["core"]  # what `make mutate` has always covered
PRELOAD = ("numpy", "torch", "pytest", "httpx", "soundfile", "yaml", "scipy", "sklearn", "idna")
"""Imported once, before the fork, with pytest's plugins: third-party only (a project module imported here
would not be mutated)."""
COMPARE = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
}
BINARY = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Pow: ast.Mult,
    ast.Mod: ast.FloorDiv,
    ast.LShift: ast.RShift,
    ast.BitOr: ast.BitAnd,
}
CALLS = {
    "min": "max",
    "max": "min",
    "minimum": "maximum",
    "maximum": "minimum",
    "any": "all",
    "all": "any",
    "clamp_min": "clamp_max",
}


def mutation_points(tree: ast.AST) -> list[tuple[ast.AST, str]]:
    """Every node a mutation applies to, with a description (skipping docstrings and raise messages)."""
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef, ast.Module, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                skip.update(id(n) for n in ast.walk(first))
        if isinstance(node, ast.Raise):
            skip.update(id(n) for n in ast.walk(node))
        if isinstance(node, ast.JoinedStr):
            skip.update(id(n) for n in ast.walk(node))
        annotations = [getattr(node, "returns", None), getattr(node, "annotation", None)]
        for annotation in annotations:  # type hints are not code (they are strings under `from __future__`)
            if annotation is not None:
                skip.update(id(n) for n in ast.walk(annotation))
    points = []
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Compare) and type(node.ops[0]) in COMPARE:
            points.append((node, f"{type(node.ops[0]).__name__} -> {COMPARE[type(node.ops[0])].__name__}"))
        elif isinstance(node, ast.BinOp) and type(node.op) in BINARY:
            points.append((node, f"{type(node.op).__name__} -> {BINARY[type(node.op)].__name__}"))
        elif isinstance(node, ast.BoolOp):
            points.append((node, f"{type(node.op).__name__} -> {'Or' if isinstance(node.op, ast.And) else 'And'}"))
        elif isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.Not, ast.USub)):
            points.append((node, f"drop {type(node.op).__name__}"))
        elif isinstance(node, ast.Constant) and type(node.value) in (int, float, bool):
            points.append((node, f"{node.value!r} -> {mutated_constant(node.value)!r}"))
        elif isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", None)
            if name in CALLS:
                points.append((node, f"{name} -> {CALLS[name]}"))
        elif (
            isinstance(node, ast.Return)
            and node.value is not None
            and not (isinstance(node.value, ast.Constant) and node.value.value is None)
        ):
            points.append((node, "return None"))
    return points


def mutated_constant(value):
    if isinstance(value, bool):
        return not value
    return value + 1 if value != 1 else 0 if isinstance(value, int) else value + 1


def mutate(node: ast.AST) -> None:
    """Apply this node's mutation in place."""
    if isinstance(node, ast.Compare):
        node.ops[0] = COMPARE[type(node.ops[0])]()
    elif isinstance(node, ast.BinOp):
        node.op = BINARY[type(node.op)]()
    elif isinstance(node, ast.BoolOp):
        node.op = ast.Or() if isinstance(node.op, ast.And) else ast.And()
    elif isinstance(node, ast.Constant):
        node.value = mutated_constant(node.value)
    elif isinstance(node, ast.Call):
        if isinstance(node.func, ast.Attribute):
            node.func.attr = CALLS[node.func.attr]
        else:
            node.func.id = CALLS[node.func.id]
    elif isinstance(node, ast.Return):
        node.value = ast.Constant(None)


class DropUnary(ast.NodeTransformer):
    def __init__(self, target):
        self.target = target

    def visit_UnaryOp(self, node):  # noqa: N802 - ast API
        self.generic_visit(node)
        return node.operand if node is self.target else node


def mutant_source(source: str, index: int) -> tuple[str, int, str]:
    tree = ast.parse(source)
    node, what = mutation_points(tree)[index]
    line = getattr(node, "lineno", 0)
    if isinstance(node, ast.UnaryOp):
        tree = DropUnary(node).visit(tree)
    else:
        mutate(node)
    return ast.unparse(ast.fix_missing_locations(tree)), line, what


def top_level_outputs(folder: str, names: list[str]) -> list[str]:
    """What the working copy leaves out: the project's own outputs and environment, at its top level only
    (``autagent/data`` is code), and byte-code anywhere."""
    top = {".venv", ".git", ".cache", "runs", "data", "wandb"} if Path(folder) == ROOT else set()
    return [n for n in names if n in top or n == "__pycache__"]


WORKER = r"""
import importlib, json, os, signal, sys, time
for name in sys.argv[1].split(","):
    try:
        importlib.import_module(name)
    except ImportError:
        pass
from importlib.metadata import entry_points
for plugin in entry_points(group="pytest11"):  # pytest's plugins (hypothesis, schemathesis...): 20 s each run
    try:
        importlib.import_module(plugin.value.split(":")[0])
    except Exception:
        pass
print("ready", flush=True)
for line in sys.stdin:
    job = json.loads(line)
    pid = os.fork()
    if pid == 0:  # the mutant's run: a fresh import of every project module
        os.setpgid(0, 0)  # its own group: a timeout kills what it started too
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1), os.dup2(null, 2)
        import pytest
        os._exit(pytest.main(job["args"]))
    deadline, status = time.monotonic() + job["timeout"], None
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        time.sleep(0.05)
    else:
        os.killpg(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        status = None
    code = os.waitstatus_to_exitcode(status) if status is not None else None
    print(json.dumps({"code": code}), flush=True)
"""


class Runner:
    """A process that imported :data:`PRELOAD` once and forks one test run per mutant."""

    def __init__(self, work: Path):
        env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": str(work)}
        self.process = subprocess.Popen(
            [sys.executable, "-c", WORKER, ",".join(PRELOAD)],
            cwd=work,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
        )
        assert self.process.stdout.readline().strip() == "ready"

    def passes(self, tests: list[str], timeout: float) -> bool:
        """True when the tests pass (the mutant survived); a run past ``timeout`` is a kill."""
        args = ["-x", "-q", "-p", "no:cacheprovider", "-m", "not slow", *tests]
        self.process.stdin.write(json.dumps({"args": args, "timeout": timeout}) + "\n")
        self.process.stdin.flush()
        return json.loads(self.process.stdout.readline())["code"] == 0

    def close(self) -> None:
        self.process.stdin.close()
        self.process.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="core", choices=sorted(SETS), help="which modules (default: core)")
    parser.add_argument("--only", help="target modules of the set, comma-separated (default: all of them)")
    parser.add_argument("--keep", help="the working copy's folder (default: a temporary one)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per test run")
    parser.add_argument("--record", help="write the counts and survivors here as JSON")
    args = parser.parse_args()
    targets = {k: v for k, v in SETS[args.set].items() if not args.only or k in args.only.split(",")}
    if not targets:
        print(f"--only {args.only}: not a module of the {args.set} set: {', '.join(SETS[args.set])}", file=sys.stderr)
        return 2
    # A copy of the project (3.4 GB with its test fixtures' links resolved): removed at the end unless --keep
    # names where it lives, so a pass leaves nothing behind in the temporary folder, stopped or not.
    scratch = None if args.keep else tempfile.mkdtemp(prefix="autagent-mutate-")
    try:
        return run_pass(args, targets, Path(args.keep or scratch) / "project")
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def run_pass(args, targets: dict, work: Path) -> int:
    """Every mutant of ``targets`` tested in the working copy ``work`` (made here); prints and records the counts."""
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(ROOT, work, ignore=top_level_outputs, symlinks=True)
    if (ROOT / ".cache").exists() and not (work / ".cache").exists():
        (work / ".cache").symlink_to((ROOT / ".cache").resolve())  # reuse the persistent test fixtures
    runner = Runner(work)
    began, modules, survivors = time.perf_counter(), {}, []
    try:
        for module, tests in targets.items():
            path = work / module
            original = path.read_text()
            count = len(mutation_points(ast.parse(original)))
            if not runner.passes(tests, args.timeout * 3):
                print(f"{module}: its tests fail without any mutation; fix them first", file=sys.stderr)
                return 2
            killed, left = 0, []
            started = time.perf_counter()
            for index in range(count):
                source, line, what = mutant_source(original, index)
                path.write_text(source)
                if runner.passes(tests, args.timeout):
                    left.append({"line": line, "mutation": what})
                    survivors.append(f"{module}:{line}: {what}")
                else:
                    killed += 1
            path.write_text(original)
            seconds = time.perf_counter() - started
            modules[module] = {"mutants": count, "killed": killed, "survivors": left, "seconds": round(seconds)}
            print(
                f"{module}: {count} mutants, {killed} killed, {count - killed} survived ({seconds:.0f} s)", flush=True
            )
    finally:
        runner.close()
    print("\nsurvivors:" if survivors else "\nno survivor")
    for survivor in survivors:
        print("  " + survivor)
    if args.record:
        commit, finished = _commit(), datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
        for entry in modules.values():  # a record merged from several --only passes says which pass each came from
            entry["commit"], entry["finished"] = commit, finished
        record = {
            "set": args.set,
            "commit": commit,
            "finished": finished,
            "timeout_s": args.timeout,
            "seconds": round(time.perf_counter() - began),
            "tests": {m: t for m, t in targets.items()},
            "modules": modules,
        }
        path = Path(args.record)
        if args.only and path.exists():  # a part of the set: the other modules' counts are kept
            before = json.loads(path.read_text())
            if before.get("set") == args.set:  # the modules not re-run keep the pass they came from
                kept = {"commit": before.get("commit"), "finished": before.get("finished")}
                record["modules"] = {m: kept | e for m, e in before["modules"].items()} | modules
                record["tests"] = before["tests"] | record["tests"]
                record["seconds"] += before["seconds"]
        path.write_text(json.dumps(record, indent=1) + "\n")
    return 0


def _commit() -> str | None:
    out = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    dirty = subprocess.run(
        ["git", "-C", str(ROOT), "status", "--porcelain", "--", "autagent", "tests", "rewards"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return (out.stdout.strip() + ("+changes" if dirty else "")) if out.returncode == 0 else None


if __name__ == "__main__":
    sys.exit(main())
