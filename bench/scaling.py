#!/usr/bin/env python
"""Selection cost as the tool library grows (prints figures; not a test).

Registers 6, 12, 24 and 60 tools (cheap stand-ins with distinct descriptions) and measures, each as
a ratio to 6 tools, in one run:

* router selection latency per query (question, choices and clip features memoised, as in a
  served plugin), for both scorers: ``per_tool`` (its output layer grows with the library) and
  ``tool_conditioned`` (one scorer over tool descriptions: the tool side is computed once, then a
  query costs the hidden layer and a dot product per tool), and ``make train``'s router, an ensemble
  of three ``factored`` ones (two small MLPs each; timed at each size as if trained with every
  tool), and the same router trained with the paper's six with the rest added after training,
  scored by the plugin's zero-shot head (a cosine per tool, its standardisers computed once);
* the LM agent prompt's length in tokens (MiniLM's WordPiece tokenizer as the counter): this one
  grows with the library, since every tool's description is in the prompt;
* Tools-with-Descriptions latency per query (descriptions are embedded once).

Usage: .venv/bin/python bench/scaling.py [--queries N]
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time
from pathlib import Path
from types import SimpleNamespace

os.environ.setdefault("OMP_NUM_THREADS", "1")
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

SIZES = (6, 12, 24, 60)
WHAT = (
    "loudness",
    "pitch range",
    "speaking rate",
    "key",
    "language",
    "gender",
    "reverberation",
    "noise level",
    "instrument family",
    "genre",
    "onset density",
    "vowel quality",
    "laughter",
    "applause",
    "silence share",
)


def stand_in(k: int):
    from tools.base import Backend, ToolSpec, package_version

    return ToolSpec(
        id=f"standin_{k}",
        description=f"Estimates the {WHAT[k % len(WHAT)]} of the clip (stand-in number {k}).",
        backends={
            "embedded": Backend(
                name="standin",
                library_version=package_version("numpy"),
                sample_rate=16000,
                load=lambda s: None,
                infer=lambda m, a, s: {"value": 0},
            )
        },
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--queries", type=int, default=200)
    args = parser.parse_args()

    import numpy as np
    import torch

    from autagent.data.sample import Sample
    from autagent.policies.baselines import DescriptionSelector
    from autagent.policies.lm.prompt import agent_prompt
    from autagent.policies.router.ensemble import build
    from autagent.policies.router.features import Featurizer
    from autagent.policies.router.model import Router, RouterConfig
    from autagent.policies.router.plugin import select_with_head
    from autagent.policies.router.zero_shot import DescriptionHead
    from autagent.reasoners.encoders import text_encoder
    from tools import PAPER_TOOLS
    from tools.registry import register

    torch.set_num_threads(1)
    for k in range(60):
        register(stand_in(k), "bench")
    extra = [f"standin_{k}" for k in range(60)]
    featurizer = Featurizer(RouterConfig(inputs=["question", "choices"]))
    rng = np.random.default_rng(0)
    questions = [f"Question number {i}: what is heard at {rng.integers(1, 9)} seconds?" for i in range(args.queries)]
    queries = [
        Sample(id=str(i), audio="", question=q, choices=("a low hum", "a high whistle"), answer="")
        for i, q in enumerate(questions)
    ]
    features = featurizer.of_samples(queries)  # memoised once, as a served plugin's encoders are
    profile = torch.from_numpy(rng.standard_normal((len(queries), 1044)).astype(np.float32))
    features = torch.cat([features, profile], dim=1)
    tokenizer = text_encoder(None).tokenizer
    from tools import get_tool

    def latency_of(router) -> float:
        router.select(features[:2])  # warm
        latency = []
        for i in range(len(queries)):
            started = time.perf_counter()
            router.select(features[i : i + 1])
            latency.append(time.perf_counter() - started)
        return statistics.median(latency)

    rows = []
    columns = featurizer.columns | {"audio": (featurizer.dim, featurizer.dim + 1044)}
    for size in SIZES:
        tool_ids = tuple(PAPER_TOOLS) + tuple(extra[: size - 6])
        per_tool = latency_of(Router(features.shape[1], RouterConfig(), len(tool_ids)).eval())
        descriptions = featurizer.tool_descriptions([get_tool(t).description for t in tool_ids])
        config = RouterConfig(scorer="tool_conditioned")
        conditioned = latency_of(Router(features.shape[1], config, len(tool_ids), descriptions, columns).eval())
        default = build(features.shape[1], RouterConfig(scorer="factored", ensemble=3), len(tool_ids), None, columns)
        ensemble = latency_of(default.eval())  # make train's router: three factored routers
        six = build(features.shape[1], RouterConfig(scorer="factored", ensemble=3), 6, None, columns).eval()
        head = DescriptionHead(columns, descriptions.shape[1])
        head.weight.fill_(0.5)  # any weights: the cost is the same
        head.prepare(descriptions)
        added = latency_of(
            SimpleNamespace(select=functools.partial(select_with_head, six, head, descriptions=descriptions))
        )
        tokens = len(tokenizer(agent_prompt(questions[0], tool_ids), verbose=False)["input_ids"])
        selector = DescriptionSelector(tool_ids)
        desc = []
        for sample in queries:
            started = time.perf_counter()
            selector.select(sample)
            desc.append(time.perf_counter() - started)
        rows.append((size, per_tool, conditioned, ensemble, added, tokens, statistics.median(desc)))
    base = rows[0]
    print(
        f"{'tools':>6} {'per_tool ms':>12} {'x6':>6} {'conditioned ms':>15} {'x6':>6} {'factored x3 ms':>15} "
        f"{'x6':>6} {'6 + added ms':>13} {'x6':>6} {'LM prompt tokens':>17} {'x6':>6} {'descriptions ms':>16} {'x6':>6}"
    )
    for size, lat, cond, ens, add, tokens, desc in rows:
        print(
            f"{size:6d} {1000 * lat:12.3f} {lat / base[1]:6.2f} {1000 * cond:15.3f} {cond / base[2]:6.2f} "
            f"{1000 * ens:15.3f} {ens / base[3]:6.2f} {1000 * add:13.3f} {add / base[4]:6.2f} {tokens:17d} "
            f"{tokens / base[5]:6.2f} {1000 * desc:16.3f} {desc / base[6]:6.2f}"
        )


if __name__ == "__main__":
    main()
