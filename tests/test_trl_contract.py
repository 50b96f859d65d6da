"""TRL held to the tested version: the installed TRL has every private method the LM policy overrides, with
the parameters it expects; pyproject.toml, the GPU machine's wheels and the contract name one version; a TRL
that renamed or changed a method stops the trainer's construction with a message naming it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from autagent.policies.lm import trl_contract

ROOT = Path(__file__).resolve().parent.parent


def test_the_installed_trl_is_the_tested_one_and_fits_every_override():
    import trl

    assert trl.__version__ == trl_contract.TESTED
    assert trl_contract.problems() == []
    pinned = re.search(r'"trl==([^"]+)"', (ROOT / "pyproject.toml").read_text()).group(1)
    carried = re.search(r"trl==(\S+)", (ROOT / "scripts" / "gpu_check_wheels.sh").read_text()).group(1)
    assert pinned == carried == trl_contract.TESTED


def test_the_overrides_are_the_ones_the_contract_lists():
    """Every private GRPOTrainer method the subclass defines is in the contract, and the other way round."""
    from trl import GRPOTrainer

    from autagent.policies.lm.trainer import trainer_class

    subclass = trainer_class()
    overridden = {
        name
        for name, value in vars(subclass).items()
        if callable(value) and hasattr(GRPOTrainer, name) and name[0] == "_"
    }
    assert overridden - {"__init__"} == set(trl_contract.OVERRIDDEN)


class _Renamed:
    """A GRPOTrainer of a later TRL: one method renamed, one with a parameter renamed, no rollout_func."""

    def __init__(self, model, args=None, peft_config=None):
        pass

    def _generate_and_score_completions(self, inputs):
        pass

    def _calculate_rewards_per_func(self, inputs, prompts, completions, completion_ids_list):
        pass

    def _compute_loss(self, model, batch):
        pass

    def _get_per_token_logps_and_entropies(
        self,
        model,
        input_ids,
        attention_mask,
        logits_to_keep,
        batch_size=None,
        compute_entropy=False,
        compute_aux_loss=False,
        pixel_values=None,
    ):
        pass


def test_a_trl_that_renamed_or_changed_a_method_is_named_where_the_trainer_is_built(monkeypatch):
    found = trl_contract.problems(_Renamed)
    assert found == [
        "GRPOTrainer._calculate_rewards is missing",
        "GRPOTrainer._compute_loss takes (model, batch), the override expects (model, inputs)",
        "GRPOTrainer.__init__ has no rollout_func=",
    ]
    import trl

    from autagent.policies.lm.trainer import trainer_class

    monkeypatch.setattr(trl, "GRPOTrainer", _Renamed)
    with pytest.raises(
        RuntimeError, match=r"TRL .* does not match .*ran with TRL 1\.16\.0.*_calculate_rewards is missing"
    ):
        trainer_class()
