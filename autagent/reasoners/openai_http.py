"""The ``openai`` SDK's client as every caller of an OpenAI-compatible server here uses it (the
reasoner, its choice scoring, the service's upstream), and the short names of its failures."""

from __future__ import annotations

import os


def client(base_url: str, api_key_env: str, max_retries: int, timeout_s: float):
    """An ``AsyncOpenAI`` client for ``base_url`` with the key from ``$api_key_env`` (a local server
    without one gets a placeholder: the SDK insists on a key, vLLM ignores it)."""
    from openai import AsyncOpenAI

    return AsyncOpenAI(
        base_url=base_url, api_key=os.environ.get(api_key_env) or "no-key", max_retries=max_retries, timeout=timeout_s
    )


def failure_name(err: Exception) -> str:
    """A short reason for a request the SDK gave up on: ``HTTP 503``, ``Timeout``, ``ConnectionError``..."""
    import openai

    if isinstance(err, openai.APIStatusError):
        return f"HTTP {err.status_code}"
    if isinstance(err, openai.APITimeoutError):
        return "Timeout"
    if isinstance(err, openai.APIConnectionError):
        return f"ConnectionError ({type(err.__cause__).__name__})" if err.__cause__ else "ConnectionError"
    return type(err).__name__
