"""The model card every exported plugin carries (``README.md``): the Hugging Face Hub's YAML front
matter (library, tags, the tools with their backends and versions, the encoders, a digest of the
training config), what the plugin is, the run's evaluation table once there is one, and how to use it
with ``autagent serve`` and the Python API.  The manifest covers it with a digest like any other file.
"""

from __future__ import annotations

import hashlib
import json

import yaml


def config_digest(training_config: dict) -> str:
    return hashlib.sha256(json.dumps(training_config, sort_keys=True, default=str).encode()).hexdigest()


SMALL_SAMPLE = 100
"""Under this many questions the card says the figures are mostly noise (as report.md does)."""


def evaluation_table(metrics: dict | None) -> list[str]:
    """The run's methods on its test split, under the names its report uses: accuracy in % with its 95 %
    Wilson interval, average tools; a warning under :data:`SMALL_SAMPLE` questions; or a line saying
    there is no evaluation."""
    if not metrics or not metrics.get("methods"):
        return ["Not evaluated yet: `autagent eval --plugin <this folder> --dataset <file>` measures it."]
    n, labels = metrics.get("n", 0), metrics.get("labels") or {}
    reasoner = str(metrics.get("reasoner", "?")).split(":")[0]
    lines = [f"{metrics.get('dataset', 'test')} ({n} questions), reasoner `{reasoner}`:", ""]
    if isinstance(n, int) and n < SMALL_SAMPLE:
        lines += [f"**Small sample ({n} < {SMALL_SAMPLE} questions): differences inside the intervals are noise.**", ""]
    lines += ["| method | accuracy (%) | 95 % interval | avg tools |", "|---|---|---|---|"]
    for name, method in metrics["methods"].items():
        low, high = method.get("interval_95") or (None, None)
        interval = "–" if low is None else f"{100 * low:.1f}–{100 * high:.1f}"
        lines.append(
            f"| {labels.get(name, name)} | {100 * method['accuracy']:.1f} | {interval} | {method['avg_tools']:.2f} |"
        )
    return lines


def training_lines(manifest: dict) -> list[str]:
    """What the plugin was trained against and what that cost, when the run recorded it: the reasoner's
    fingerprint, the plugin it started from, the answers spent of the budget, the price, and the
    cross-validated choice of settings."""
    training = (manifest.get("metrics") or {}).get("training") or {}
    if not training.get("reasoner"):
        return []
    lines = ["## Training", "", f"- reasoner: `{training['reasoner']}`"]
    if training.get("init_from"):
        lines.append(
            f"- started from the plugin `{training['init_from']['path']}` "
            f"(content hash `{training['init_from']['content_hash']}`): adapted to this reasoner"
        )
    table = training.get("table")
    if table:
        lines.append(
            f"- answers asked: {table['answers_spent']} (budget: {table['budget'] or 'no cap'}); answer table of "
            f"{table['queries']} training queries x {table['subsets_per_query']} subsets"
        )
    lines.append(
        f"- price of a tool call: {training.get('price')} of an answer (trained at {training.get('training_price')})"
    )
    found = training.get("crossval")
    if found:
        chosen = next((c for c in found["candidates"] if c["candidate"] == found["chosen"]), None)
        if chosen is not None:
            lines.append(
                f"- settings chosen by {found['folds']}-fold cross-validation on the training queries "
                f"({found['rule']}): {found['chosen']}; held-out accuracy {100 * chosen['accuracy']:.1f} %, "
                f"{chosen['avg_tools']:.2f} tools, reward {chosen['reward']:+.3f} ± {chosen['reward_se']:.3f}"
            )
    return [*lines, ""]


