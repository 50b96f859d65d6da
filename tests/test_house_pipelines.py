"""The training pipelines beside the recipes (issue 64, item 2): each policy's provides what
:class:`autagent.recipes.pipeline.PolicyPipeline` declares, ``run_train`` picks them by it, and no trainer or
export function of the router or the plugin format takes more than 8 parameters."""

from __future__ import annotations

import ast
import inspect
import pathlib

import pytest

from autagent.recipes.pipeline import PolicyPipeline, TrainedPolicy
from autagent.recipes.train import policy_recipe

MOST_PARAMETERS = 8


@pytest.mark.parametrize("kind", ["router", "lm"])
def test_each_policy_brings_a_pipeline_that_provides_the_declared_steps(kind):
    pipeline = policy_recipe(kind)
    assert isinstance(pipeline, PolicyPipeline)
    for name in ("train", "after_training", "evaluated", "write", "member_seconds"):
        declared = inspect.signature(getattr(PolicyPipeline, name))
        given = inspect.signature(getattr(type(pipeline), name))
        assert list(given.parameters) == list(declared.parameters), (kind, name)
    assert inspect.signature(type(pipeline).train).return_annotation in (TrainedPolicy, "TrainedPolicy")


def test_a_pipeline_that_lacks_a_step_is_refused_by_name(monkeypatch):
    from autagent.recipes import router

    class Partial:
        def train(self, ctx, resume): ...

    monkeypatch.setattr(router, "PIPELINE", Partial())
    with pytest.raises(TypeError, match="router's pipeline does not provide"):
        policy_recipe("router")


def _parameters(function) -> int:
    names = list(inspect.signature(function).parameters)
    return len([n for n in names if n not in ("self", "cls")])


def test_no_trainer_or_export_function_takes_more_than_eight_parameters():
    """The router's trainer, both policies' exports and the plugin format's writers (the LM's
    build_grpo_trainer is the LM policy's own, outside this check)."""
    from autagent.plugin import manifest
    from autagent.policies.lm import plugin as lm_plugin
    from autagent.policies.router import export, train

    functions = [
        train.RouterTrainer.__init__,
        export.export_router,
        export.draft_router,
        lm_plugin.export_lm,
        lm_plugin.draft_lm,
        manifest.write_plugin,
        manifest.manifest_head,
    ]
    counts = {f.__qualname__: _parameters(f) for f in functions}
    assert max(counts.values()) <= MOST_PARAMETERS, counts


def test_the_policies_never_import_the_recipes():
    """The pipelines stand above the policies: no module under autagent/policies imports autagent.recipes."""
    import autagent.policies as policies

    for path in pathlib.Path(inspect.getfile(policies)).parent.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                module = ("." * node.level) + (node.module or "")
                assert "recipes" not in module.split("."), (path, module)
