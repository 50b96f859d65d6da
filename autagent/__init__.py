"""AuTAgent: learn when and which acoustic tools a frozen audio reasoner should call.

Data flow: ``data`` (Sample) -> ``policies`` (tool subsets) -> ``tools`` (records) ->
``reasoners`` (answer) -> ``rewards`` -> ``grpo`` (update) -> ``plugin`` (export).
"""
__version__ = "0.1.0"
