"""``autagent serve``: a trained plugin in front of any audio model, as an OpenAI-compatible service.

Three roles that combine: ``--reasoner KIND`` answers with one of our reasoners in process;
``--upstream URL`` forwards to any OpenAI-compatible server (vLLM, OpenAI); ``--plugin DIR`` selects
tools for each request, runs them and adds their records before the request goes on.  See
:mod:`.app` for the endpoints and the errors, :mod:`autagent.api` for the same plugin in Python.
"""

from __future__ import annotations

from .app import create_app
from .build import build
from .options import ServeOptions
from .service import Service

__all__ = ["ServeOptions", "Service", "build", "create_app"]
