"""The tool-conditioned scorer: one set of weights for every tool, its tool side the embedding of the
tool's description; a distribution over subsets like the per-tool router's; plugins that record the
descriptions, score a tool added after training from its description alone, and say so."""

from __future__ import annotations

import itertools
import json

import pytest
import torch

from autagent.plugin.manifest import PluginTarget
from autagent.policies.router.export import RouterParts, export_router
from autagent.policies.router.features import Featurizer
from autagent.policies.router.model import Router, RouterConfig

TOOLS = ("asr", "emotion", "chords", "tempo", "pitch", "sound_events")
CONDITIONED = RouterConfig(scorer="tool_conditioned")


@pytest.fixture(scope="module")
def featurizer():
    return Featurizer(CONDITIONED)


def _router(featurizer, tools=TOOLS, config=CONDITIONED, seed=0):
    from tools import get_tool

    torch.manual_seed(seed)
    descriptions = featurizer.tool_descriptions([get_tool(t).description for t in tools])
    return Router(featurizer.dim, config, len(tools), descriptions, featurizer.columns)


@pytest.mark.parametrize(
    "config",
    [CONDITIONED, RouterConfig(scorer="factored"), RouterConfig(scorer="factored", abstain=True)],
    ids=["tool_conditioned", "factored", "factored+abstain"],
)
def test_the_conditioned_router_is_a_distribution_over_subsets_that_sampling_follows(featurizer, config):
    router = _router(featurizer, TOOLS[:3], config)
    if config.abstain:  # the call logit must enter the distribution: greedy selection is checked below
        router.net[-1].bias.data[-1] = 0.3
    features = featurizer(["What is said?", "Which chord is it?"], ["", ""], [("yes", "no"), ("C", "G")])
    every = torch.tensor(list(itertools.product([0.0, 1.0], repeat=3))).expand(2, -1, -1)
    probabilities = router.log_prob(features, every).exp()
    assert torch.allclose(probabilities.sum(1), torch.ones(2), atol=1e-5)
    draws = router.sample(features, 20_000, torch.Generator().manual_seed(0))
    shares = torch.stack([(draws == z).all(-1).float().mean(1) for z in every[0]], dim=1)
    assert torch.allclose(shares, probabilities, atol=0.015)
    tools, call = router.heads(features)
    greedy = (tools > 0).float() * (1.0 if call is None else (call > 0).float().unsqueeze(-1))
    assert torch.equal(router.select(features), greedy)


def test_the_factored_router_lets_the_clip_veto_a_tool_but_never_call_one_the_text_does_not_ask_for(
    featurizer, tmp_path
):
    """A tool is called with σ(text) · σ(clip): over many clips, however the clip's network is set, no
    tool's chance rises above what the text gives it, while the clip can bring it down to nothing; the
    per_tool router, whose clip and text share one network, lets a clip raise a tool the text leaves
    out. A factored plugin loads to the same probabilities."""
    torch.manual_seed(0)
    factored = _router(featurizer, TOOLS, RouterConfig(scorer="factored"))
    text = featurizer(["Which chord is played at the end?"], [""], [("C major", "A minor")]).expand(64, -1).clone()
    audio = slice(*featurizer.columns["audio"])
    text[:, audio] = torch.rand(64, audio.stop - audio.start) * 4
    with torch.no_grad():
        for layer in (factored.veto[1], factored.veto[3], factored.net[3]):
            layer.weight.normal_(std=1.0)
        asked = torch.sigmoid(factored.net(text[:, factored.text_columns]))
    probabilities = factored.tool_probabilities(text)
    assert (probabilities <= asked + 1e-6).all()
    assert probabilities.min() < 0.05 * asked.max() and (asked.std(0) < 1e-6).all()  # only the clip varied
    per_tool = Router(featurizer.dim, RouterConfig(), len(TOOLS))
    with torch.no_grad():
        per_tool.net[3].weight.normal_(std=1.0)
        per_tool.net[1].weight.normal_(std=1.0)
    joint = per_tool.tool_probabilities(text)
    assert (joint.max(0).values - joint.min(0).values > 0.5).any()  # its clip alone swings a tool
    path = export_router(
        PluginTarget(tmp_path / "f", TOOLS, "embedded", {}, 30.0, {"name": "f"}), RouterParts(factored, featurizer)
    )
    from autagent.api import load

    plugin = load(path)
    assert plugin.router.config.scorer == "factored"
    assert torch.allclose(plugin.router.tool_probabilities(text), probabilities, atol=1e-6)
    with pytest.raises(ValueError, match="inputs must hold audio and question or choices"):
        RouterConfig(scorer="factored", inputs=["question"])


