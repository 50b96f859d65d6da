"""MMAU string matching, our figure (labels read, missing replies wrong) beside the official one,
and both rewards' truth tables."""

from __future__ import annotations

import pytest

from autagent.data.sample import Sample
from rewards import binary_reward, differential_reward, get_reward
from rewards.scoring import is_correct, official_correct, resolve_reply, string_match

CHOICES = ["C major", "A minor", "F major", "G major"]


@pytest.mark.parametrize(
    "prediction, expected",
    [
        ("A minor", True),
        ("The chord is A minor.", True),
        ("(B) A minor", True),
        ("A major", False),
        ("A minor or C major", False),
        ("", False),
        (None, False),
        ("minor", False),
    ],
)
def test_string_match(prediction, expected):
    assert string_match("A minor", prediction, CHOICES) is expected


@pytest.mark.parametrize(
    "reply, resolved",
    [
        ("B", "A minor"),
        ("(B)", "A minor"),
        ("b.", "A minor"),
        ("B. A minor", "A minor"),
        ("(B) A minor", "A minor"),
        ("(E)", "(E)"),
        ("Bach", "Bach"),
        ("A minor", "A minor"),
    ],
)
def test_a_label_reply_reads_as_its_choice(reply, resolved):
    assert resolve_reply(reply, CHOICES) == resolved


def test_ours_and_the_official_figure():
    sample = Sample(id="s", audio="", question="q", choices=tuple(CHOICES), answer="A minor")
    assert is_correct(sample, "B") and not string_match("A minor", "B", CHOICES)  # the scripts score a label wrong
    assert official_correct(sample, "B") is False and official_correct(sample, None) is None  # missing: skipped
    assert is_correct(sample, None) is False  # ours: counted, wrong
    # labels off (the official reading of our figure): "B" is just text, and text still matches
    assert resolve_reply("B", CHOICES, labelled=False) == "B" and not is_correct(sample, "B", labelled=False)
    assert is_correct(sample, "A minor", labelled=False)
    bad = Sample(id="r", audio="", question="", choices=(), answer="", meta={"unscorable": "field 'choices': missing"})
    assert is_correct(bad, "anything") is False and official_correct(bad, "x") is None


# (base correct, with-tools correct) -> (differential, binary)
TRUTH = {(False, True): (1.0, 1.0), (True, True): (0.0, 1.0), (False, False): (0.0, 0.0), (True, False): (-1.0, 0.0)}


@pytest.mark.parametrize("base_ok, tool_ok", list(TRUTH))
def test_reward_truth_table(base_ok, tool_ok):
    columns = dict(
        predictions=["A minor" if tool_ok else "C major"],
        base_predictions=["B" if base_ok else None],
        answer=["A minor"],
        choices=[CHOICES],
    )
    assert differential_reward(["q"], ["chords"], **columns) == [TRUTH[(base_ok, tool_ok)][0]]
    assert binary_reward(["q"], ["chords"], **columns) == [TRUTH[(base_ok, tool_ok)][1]]


def test_trl_signature_batch_and_tool_cost():
    reward = get_reward("differential", tool_cost=0.1)
    assert reward.__name__ == "differential_reward"
    out = reward(
        prompts=["q1", "q2"],
        completions=["asr,chords", ""],
        predictions=["A minor", "C major"],
        base_predictions=["C major", "C major"],
        answer=["A minor", "C major"],
        choices=[CHOICES, CHOICES],
        num_tools=[2, 0],
        trainer_state=None,
        extra_column=[1, 2],
    )
    assert out == pytest.approx([0.8, 0.0])
    with pytest.raises(ValueError, match="num_tools"):
        get_reward("binary", 0.1)(["q"], ["asr"], predictions=["x"], answer=["x"], choices=[["x", "y"]])
    with pytest.raises(ValueError, match="reward.kind"):
        get_reward("shaped")


def test_lookup_oracle_takes_one_subset_per_kind():
    """The per-kind ceiling: one subset for every item of a kind, the one right most often there,
    fewest tools on ties; it can score below the per-item oracle, never above."""
    from autagent.evaluation.harness import MethodResult, lookup_oracle

    samples = [Sample(f"s{i}", "a.wav", "q", ("x", "y"), "x", category=kind) for i, kind in enumerate("aaab")]
    right = {
        (): [False, False, True, True],
        ("asr",): [True, True, False, False],
        ("asr", "tempo"): [True, True, False, True],
    }
    per_candidate = {
        c: MethodResult([c] * 4, ["x" if ok else "y" for ok in v], v, [None] * 4) for c, v in right.items()
    }
    result = lookup_oracle(samples, per_candidate)
    assert result.subsets == [("asr",)] * 3 + [()]  # kind a: asr and asr+tempo tie at 2 of 3 -> fewer tools
    assert result.correct == [True, True, False, True]
    assert result.predictions == ["x", "x", "y", "x"]


def test_label_oracle_calls_each_items_labelled_tools_and_needs_labels_on_every_scorable_row():
    """The generator's knowledge as a selector: an item's labelled tools in the library's order (a tool
    not enabled dropped); a row the loader could not score gets none; a dataset whose scorable rows are
    not all labelled (a published benchmark) has no such oracle."""
    from autagent.evaluation.harness import labelled_subsets

    def row(i, **meta):
        return Sample(f"s{i}", "a.wav", "q", ("x", "y"), "x", meta=meta)

    library = ("asr", "emotion", "tempo")
    samples = [row(0, tools=["tempo", "asr"]), row(1, tools=[]), row(2, tools=["pitch"]), row(3, unscorable="bad")]
    assert labelled_subsets(samples, library) == [("asr", "tempo"), (), (), ()]
    assert labelled_subsets([*samples, row(4)], library) is None
    assert labelled_subsets([row(5, unscorable="bad")], library) is None


def test_binary_reward_pays_the_price_too_and_defaults_are_the_papers():
    """Without a cost both rewards are the paper's; with one, each tool called is subtracted."""
    from rewards import RewardConfig

    columns = dict(predictions=["A minor"], base_predictions=["A minor"], answer=["A minor"], choices=[CHOICES])
    assert get_reward("binary")(["q"], ["x"], **columns, num_tools=[3]) == [1.0]  # no price by default
    assert get_reward("binary", 0.1)(["q"], ["x"], **columns, num_tools=[3]) == pytest.approx([0.7])
    assert RewardConfig().kind == "differential" and RewardConfig().tool_cost == 0.0
    for good in (0, 0.05, 0.99):
        RewardConfig(tool_cost=good)
    for bad in (-0.01, 1.0, 2, True, "0.1"):
        with pytest.raises(ValueError, match="reward.tool_cost"):
            RewardConfig(tool_cost=bad)
    with pytest.raises(ValueError, match="reward.kind"):
        RewardConfig(kind="shaped")


def test_a_choice_that_looks_like_a_label_is_that_choice_and_the_first_label_counts():
    notes = ("E", "C", "D", "A")
    sample = Sample(id="s", audio="", question="Which note?", choices=notes, answer="D")
    assert resolve_reply("D", notes) == "D" and is_correct(sample, "D")  # the note D, not the fourth label (A)
    assert resolve_reply(" E ", notes) == " E "
    assert resolve_reply("A", CHOICES) == "C major" and resolve_reply("(D)", CHOICES) == "G major"
