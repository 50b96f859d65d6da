"""The zero-shot head: tools a plugin never trained with, scored from their descriptions alone, for any
scorer; fitted to imitate the trained router on the tools it learned; exported with the plugin."""

from __future__ import annotations

import json

import pytest
import torch

from autagent.policies.router.features import Featurizer
from autagent.policies.router.model import Router, RouterConfig
from autagent.policies.router.plugin import HEAD_FILE, export_router
from autagent.policies.router.zero_shot import DescriptionHead, best_of_the_others, best_threshold

QUESTIONS = {
    "asr": ["What does the man say about the train?", "Which word does the speaker repeat?", "What is said first?"],
    "chords": ["Which chord is played at the start?", "What chord follows A minor?", "Name the final chord."],
    "emotion": ["How does the speaker feel?", "Is the voice happy or sad?", "What mood does the talker convey?"],
    "tempo": ["How many beats per minute?", "Is the piece fast or slow?", "What is the tempo of the song?"],
    "pitch": ["Which note is the highest?", "Does the melody rise or fall?", "What is the pitch of the tone?"],
}
ANSWERS = {
    "asr": ("a", "b"),
    "chords": ("C major", "G major"),
    "emotion": ("happy", "sad"),
    "tempo": ("90 BPM", "150 BPM"),
    "pitch": ("the note C4", "the note G5"),
}


@pytest.fixture(scope="module")
def featurizer():
    return Featurizer(RouterConfig(scorer="factored"))


def _descriptions(featurizer, tools):
    from tools import get_tool

    return featurizer.tool_descriptions([get_tool(t).description for t in tools])


def _queries(featurizer, tools):
    """Features of QUESTIONS' questions (no clip) and 0/1 labels: each question asks for its own tool."""
    rows = [(q, t) for t in tools for q in QUESTIONS[t]]
    features = featurizer([q for q, _ in rows], [""] * len(rows), [ANSWERS[t] for _, t in rows])
    labels = torch.tensor([[float(t == u) for u in tools] for _, t in rows])
    return features, labels


def test_the_helpers_pick_the_best_other_tool_and_the_cut_with_the_highest_f1():
    z = torch.tensor([[[3.0], [1.0], [2.0]]])  # one query, three tools, one input
    assert best_of_the_others(z).flatten().tolist() == [2.0, 3.0, 3.0]
    assert best_of_the_others(z[:, :1]).flatten().tolist() == [0.0]
    scores = torch.tensor([0.9, 0.8, 0.3, 0.2, 0.1], dtype=torch.float64)
    cut, f1 = best_threshold(scores, torch.tensor([1.0, 1.0, 0.0, 1.0, 0.0], dtype=torch.float64))
    assert cut == pytest.approx(0.15) and f1 == pytest.approx(2 * 3 / (4 + 3))  # calling four: 3 hits of 3
    cut, f1 = best_threshold(scores, torch.tensor([1.0, 1.0, 0.0, 0.0, 0.0], dtype=torch.float64))
    assert cut == pytest.approx(0.55) and f1 == pytest.approx(1.0)


def test_signals_are_each_descriptions_similarity_standardised_over_the_training_queries(featurizer):
    tools = ("asr", "chords", "tempo")
    descriptions = _descriptions(featurizer, tools)
    features, labels = _queries(featurizer, tools)
    head = DescriptionHead(featurizer.columns, descriptions.shape[1])
    head.fit(features, descriptions, labels)
    signals = head.signals(features, descriptions)  # [N, T, 4]: z question, z choices, their margins
    assert signals.shape == (len(features), 3, 4)
    question = torch.nn.functional.normalize(features[:, : descriptions.shape[1]], dim=-1).double()
    cosine = question @ descriptions.double().T
    expected = (cosine - cosine.mean(0)) / cosine.std(0)  # the covariance form is exactly this for a known tool
    assert torch.allclose(signals[..., 0].double(), expected, atol=1e-3)
    assert torch.allclose(signals[..., 2], signals[..., 0] - best_of_the_others(signals[..., :1]).squeeze(-1))
    head.prepare(descriptions)  # a plugin's fixed tools: standardisers computed once, the same signals
    assert torch.allclose(head.signals(features, descriptions), signals)
    assert torch.allclose(head.signals(features, descriptions[:2].clone())[..., :2], signals[:, :2, :2])
    start, end = featurizer.columns["choices"]
    blanked = features.clone()
    blanked[:, start:end] = 0.0  # choices set aside: they say nothing, neither for nor against
    assert torch.equal(head.signals(blanked, descriptions)[..., 1], torch.zeros(len(features), 3))
    assert torch.equal(head.signals(blanked, descriptions)[..., 0], signals[..., 0])


