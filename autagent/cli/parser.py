"""``autagent``'s argument parser: one function per group of subcommands, each naming the function that
runs it (:mod:`.commands`, :mod:`.plugins`, :mod:`.serving`), with the options they share (:mod:`.flags`)."""

from __future__ import annotations

import argparse

from .commands import (
    cmd_adapt,
    cmd_data_generate,
    cmd_data_validate,
    cmd_eval,
    cmd_plan,
    cmd_report,
    cmd_sweep,
    cmd_tools_list,
    cmd_tools_precompute,
    cmd_tools_run,
    cmd_train,
)
from .flags import CHOICES_HELP, Parser, with_cache_dir, with_config, with_dial, with_pin, with_query
from .plugins import (
    cmd_answer,
    cmd_check_selection,
    cmd_plugin_backoff,
    cmd_plugin_sign,
    cmd_plugin_verify,
    cmd_select,
)
from .serving import cmd_mcp, cmd_serve, cmd_upstream


def add_tools(sub) -> None:
    """``tools run|list|precompute``."""
    tools = sub.add_parser("tools", help="the acoustic tools").add_subparsers(dest="tools_command", required=True)
    run = with_config(tools.add_parser("run", help="print the JSON records of tools on one clip"))
    run.add_argument("audio")
    run.add_argument("--tools", help="comma-separated tool ids (default: the enabled ones)")
    run.add_argument("--profile", choices=["embedded", "cluster"])
    run.add_argument("--executor", choices=["ray", "local"])
    run.add_argument("--no-cache", action="store_true", help="compute afresh (a private cache for this call)")
    run.set_defaults(func=cmd_tools_run)
    lst = with_config(tools.add_parser("list", help="print the tool registry (JSON)"))
    lst.add_argument("--plugin", help="also say which tools a plugin has learned and which it scores zero-shot")
    lst.set_defaults(func=cmd_tools_list)
    pre = with_config(tools.add_parser("precompute", help="fill the tool cache for a dataset file"))
    pre.add_argument("manifest", help="MMAU/MMAR/AVQA file")
    pre.add_argument("--format", default="auto")
    pre.add_argument("--tools")
    pre.add_argument("--profile", choices=["embedded", "cluster"])
    pre.set_defaults(func=cmd_tools_precompute)


def add_data(sub) -> None:
    """``data generate|validate``."""
    data = sub.add_parser("data", help="datasets").add_subparsers(dest="data_command", required=True)
    gen = with_config(data.add_parser("generate", help="generate the embedded benchmark"))
    gen.add_argument("--root")
    gen.set_defaults(func=cmd_data_generate)
    val = data.add_parser(
        "validate",
        help="check a benchmark file as eval will read it: every row, its clip decoded, ids unique (JSON report)",
    )
    val.add_argument("file")
    val.add_argument("--format", default="auto", choices=["auto", "mmau", "mmar", "avqa"])
    val.add_argument("--audio-wording", action="store_true", help="AVQA: 'video' -> 'audio' in questions")
    val.add_argument("--allow-rejects", action="store_true", help="exit 0 when some rows are rejected")
    val.add_argument("--skip-audio", action="store_true", help="do not open the clips (rows and fields only)")
    val.add_argument(
        "--max-seconds", type=float, default=30.0, help="how much of each clip must decode (the tools' default)"
    )
    val.set_defaults(func=cmd_data_validate)