def certificate_lines(certificate: dict) -> list[str]:
    """What the command line and the model card say of an ``autagent adapt --certify`` certificate."""
    c = certificate
    level = f"{100 * c['confidence']:.0f} % one-sided, {c['n']} held-out queries"
    if not c.get("certified"):
        return [
            f"certificate: no point cheaper than All-Tools is within {100 * c['eps']:.1f} points of it ({level}): "
            "the plugin calls every tool"
        ]
    spent, full = c.get("tool_seconds") or {}, c.get("all_tools_seconds") or {}
    share = (
        f"; {100 * spent['serial'] / full['serial']:.0f} % of All-Tools' tool-seconds"
        if spent and full.get("serial")
        else ""
    )
    return [
        f"certificate: {c['label']} ({c['avg_tools']:.2f} tools a query) loses at most "
        f"{100 * c['eps']:.1f} points against All-Tools ({level}; observed {100 * c['difference']:+.1f}, "
        f"lower bound {100 * c['lower_bound']:+.1f}{share}); serve, select and eval use it unless told otherwise"
    ]


def certificate_section(certificate: dict | None) -> list[str]:
    """The model card's section on the certified operating point (none without a certificate)."""
    if not certificate:
        return []
    return [
        "## Certified operating point",
        "",
        *certificate_lines(certificate),
        f"- reasoner: `{certificate['reasoner']}`",
        "",
    ]


def model_card(manifest: dict, evaluation: dict | None = None) -> str:
    """The README.md of a plugin whose manifest (without files and hash) is ``manifest``."""
    config = manifest.get("training_config") or {}
    policy = manifest.get("policy", "?")
    scorer = (manifest.get("policy_config") or {}).get("scorer")
    front = {
        "library_name": "autagent",
        "tags": ["audio", "audio-question-answering", "tool-selection", "grpo", "autagent", f"autagent-{policy}"],
        "autagent": {
            "format_version": manifest.get("format_version"),
            "policy": policy + (f" ({scorer})" if scorer else ""),
            "tools": [{k: t.get(k) for k in ("id", "backend", "version")} for t in manifest.get("tools", [])],
            "tools_profile": manifest.get("tools_profile"),
            "scores_new_tools": bool(manifest.get("scores_new_tools")),
            "encoders": manifest.get("encoders"),
            "training_config_sha256": config_digest(config),
            "run": config.get("name"),
            "seed": config.get("seed"),
        },
    }
    tools = ", ".join(f"`{t['id']}`" for t in manifest.get("tools", []))
    lines = [
        "---",
        yaml.safe_dump(front, sort_keys=False, allow_unicode=True).rstrip(),
        "---",
        "",
        f"# AuTAgent plugin: {config.get('name', 'a trained tool-selection policy')}",
        "",
        f"A {policy} policy trained with GRPO to choose, for each audio question, which acoustic tools to call "
        f"before a reasoner answers: {tools}. "
        + ("It also scores tools added later, from their descriptions. " if manifest.get("scores_new_tools") else "")
        + f"Reward: `{(config.get('reward') or {}).get('kind', '?')}`; trained against the "
        f"`{(config.get('reasoner') or {}).get('kind', '?')}` reasoner.",
        "",
        *training_lines(manifest),
        *certificate_section(manifest.get("certificate")),
        "## Evaluation",
        "",
        *evaluation_table(evaluation),
        "",
        "## Use it",
        "",
        "In front of any OpenAI-compatible server (vLLM serving Qwen2-Audio, say):",
        "",
        "```bash",
        "autagent serve --plugin <this folder> --plugin-sha256 <content hash> \\",
        "    --upstream http://localhost:8000/v1 --port 8080",
        "```",
        "",
        "From Python, with any OpenAI-compatible client:",
        "",
        "```python",
        "from autagent import Plugin",
        "",
        'plugin = Plugin.load("<this folder>", sha256="<content hash>")',
        "messages = plugin.augment(messages)  # the chosen tools' records added to the last user message",
        "```",
        "",
        "`autagent plugin verify <this folder>` checks every file, this card included, against the manifest.",
        "",
    ]
    return "\n".join(lines)