def test_fitted_to_the_routers_own_choices_the_head_calls_a_tool_it_never_saw_where_its_description_fits(
    featurizer,
):
    """Fitted on four tools (a router that calls each question's own tool), the head scores pitch, which
    it has never seen, from pitch's description: it calls it on the pitch questions, on few others."""
    learned = ("asr", "chords", "emotion", "tempo")
    head = DescriptionHead(featurizer.columns, 384)
    features, labels = _queries(featurizer, learned)
    fitted = head.fit(features, _descriptions(featurizer, learned), labels)
    assert fitted["fitted"] and fitted["f1_against_the_router"] > 0.7
    every = (*learned, "pitch")
    queries, truth = _queries(featurizer, every)
    calls = head.logits(queries, _descriptions(featurizer, every)) > 0
    assert calls[truth[:, -1] > 0, -1].float().mean() >= 2 / 3  # the new tool, where it is needed
    assert calls[truth[:, -1] == 0, -1].float().mean() <= 0.25
    unfitted = DescriptionHead(featurizer.columns, 384)
    assert not (unfitted.logits(queries, _descriptions(featurizer, every)) > 0).any()  # calls nothing
    assert not unfitted.fit(features, _descriptions(featurizer, learned), torch.zeros_like(labels))["fitted"]


def test_a_factored_plugin_adds_a_tool_through_its_head_and_keeps_the_learned_tools_selection(
    featurizer, tmp_path, capsys
):
    from autagent.cli import main
    from autagent.plugin import load
    from autagent.trust import PluginError

    learned = ("asr", "chords", "emotion", "tempo")
    torch.manual_seed(0)
    descriptions = _descriptions(featurizer, learned)
    router = Router(featurizer.dim, featurizer.config, len(learned), descriptions, featurizer.columns)
    head = DescriptionHead(featurizer.columns, descriptions.shape[1])
    features, labels = _queries(featurizer, learned)
    head.fit(features, descriptions, labels)
    path = export_router(tmp_path / "p", router, featurizer, learned, "embedded", {}, 30.0, {}, None, head)
    manifest = json.loads((path / "manifest.json").read_text())
    assert manifest["scores_new_tools"] and manifest["new_tools"] == "head" and HEAD_FILE in manifest["files"]
    plain, added = load(path), load(path, extra_tools=["pitch"])
    assert added.tools == [*learned, "pitch"] and added.zero_shot_tools == ["pitch"]
    question, choices = "Which note is the highest in the melody?", ("C4", "G5")
    with_new = added.probabilities("", question, choices)
    assert {k: v for k, v in with_new.items() if k != "pitch"} == plain.probabilities("", question, choices)
    assert with_new["pitch"] > 0.5 and "pitch" in added.select("", question, choices)
    assert "pitch" not in added.select("", "What does the man say about the train?", ("a", "b"))
    assert main(["tools", "list", "--plugin", str(path), "--set", f"tools.enabled=[{','.join(learned)},pitch]"]) == 0
    rows = {row["id"]: row.get("plugin") for row in json.loads(capsys.readouterr().out)["tools"]}
    assert rows["asr"] == "learned" and rows["pitch"] == "zero-shot"
    without = export_router(tmp_path / "q", router, featurizer, learned, "embedded", {}, 30.0, {})
    assert not json.loads((without / "manifest.json").read_text())["scores_new_tools"]
    assert json.loads((without / "manifest.json").read_text())["new_tools"] is None
    with pytest.raises(PluginError, match="has no zero-shot head"):
        load(without, extra_tools=["pitch"])
    with pytest.raises(ValueError, match="new_tools"):
        RouterConfig(new_tools="scorer")  # the scorer's own way needs the tool_conditioned scorer


def test_the_sweep_reports_an_added_tools_recall_precision_and_calls_over_seeds():
    from autagent.sweep import added_tools_summary, markdown

    def run(accuracy, recall, precision, called):
        per_tool = {"tempo": {"recall": recall, "precision": precision, "called": called, "needed": 26}}
        return {
            "added_tools": {
                "tools": ["tempo"],
                "methods": {"policy": {"accuracy": accuracy, "selection": {"per_tool": per_tool}}},
            }
        }

    out = added_tools_summary({0: run(0.6, 0.5, 0.25, 40), 1: run(0.7, 1.0, 0.75, 30)})
    assert out["added/accuracy"]["values"] == [0.6, 0.7]
    assert out["added/tempo/recall"]["mean"] == pytest.approx(0.75)
    assert out["added/tempo/precision"]["values"] == [0.25, 0.75] and out["added/tempo/calls"]["mean"] == 35.0
    variant = {**out, **{k: {"mean": 0.0, "std": 0.0, "values": [0.0]} for k in ("accuracy", "avg_tools")}}
    for key in ("selection_precision", "selection_recall", "no_call_on_hearing_items"):
        variant[key] = {"mean": 0.0, "std": 0.0, "values": [0.0]}
    text = markdown(
        {"sweep": "s", "seeds": [0, 1], "variants": {"tempo-added": variant}, "baselines": {}, "compare": []}
    )
    assert "| tempo-added | 0.0 ± 0.0 | 65.0 ± 7.1 | tempo 75.0 ± 35.4 | tempo 50.0 ± 35.4 | tempo 35 ± 7 |" in text
