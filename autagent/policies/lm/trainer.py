"""The TRL GRPOTrainer subclass for the audio LM policy, and its construction from a run config.

Three things TRL does not do, each a small override:

* audio: the Qwen2-Audio features travel with the batch and are given to every log-probability
  pass (policy, old and reference);
* the advantage estimator: TRL always subtracts the group mean, which makes the differential and
  the binary reward identical; the advantages are recomputed with :func:`autagent.policies.grpo.advantages`
  under ``grpo.advantage`` (the router's estimators, the same code);
* constrained decoding: when generation was masked by the answer grammar, every log-probability
  is computed under that same mask (:func:`.rollout.masked_logps`), so ratios and KL compare the
  distributions the completions were actually drawn from.

The loss is TRL's ``policy.lm.loss_type`` (default ``grpo``, the paper's per-sequence mean), set
explicitly because TRL's own default is ``dapo``.
"""

from __future__ import annotations

import time
from functools import partial
from pathlib import Path

from ..grpo import advantages as estimate_advantages
from .config import LMPolicyConfig
from .decoding import warm_up
from .prompt import AnswerGrammar, agent_prompt
from .rollout import generation_mode, grammar_allowed, make_rollout, masked_logps
from .shared_prefix import completion_logps
from .trl_contract import check


def trainer_class():
    import torch
    from trl import GRPOTrainer

    check(GRPOTrainer)  # the private methods overridden below, as this code expects them (trl_contract.OVERRIDDEN)

    class AudioGRPOTrainer(GRPOTrainer):
        """GRPOTrainer whose rollouts and log-probability passes see the audio."""

        _audio: tuple | None = None
        _audio_paths: list[str] | None = None
        clock: dict  # seconds per phase (set where the trainer is built): the report's time per step
        advantage_kind: str = "group"
        grammar = None  # an AnswerGrammar when decoding is constrained

        def _generate_and_score_completions(self, inputs):
            self._audio_paths = [x.get("audio") for x in inputs]  # aligned with the prompts the rollout receives
            started = time.perf_counter()
            output = super()._generate_and_score_completions(inputs)
            self.clock["rollout_and_scoring"] = self.clock.get("rollout_and_scoring", 0.0) + (
                time.perf_counter() - started
            )
            if self._audio is not None:  # a text policy has no features
                output["input_features"], output["feature_attention_mask"] = self._audio
            rewards = (self._rewards_per_func * self.reward_weights.to(self._rewards_per_func.device)).nansum(dim=1)
            local = len(output["advantages"])
            groups = estimate_advantages(rewards.view(-1, self.num_generations).float(), self.advantage_kind).view(-1)
            start = self.accelerator.process_index * local
            output["advantages"] = groups[start : start + local].to(output["advantages"].device)
            return output

        def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
            self._rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
            return self._rewards_per_func

        def _compute_loss(self, model, inputs):
            if "input_features" in inputs:
                self._audio = (inputs["input_features"], inputs["feature_attention_mask"])
            return super()._compute_loss(model, inputs)

        def training_step(self, *args, **kwargs):
            started = time.perf_counter()
            try:
                return super().training_step(*args, **kwargs)
            finally:
                self.clock["steps"] = self.clock.get("steps", 0) + 1
                self.clock["training_step"] = self.clock.get("training_step", 0.0) + time.perf_counter() - started

        def _get_per_token_logps_and_entropies(
            self,
            model,
            input_ids,
            attention_mask,
            logits_to_keep,
            batch_size=None,
            compute_entropy=False,
            compute_aux_loss=False,
            **_image_inputs,
        ):
            batch_size = batch_size or input_ids.size(0)
            if self._audio is None:  # a text policy: shared prompt prefixes computed once (.shared_prefix)
                logps, entropies, pad = [], [], self.processing_class.pad_token_id
                # under the grammar the completions' logits are scored under the mask sampling applied
                scorer = None if self.grammar is None else partial(grammar_scored, self.grammar, self.temperature)
                for start in range(0, input_ids.size(0), batch_size):
                    end = min(start + batch_size, input_ids.size(0))
                    with self.accelerator.autocast():
                        lp, ent = completion_logps(
                            model, input_ids[start:end], attention_mask[start:end], logits_to_keep, pad, scorer
                        )
                    logps.append(lp)
                    entropies.append(ent)
                return torch.cat(logps), (torch.cat(entropies) if compute_entropy else None), None
            features, feature_mask = self._audio
            logps, entropies = [], []
            for start in range(0, input_ids.size(0), batch_size):
                end = min(start + batch_size, input_ids.size(0))
                ids, mask = input_ids[start:end], attention_mask[start:end]
                audio = dict(
                    input_features=features[start:end].to(ids.device),
                    feature_attention_mask=feature_mask[start:end].to(ids.device),
                )
                with self.accelerator.autocast():
                    if self.grammar is None:
                        labels = ids.masked_fill(mask == 0, -100)
                        labels[:, :-logits_to_keep] = -100
                        out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True, **audio)
                        logps.append(out.log_probs[:, -logits_to_keep:])
                        if compute_entropy:
                            entropies.append(out.entropy[:, -logits_to_keep:])
                        continue
                    logits = model(
                        input_ids=ids, attention_mask=mask, logits_to_keep=logits_to_keep + 1, **audio
                    ).logits
                token_logp, entropy = grammar_logps(self.grammar, self.temperature, logits, ids, mask, logits_to_keep)
                logps.append(token_logp)
                entropies.append(entropy)
            return torch.cat(logps), (torch.cat(entropies) if compute_entropy else None), None

    return AudioGRPOTrainer


