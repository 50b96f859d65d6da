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

Usage: .venv/bin/python scripts/mutate.py [--only rewards/scoring.py] [--keep DIR]
Prints each module's killed / survived counts and every survivor (file:line, before -> after).
"""

from __future__ import annotations

import argparse
import ast
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TARGETS = {
    "rewards/__init__.py": ["tests/test_scoring_rewards.py"],
    "rewards/scoring.py": ["tests/test_scoring_rewards.py"],
    "autagent/policies/grpo.py": ["tests/test_grpo.py"],
    "autagent/plugin/trust.py": ["tests/test_plugin.py"],
}
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


def run_tests(work: Path, tests: list[str], timeout: float) -> bool:
    """True when the tests pass (the mutant survived)."""
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONDONTWRITEBYTECODE": "1"}
    command = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-m", "not slow", *tests]
    try:
        out = subprocess.run(command, cwd=work, env=env, capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired:
        return False  # a mutant that hangs the tests is caught
    return out.returncode == 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", help="one target module (a path in TARGETS)")
    parser.add_argument("--keep", help="the working copy's folder (default: a temporary one)")
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per test run")
    args = parser.parse_args()
    work = Path(args.keep or tempfile.mkdtemp(prefix="autagent-mutate-")) / "project"
    shutil.rmtree(work, ignore_errors=True)
    shutil.copytree(ROOT, work, ignore=top_level_outputs, symlinks=True)
    if (ROOT / ".cache").exists() and not (work / ".cache").exists():
        (work / ".cache").symlink_to(ROOT / ".cache")  # reuse the persistent test fixtures
    targets = {k: v for k, v in TARGETS.items() if not args.only or k == args.only}
    totals, survivors = {}, []
    for module, tests in targets.items():
        path = work / module
        original = path.read_text()
        count = len(mutation_points(ast.parse(original)))
        if not run_tests(work, tests, args.timeout):
            print(f"{module}: its tests fail without any mutation; fix them first", file=sys.stderr)
            return 2
        killed = 0
        started = time.perf_counter()
        for index in range(count):
            source, line, what = mutant_source(original, index)
            path.write_text(source)
            if run_tests(work, tests, args.timeout):
                survivors.append(f"{module}:{line}: {what}")
            else:
                killed += 1
        path.write_text(original)
        totals[module] = (killed, count - killed)
        print(
            f"{module}: {count} mutants, {killed} killed, {count - killed} survived "
            f"({time.perf_counter() - started:.0f} s)",
            flush=True,
        )
    print("\nsurvivors:" if survivors else "\nno survivor")
    for survivor in survivors:
        print("  " + survivor)
    return 0


if __name__ == "__main__":
    sys.exit(main())