def add_training(sub) -> None:
    """``train``, ``adapt`` and ``eval``."""
    from ..recipes.certify import DEFAULT_EPS  # here, not at import: importing autagent.cli stays light

    train = with_config(sub.add_parser("train", help="the main job: train, evaluate, export the plugin"))
    train.add_argument("--resume", action="store_true", help="continue from the run's last checkpoint")
    train.add_argument("--force", action="store_true", help="start on CUDA even where the memory plan says no")
    train.set_defaults(func=cmd_train)

    ad = with_config(sub.add_parser("adapt", help="adapt a router plugin to the reasoner in front of it"))
    ad.add_argument("--plugin", required=True, help="the router plugin to start from")
    ad.add_argument(
        "--reasoner",
        choices=["embedded", "qwen2-audio", "openai", "cascade"],
        help="the reasoner to adapt to (--upstream URL: a served model, as openai)",
    )
    ad.add_argument(
        "--upstream",
        metavar="URL",
        help="adapt to the model an OpenAI-compatible server serves (…/v1, vLLM's say; asked once before any work)",
    )
    ad.add_argument("--model", metavar="NAME", help="with --upstream: the model name the server expects")
    ad.add_argument("--out", required=True, help="where the adapted plugin is written")
    ad.add_argument("--budget", type=int, help="distinct reasoner answers the adaptation may ask (cache hits free)")
    ad.add_argument("--tool-cost", type=float, help="your price of one tool call, in answers (default 0: accuracy)")
    ad.add_argument("--resume", action="store_true", help="continue a stopped adaptation (its answers are kept)")
    ad.add_argument(
        "--certify",
        type=float,
        metavar="EPS",
        default=DEFAULT_EPS,
        help="hold part of the budget's queries out of training and certify on them the cheapest operating point "
        f"that loses at most EPS (a fraction: {DEFAULT_EPS} is {100 * DEFAULT_EPS:.0f} points) against All-Tools, "
        f"95 %% one-sided (default {DEFAULT_EPS}: what the default budget can certify); serve and select use it",
    )
    ad.add_argument(
        "--no-certify", dest="certify", action="store_const", const=None, help="train on every query, certify nothing"
    )
    ad.set_defaults(func=cmd_adapt)

    ev = with_pin(with_config(sub.add_parser("eval", help="every baseline (and a plugin's policy) on a dataset")))
    ev.add_argument("--out", help="output directory (default runs/<name>/eval)")
    ev.add_argument("--dataset", help="an MMAU/MMAR/AVQA file to evaluate on")
    ev.add_argument("--reasoner", choices=["embedded", "qwen2-audio", "openai", "cascade"])
    ev.add_argument("--plugin", help="a trained plugin directory")
    with_dial(ev)
    ev.set_defaults(func=cmd_eval)


def add_queries(sub) -> None:
    """``select`` and ``answer``: a plugin on one clip (or a batch)."""
    sel = with_pin(
        sub.add_parser(
            "select",
            help="a plugin's tool choice for a clip and question (JSON; --explain: why, as a table)",
            description="Load a plugin and print the tools it calls for a clip and question, with the "
            "probability that decided each. --explain says which part decided each tool (the router, the "
            "back-off on wording unlike training, the zero-shot head for a tool added after training); "
            "--batch runs many clips in one load.",
        )
    )
    with_query(sel, required=False)
    sel.add_argument("--choices", nargs="+", metavar="CHOICE", help=CHOICES_HELP + " (optional: the router reads them)")
    sel.add_argument(
        "--batch",
        metavar="FILE|DIR",
        help="many clips in one load: a JSONL or JSON-list file of {audio, question, choices}, or a folder of "
        "clips asked --question; prints one JSON line per clip",
    )
    with_cache_dir(sel)
    sel.add_argument("--explain", action="store_true", help="per tool: who decided and with what probability")
    sel.add_argument("--json", action="store_true", help="with --explain: JSON instead of the table")
    with_dial(sel)
    sel.set_defaults(func=cmd_select)

    ans = with_pin(with_config(sub.add_parser("answer", help="select tools with a plugin, run them, ask a reasoner")))
    with_query(ans, required=True)
    ans.add_argument(
        "--choices", nargs="+", metavar="CHOICE", required=True, help=CHOICES_HELP + " (the reasoner picks one)"
    )
    ans.add_argument(
        "--reasoner",
        choices=["embedded", "qwen2-audio", "openai", "cascade"],
        help="who answers (default: the config's with --config; else cascade, Gemma 3 270M offline, where make "
        "setup installed it; else embedded, a simulator of the embedded benchmark)",
    )
    ans.set_defaults(func=cmd_answer)


