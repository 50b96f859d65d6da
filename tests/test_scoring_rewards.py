"""MMAU string matching (with missing predictions counted wrong) and both rewards' truth tables."""
from __future__ import annotations

import pytest

from autagent.scoring import string_match
from rewards import binary_reward, differential_reward, get_reward

CHOICES = ["C major", "A minor", "F major", "G major"]


@pytest.mark.parametrize("prediction, expected", [
    ("A minor", True), ("The chord is A minor.", True), ("(B) A minor", True),
    ("A major", False), ("A minor or C major", False), ("", False), (None, False), ("minor", False),
])
def test_string_match(prediction, expected):
    assert string_match("A minor", prediction, CHOICES) is expected


# (base correct, with-tools correct) -> (differential, binary)
TRUTH = {(False, True): (1.0, 1.0), (True, True): (0.0, 1.0), (False, False): (0.0, 0.0), (True, False): (-1.0, 0.0)}


@pytest.mark.parametrize("base_ok, tool_ok", list(TRUTH))
def test_reward_truth_table(base_ok, tool_ok):
    columns = dict(predictions=["A minor" if tool_ok else "C major"], base_predictions=["A minor" if base_ok else None],
                   answer=["A minor"], choices=[CHOICES])
    assert differential_reward(["q"], ["chords"], **columns) == [TRUTH[(base_ok, tool_ok)][0]]
    assert binary_reward(["q"], ["chords"], **columns) == [TRUTH[(base_ok, tool_ok)][1]]


def test_trl_signature_batch_and_tool_cost():
    reward = get_reward("differential", tool_cost=0.1)
    assert reward.__name__ == "differential_reward"
    out = reward(prompts=["q1", "q2"], completions=["asr,chords", ""], predictions=["A minor", "C major"],
                 base_predictions=["C major", "C major"], answer=["A minor", "C major"], choices=[CHOICES, CHOICES],
                 num_tools=[2, 0], trainer_state=None, extra_column=[1, 2])
    assert out == pytest.approx([0.8, 0.0])
    with pytest.raises(ValueError, match="num_tools"):
        get_reward("binary", 0.1)(["q"], ["asr"], predictions=["x"], answer=["x"], choices=[["x", "y"]])
    with pytest.raises(ValueError, match="reward.kind"):
        get_reward("shaped")
