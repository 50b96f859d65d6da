"""The paper's LM agent policy: Qwen2-Audio hears the clip, reads the question and an anonymised
tool list, and writes the chosen tools as ``<answer>...</answer>``; trained with TRL's GRPOTrainer.

* :mod:`.config`: its settings (``policy.lm``);
* :mod:`.prompt`: the agent prompt, the tolerant parser, the answer grammar;
* :mod:`.rollout`: audio in and out of generation, and log-probabilities under the grammar;
* :mod:`.reward`: the TRL reward function (parse, run tools, ask the reasoner, score);
* :mod:`.trainer`: the GRPOTrainer subclass (audio features, advantage estimator, masked log-probs);
* :mod:`.plugin`: export and loading;
* :mod:`.recipe`: the training step the shared recipe (:mod:`autagent.recipes.train`) calls.
"""