def test_the_tool_side_is_shared_so_a_tool_is_scored_from_its_description(featurizer):
    """With the learned terms at zero, a tool's logit is the weighted similarity of the query to its
    description: a question about tempo raises the tempo tool, one about words the transcriber; the
    frozen tool side used in selection equals the one computed with gradients."""
    router = _router(featurizer)
    with torch.no_grad():
        router.tool_side.weight.zero_()
        router.shift.weight.zero_()
    questions = ["How fast is the beat, in beats per minute?", "Transcribe what is said."]
    logits = router.eval().logits(featurizer(questions, ["", ""], [(), ()]))
    assert logits[0].argmax() == TOOLS.index("tempo") and logits[1].argmax() == TOOLS.index("asr")
    with torch.no_grad():
        router.tool_side.weight.normal_()
        frozen = router.logits(featurizer(questions, ["", ""], [(), ()]))
    with torch.enable_grad():
        fresh = router.logits(featurizer(questions, ["", ""], [(), ()]))
    assert torch.allclose(frozen, fresh)


def test_a_plugin_records_descriptions_and_scores_a_tool_added_after_training(featurizer, tmp_path, capsys):
    from autagent.api import load
    from autagent.cli import main
    from autagent.plugin.trust import PluginError

    router = _router(featurizer, ("asr", "emotion", "chords", "pitch"))
    learned = ("asr", "emotion", "chords", "pitch")
    path = export_router(
        PluginTarget(tmp_path / "p", learned, "embedded", {}, 30.0, {"name": "t"}), RouterParts(router, featurizer)
    )
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["scores_new_tools"] and set(manifest["descriptions"]) == {"asr", "emotion", "chords", "pitch"}
    plain = load(path)
    added = load(path, extra_tools=["tempo"])
    assert plain.tools == ["asr", "emotion", "chords", "pitch"] and added.tools == [*plain.tools, "tempo"]
    assert added.zero_shot_tools == ["tempo"]
    question, choices = "What is the tempo of the song, in beats per minute?", ("90 BPM", "150 BPM")
    with_new = added.probabilities("", question, choices)
    assert {k: v for k, v in with_new.items() if k != "tempo"} == plain.probabilities("", question, choices)
    assert with_new["tempo"] == max(with_new.values())  # the new tool leads on a question about it
    assert (
        main(["tools", "list", "--plugin", str(path), "--set", "tools.enabled=[asr,emotion,chords,pitch,tempo]"]) == 0
    )
    rows = {row["id"]: row.get("plugin") for row in json.loads(capsys.readouterr().out)["tools"]}
    assert rows["asr"] == "learned" and rows["tempo"] == "zero-shot" and rows["speakers"] == "not scored"
    per_tool = Router(featurizer.dim, RouterConfig(), 2)
    other = export_router(
        PluginTarget(tmp_path / "q", ("asr", "chords"), "embedded", {}, 30.0, {}),
        RouterParts(per_tool, Featurizer(RouterConfig())),
    )
    with pytest.raises(PluginError, match="per_tool router has no zero-shot head"):
        load(other, extra_tools=["tempo"])
