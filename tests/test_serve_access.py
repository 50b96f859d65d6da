"""Who may use ``autagent serve``: flags taken only as spelt (no abbreviation), every setting one
documented field of ``ServeOptions``; the API key, the Host and Origin allow-lists and the JSON
content type, on HTTP and /v1/realtime; nothing about the upstream told to a client."""

from __future__ import annotations

import dataclasses

import pytest


def test_no_flag_is_taken_for_an_abbreviation_and_every_serve_setting_is_one_documented_flag():
    from autagent.cli import build_parser

    parser = build_parser()
    args = parser.parse_args(["serve", "--reasoner", "embedded", "--api-key", "K"])
    assert args.api_key_env is None or args.api_key_env == "OPENAI_API_KEY"  # once an abbreviation of it
    for argv in (["serve", "--api-key-e", "X"], ["tools", "run", "a.wav", "--no-c"], ["eval", "--data", "x"]):
        with pytest.raises(SystemExit):
            parser.parse_args(argv)

    from autagent.serve.options import ServeOptions, field_docs, from_args

    options = from_args(parser.parse_args(["serve", "--reasoner", "embedded", "--api-key", "K", "--max-audio-mb", "2"]))
    assert options.api_key == "K" and options.api_key_env == "OPENAI_API_KEY" and options.max_audio_bytes == 2 << 20
    serve = next(a for a in parser._subparsers._group_actions[0].choices.items() if a[0] == "serve")[1]
    dests = {a.dest for a in serve._actions}
    docs = field_docs(ServeOptions)
    for item in dataclasses.fields(ServeOptions):
        assert item.name in dests and len(docs.get(item.name, "")) > 10, item.name
