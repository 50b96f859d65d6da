"""The router policy: a small network from (question, choices, audio) to a distribution over tool subsets.

* :mod:`.model`: its settings and the network (``sample``, ``log_prob``, ``select``);
* :mod:`.features`: the inputs, on frozen shipped encoders;
* :mod:`.train`: GRPO on it (the paper's Algorithm 1), checkpoints and resume;
* :mod:`.plugin`: export and loading;
* :mod:`.backoff`: what a plugin selects on wording unlike training's, fitted onto it by :mod:`.backoff_fit`.
"""

from .model import Router, RouterConfig, subset_ids

__all__ = ["Router", "RouterConfig", "subset_ids"]