def add_plugin(sub) -> None:
    """``plugin verify|sign|backoff`` and ``check-selection``."""
    plugin = sub.add_parser("plugin", help="check or sign a plugin").add_subparsers(
        dest="plugin_command", required=True
    )
    ver = with_config(
        plugin.add_parser("verify", help="every check a load makes, as a JSON report (its content_hash: the pin)")
    )
    ver.add_argument("directory")
    ver.add_argument("--sha256", help="the content hash it must have")
    ver.add_argument(
        "--key",
        help="the key decides the algorithm: an Ed25519 public key (PEM, DER or OpenSSH) verifies ed25519 "
        "signatures only; an HMAC secret (a file that is no key) verifies hmac-sha256 only "
        "(default: $AUTAGENT_PLUGIN_KEY)",
    )
    ver.add_argument(
        "--hash", action="store_true", help="print only the content hash (the JSON report if a check fails)"
    )
    ver.set_defaults(func=cmd_plugin_verify)
    sgn = plugin.add_parser(
        "sign", help="sign a plugin's content hash (ed25519 private key PEM, or an HMAC secret file)"
    )
    sgn.add_argument("directory")
    sgn.add_argument(
        "--key",
        required=True,
        help="an Ed25519 private key (PEM) signs ed25519; an HMAC secret (a file that is no key) signs "
        "hmac-sha256; a public key is refused",
    )
    sgn.set_defaults(func=cmd_plugin_sign)
    bko = with_config(plugin.add_parser("backoff", help="a copy of a router plugin with a fitted back-off"))
    bko.add_argument("directory")
    bko.add_argument("--out", required=True, help="the new plugin folder (must not exist)")
    bko.add_argument("--rule", choices=["vote", "fill"], help="how the zero-shot head speaks (default vote)")
    bko.add_argument("--calibration", help="labelled phrasings for the cut (JSONL; default the project's own)")
    bko.set_defaults(func=cmd_plugin_backoff)

    cs = sub.add_parser("check-selection", help="a plugin's tool choices on a hand-labelled question set (transfer)")
    cs.add_argument("--plugin", action="append", required=True, help="a plugin folder (repeat to compare)")
    cs.add_argument("--queries", default="experiments/transfer/questions.jsonl", help="the labelled questions (JSONL)")
    cs.add_argument("--optional", nargs="*", help="tools neither credited nor penalised (e.g. sound_events)")
    cs.add_argument("--add-tools", nargs="*", help="tools the plugins never trained with, scored zero-shot")
    cs.add_argument(
        "--audio-dir",
        default=".cache/stand-in-audio",
        help="where the stand-in clips are made (.cache/...: the caches')",
    )
    with_cache_dir(cs)
    cs.add_argument("--out", help="write the result as JSON here")
    cs.set_defaults(func=cmd_check_selection)


