"""The tiny embedded benchmark the learning tests run on, with all seven tools' records, built once per
machine under ``.cache/tests/`` (``make setup`` builds it, so a fresh clone's ``make test`` does not pay
for it; ``python tests/helpers/fixtures.py [SEED ...]`` builds it, or other draws of it, by hand)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import sys
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[2] / ".cache" / "tests"
"""Persistent, content-keyed test fixtures: a fresh clone computes them once, later runs reuse them."""
SEVEN = ["asr", "emotion", "chords", "tempo", "pitch", "sound_events", "speakers"]
SEED = 3
"""The fixture's draw (``data.benchmark.seed``); the learning tests were checked on others too."""


def generator_digest(config) -> str:
    """What the embedded benchmark's output is a function of: the generator's and the synthesiser's
    code and the config (a change to either makes a new fixture, never a stale one)."""
    import autagent.data.generator as generator
    from autagent.data import synth

    digest = hashlib.sha256(json.dumps(dataclasses.asdict(config), sort_keys=True).encode())
    for path in sorted(Path(generator.__file__).parent.glob("*.py")) + [Path(synth.__file__)]:
        digest.update(path.name.encode() + path.read_bytes())
    return digest.hexdigest()[:16]


def tiny_bench(seed: int = SEED) -> dict:
    """40 training items and two test items of every kind (both phrasing pools), drawn with ``seed``, and
    every record of the seven tools (from the content-addressed tool cache under ``.cache/tests/tools``)."""
    from autagent.data import load_dataset
    from autagent.data.generator import KINDS, EmbeddedBenchmarkConfig, generate
    from tools.pool import PoolConfig, ToolPool

    config = EmbeddedBenchmarkConfig(root="", seed=seed, sizes={"train": 40, "test": 2 * len(KINDS)})
    root = FIXTURES / f"bench-{generator_digest(config)}"
    if not (root / "data" / ".complete").exists():
        shutil.rmtree(root, ignore_errors=True)
        generate(dataclasses.replace(config, root=str(root / "data")), progress=False)
        (root / "data" / ".complete").write_text("generated\n")
    paths = {split: root / "data" / f"{split}.json" for split in ("train", "test")}
    splits = {name: load_dataset(path) for name, path in paths.items()}
    cache = FIXTURES / "tools"
    pool = ToolPool(PoolConfig(executor="local", cache_dir=str(cache), enabled=SEVEN))
    samples = splits["train"] + splits["test"]
    records = dict(zip([s.id for s in samples], pool.run_many([s.audio for s in samples])))
    pool.shutdown()
    return {"root": root, "paths": paths, "cache": cache, **splits, "records": records, "tools": tuple(SEVEN)}


if __name__ == "__main__":
    for seed in [int(s) for s in sys.argv[1:]] or [SEED]:
        built = tiny_bench(seed)
        print(f"tiny benchmark, seed {seed}: {built['root']}")