def grammar_logps(grammar, temperature: float, logits, ids, mask, logits_to_keep: int):
    """Per-token log-probabilities and entropies of the completions (the last ``logits_to_keep`` of ``ids``)
    under the answer grammar's mask, so ratios and KL compare the distributions the completions were drawn
    from; padding positions are 0, not -inf."""
    # positions -k-1 .. -2 predict the k completion tokens (whether or not logits_to_keep was honoured)
    scores = logits[:, -(logits_to_keep + 1) : -1]
    return grammar_scored(grammar, temperature, scores, ids[:, -logits_to_keep:], mask[:, -logits_to_keep:])


def grammar_scored(grammar, temperature: float, scores, completion, completion_mask):
    """:func:`grammar_logps` on the completions' own logits (``scores[:, j]`` predicts ``completion[:, j]``):
    the text policy's shared-prefix pass hands them over this way."""
    import torch

    length = completion.size(1)
    rows = [row[m.bool()].tolist() for row, m in zip(completion, completion_mask)]
    index, valid = grammar_allowed(grammar, rows, length)
    token_logp, entropy = masked_logps(scores, completion, index, valid, temperature)
    inside = (
        torch.arange(length, device=completion.device)[None]
        < torch.tensor([len(r) for r in rows], device=completion.device)[:, None]
    )
    return (
        torch.where(inside, token_logp, torch.zeros_like(token_logp)),
        torch.where(inside, entropy, torch.zeros_like(entropy)),
    )