def add_serving(sub) -> None:
    """``serve``, ``upstream start`` and ``mcp``."""
    from ..serve.options import add_flags  # the service's flags are its own module's

    sv = with_config(
        sub.add_parser(
            "serve",
            help="an OpenAI-compatible service, a plugin in front",
            description="POST /v1/chat/completions and /v1/select, GET /health, /v1/models and /metrics, and the "
            "WebSocket /v1/realtime (OpenAI Realtime API events, text out: session.update, conversation.item.create, "
            "input_audio_buffer.append/commit/clear, response.create -> session.created/updated, "
            "input_audio_buffer.committed, response.created, response.output_text.delta/done, response.done, "
            "error): the tools start on the audio while it is streamed (docs/design.md).",
        )
    )
    add_flags(sv)
    sv.add_argument("--quiet", action="store_true", help="no access line per request on stderr")
    sv.set_defaults(func=cmd_serve)

    up = sub.add_parser("upstream", help="a model server to put autagent serve in front of")
    up = up.add_subparsers(dest="upstream_command", required=True)
    ups = up.add_parser("start", help="vLLM's CPU build (make setup-vllm) on loopback; prints its base URL")
    ups.add_argument("--model", required=True, help="a model folder (config.json, weights, tokenizer)")
    ups.add_argument("--port", type=int, default=0, help="the port (default: a free one)")
    ups.add_argument("--venv", default=".venv-vllm", help="vLLM's virtualenv (default .venv-vllm)")
    ups.add_argument("--log", help="append vLLM's output to this file (default: a temporary file)")
    ups.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for /health (default 600)")
    ups.add_argument("vllm_args", nargs=argparse.REMAINDER, help="after --: vLLM's own flags (--dtype float32 ...)")
    ups.set_defaults(func=cmd_upstream)

    mc = with_pin(with_config(sub.add_parser("mcp", help="the acoustic tools as an MCP server (stdio or HTTP)")))
    mc.add_argument("--plugin", help="a trained plugin: its tools, and `select` for a question")
    mc.add_argument(
        "--transport", choices=["stdio", "http"], default="stdio", help="stdio (default) or streamable HTTP"
    )
    mc.add_argument("--allow-dir", action="append", metavar="DIR", help="over HTTP: a folder whose files may be named")
    mc.add_argument("--host", default="127.0.0.1")
    mc.add_argument("--port", type=int, default=8000)
    mc.add_argument("--max-audio-mb", type=float, default=25.0, help="largest clip accepted as bytes")
    mc.add_argument(
        "--api-key", metavar="KEY", help="over HTTP: the key clients must present (default $AUTAGENT_API_KEY)"
    )
    mc.add_argument("--api-key-file", metavar="FILE", help="over HTTP: read the clients' key from this file")
    mc.add_argument(
        "--allowed-hosts",
        nargs="+",
        metavar="HOST",
        help="over HTTP: Host header values served, as serve's (default localhost's names; * any)",
    )
    mc.add_argument(
        "--allowed-origins", nargs="+", metavar="ORIGIN", help="over HTTP: browser origins served (default none)"
    )
    mc.set_defaults(func=cmd_mcp)


def add_results(sub) -> None:
    """``plan``, ``sweep`` and ``report record|tables``."""
    pl = with_config(sub.add_parser("plan", help="the LM policy's memory per GPU under a config (a table)"))
    pl.add_argument("--gpu-memory", type=float, metavar="GB", help="say whether the run fits a card of this size")
    pl.add_argument("--prompt-tokens", type=int, metavar="N", help="measured prompt length, clip included")
    pl.set_defaults(func=cmd_plan)

    sw = sub.add_parser("sweep", help="run an experiment's variants over its seeds and aggregate mean ± std")
    sw.add_argument("sweep", help="a sweep YAML (experiments/sweeps/*.yaml)")
    sw.add_argument("--resume", action="store_true", help="reuse finished runs")
    sw.add_argument("--only", help="comma-separated variant names")
    sw.set_defaults(func=cmd_sweep)

    rep = sub.add_parser("report", help="result tables from recorded runs and sweeps (docs/results/)")
    rep = rep.add_subparsers(dest="report_command", required=True)
    rec = rep.add_parser("record", help="write docs/results/records/NAME.json from a finished run or sweep folder")
    rec.add_argument("folder", help="a run folder (metrics.json) or a sweep's (summary.json)")
    rec.add_argument("--as", dest="name", required=True, help="the record's name, as tables name it")
    rec.add_argument("--commit", help="the commit that made it (default: HEAD of the checkout holding it)")
    rec.add_argument("--about", help="a few words saying what it is, shown under each table using it")
    rec.add_argument("--test", help="a sweep's extra test set (its also_test name) instead of its test split")
    rec.set_defaults(func=cmd_report)
    tab = rep.add_parser("tables", help="rewrite the README's and docs' tables (<!-- table: NAME -->) from records")
    tab.add_argument("--check", action="store_true", help="rewrite nothing; exit 1 naming each table that differs")
    tab.add_argument("--root", default=".", help="the checkout (default: here)")
    tab.set_defaults(func=cmd_report)


def build_parser() -> argparse.ArgumentParser:
    parser = Parser(prog="autagent")
    sub = parser.add_subparsers(dest="command", required=True)
    for add in (add_tools, add_data, add_training, add_queries, add_plugin, add_serving, add_results):
        add(sub)
    parser.description = (
        "AuTAgent: learn when and which acoustic tools to call for an audio question (a tool-selection policy "
        f"trained with GRPO, exported as a plugin). Commands: {', '.join(sub.choices)}. Each has --help."
    )
    return parser