def WarmUp(processor, lm: LMPolicyConfig, trainer, warm_up=warm_up):  # noqa: N802  (a class built where transformers is imported)
    """A callback that compiles the rollout's static-cache decoding step when training begins, before
    step 1's rollout (CUDA only; a failure is logged and the rollout compiles on its first call).

    It compiles in the state the rollout decodes in (:func:`.rollout.generation_mode`: eval mode,
    gradient checkpointing off).  Compiled in the trainer's state instead, the decoder layers drop
    their cache under checkpointing, dynamo fails on them and falls back to eager for good: on an
    H100 the 8.40 B rollout then decoded at 63-75 ms a step instead of compiling.  ``warm_up(model,
    processor, lm, rows, device)`` compiles (:func:`.decoding.warm_up`)."""
    import logging

    from transformers import TrainerCallback

    class _WarmUp(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            rows = min(lm.generation_batch_size, lm.per_device_train_batch_size * lm.gradient_accumulation_steps)
            if not lm.rollout.warmup:
                return
            try:
                with generation_mode(trainer, lm.rollout.merge_adapters) as model:  # compiled as it decodes
                    warm_up(model, processor, lm, rows, next(model.parameters()).device)
            except Exception as err:  # noqa: BLE001  (compiling is an optimisation; training goes on without it)
                logging.getLogger(__name__).warning("rollout warm-up failed (%s); decoding compiles on first use", err)

    return _WarmUp()


def weight_dtype(lm: LMPolicyConfig, deepspeed: bool):
    """The dtype the policy's weights are loaded in.

    ``policy.lm.bf16`` means bf16 compute with fp32 master weights and optimizer state.  Without
    DeepSpeed (one process, DDP) the weights are loaded in fp32 and accelerate autocasts the
    forward passes to bf16, so AdamW adds each update to an fp32 weight: at the paper's lr 1e-6 an
    update is far below bf16's resolution (8 significant bits: 0.4 % of the weight), and bf16 weights
    updated in place lost most of them (on an H100, one step moved about 2 % of the weights).  Under
    DeepSpeed the weights are loaded in bf16 because DeepSpeed keeps the fp32 masters itself (its
    optimizer's flat fp32 partitions) and copies the updated masters back into the bf16 module."""
    import torch

    frozen_base = lm.lora is not None  # LoRA: the base needs no masters, the adapters are kept in fp32 by peft
    return torch.bfloat16 if lm.bf16 and (deepspeed or frozen_base) else torch.float32


def lora_config(lm: LMPolicyConfig):
    """peft's LoraConfig for ``policy.lm.lora``: adapters on the decoder's linears only."""
    from peft import LoraConfig

    lora = lm.lora
    return LoraConfig(
        r=lora.r,
        lora_alpha=lora.alpha,
        lora_dropout=lora.dropout,
        target_modules=lora.pattern_for(lm.modality),
        bias="none",
    )


def trl_args(config, lm: LMPolicyConfig, output_dir: Path):
    """TRL's GRPOConfig from the run config: the policy's (``policy.lm``) and the objective's (``grpo``)."""
    from trl import GRPOConfig as TRLGRPOConfig

    grpo = config.grpo
    return TRLGRPOConfig(
        output_dir=str(output_dir),
        max_steps=grpo.steps,
        learning_rate=lm.learning_rate,
        per_device_train_batch_size=lm.per_device_train_batch_size,
        gradient_accumulation_steps=lm.gradient_accumulation_steps,
        num_generations=grpo.group_size,
        temperature=grpo.temperature,
        beta=grpo.beta,
        epsilon=grpo.clip_epsilon,
        num_iterations=grpo.inner_epochs,
        max_completion_length=lm.max_completion_length,
        use_cpu=lm.use_cpu,
        bf16=lm.bf16,  # accelerate's mixed precision: bf16 autocast around fp32 weights, on a GPU or the CPU
        activation_checkpointing=lm.gradient_checkpointing,  # transformers 5 name of gradient checkpointing
        deepspeed=lm.deepspeed,
        # The reference model (beta > 0) is frozen: it needs no fp32 masters, so it is loaded in bf16; with
        # LoRA there is none (TRL computes the reference with the adapters off).
        model_init_kwargs={"dtype": "bfloat16" if lm.bf16 else "float32"} if grpo.beta > 0 and not lm.lora else None,
        save_steps=lm.save_steps,
        save_strategy="steps",
        logging_steps=lm.logging_steps,
        seed=config.seed,
        loss_type=lm.loss_type,
        scale_rewards="group",
        report_to=["wandb"] if config.logging.wandb and config.logging.wandb_mode != "disabled" else [],
        remove_unused_columns=False,
        disable_tqdm=not config.logging.progress,
        save_only_model=False,
        **lm.extra_args,
    )


def build_grpo_trainer(
    config,
    lm: LMPolicyConfig,
    samples,
    base_predictions: dict,
    reward_funcs: list,
    output_dir: Path,
    tool_ids,
    model_id: str,
    model=None,
):
    """The TRL trainer for the LM policy, wired to our rollout, the given rewards and the run config.
    ``model``: a policy already in memory, in :func:`weight_dtype` (``make gpu-check`` builds random
    weights on the GPU); None loads it from ``model_id``."""
    import datasets

    args = trl_args(config, lm, output_dir)
    dtype = weight_dtype(lm, deepspeed=args.deepspeed_plugin is not None)
    clock: dict = {}
    if lm.text:
        from transformers import AutoModelForCausalLM

        from .text import Profiler, load_tokenizer, make_text_rollout, sample_prompt, text_grammar

        processor = load_tokenizer(model_id)
        profiler = Profiler(lm.audio_max_seconds, lm.profile_labels)
        prompts = [sample_prompt(s, profiler, tool_ids) for s in samples]
        kept = [(s, p) for s, p in zip(samples, prompts) if p is not None]  # an unreadable clip is not trained on
        rows = [{"prompt": p, "sample_id": s.id, "base_prediction": base_predictions[s.id]} for s, p in kept]
        if model is None:
            model = AutoModelForCausalLM.from_pretrained(model_id, dtype=dtype)
        tokenizer, rollout = processor, make_text_rollout(processor, lm, clock, len(tool_ids))
    else:
        from transformers import AutoProcessor, Qwen2AudioForConditionalGeneration

        processor = AutoProcessor.from_pretrained(model_id)
        rows = [
            {
                "prompt": agent_prompt(s.question, tool_ids),
                "audio": s.audio,
                "sample_id": s.id,
                "base_prediction": base_predictions[s.id],
            }
            for s in samples
        ]
        if model is None:
            model = Qwen2AudioForConditionalGeneration.from_pretrained(model_id, dtype=dtype)
        # TRL's processor handling assumes images; the audio processor lives in our rollout, TRL gets its tokenizer.
        tokenizer, rollout = processor.tokenizer, make_rollout(processor, lm, len(tool_ids))
    trainer = trainer_class()(
        model=model,
        reward_funcs=list(reward_funcs),
        args=args,
        train_dataset=datasets.Dataset.from_list(rows),
        processing_class=tokenizer,
        rollout_func=rollout,
        peft_config=lora_config(lm) if lm.lora else None,
    )
    trainer.clock = clock
    if not lm.text:  # the static-cache compile is the audio rollout's
        trainer.add_callback(WarmUp(processor, lm, trainer))
    trainer.advantage_kind = config.grpo.advantage
    if lm.constrained_decoding:  # the rollout's own grammar (the text one reads the reply prefix in the prompt)
        trainer.grammar = (
            text_grammar(tokenizer, lm, len(tool_ids)) if lm.text else AnswerGrammar(tokenizer, 0, len(tool_ids))
        )
    return trainer, processor
