"""The paper's LM agent policy: Qwen2-Audio hears the clip, reads the question and an anonymised
tool list, and writes the chosen tool indices as ``<answer>i,j</answer>``; trained with TRL's
GRPOTrainer on current TRL.

TRL has no audio path, so :class:`AudioGRPOTrainer` adds one in three small overrides:

* generation runs in a ``rollout_func`` that feeds the Qwen2-Audio processor's features (and the
  optional answer grammar) to ``model.generate``;
* the features travel with the batch (``input_features``, ``feature_attention_mask``) through
  TRL's buffering and shuffling;
* the log-probability pass (policy, old and reference) gives them to the model again.

Rewards, reasoner, tool pool, caches and the plugin format are the router's.
"""
from __future__ import annotations

import dataclasses
import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path

from tools import TOOL_IDS, get_tool

TOOL_LETTERS = "ABCDEF"
AGENT_PROMPT = (
    "You will hear an audio clip and read a question about it. Another model will answer the question; "
    "before it does, you may call acoustic analysis tools on the clip. Their outputs will be shown to it.\n"
    "Available tools:\n{tools}\n"
    "Question: {question}\n"
    "Think about which tools (if any) give information needed for this question. Calling unnecessary tools "
    "adds noise. Reply with the numbers of the chosen tools inside <answer></answer>, for example "
    "<answer>1,3</answer>, or <answer></answer> to call none."
)
ANSWER_PATTERN = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


@dataclass
class LMPolicyConfig:
    """The LM policy's model and TRL settings (the GRPO hyper-parameters come from ``grpo:``)."""

    model_id: str = "Qwen/Qwen2-Audio-7B-Instruct"
    build_tiny: bool = False  # build a tiny random Qwen2-Audio at model_id when it is missing (CPU runs)
    learning_rate: float = 1e-6
    per_device_train_batch_size: int = 8
    gradient_accumulation_steps: int = 1
    max_completion_length: int = 64
    constrained_decoding: bool = False
    invalid_reward: float = -1.0  # reward of a completion whose <answer> cannot be parsed
    bf16: bool = True
    use_cpu: bool = False
    gradient_checkpointing: bool = False
    deepspeed: str | None = None  # a DeepSpeed JSON config (e.g. experiments/accelerate/zero2.json)
    save_steps: int = 50
    logging_steps: int = 1
    audio_max_seconds: float = 30.0
    extra_args: dict = field(default_factory=dict)  # any other GRPOConfig field


# ---- prompt and output parsing --------------------------------------------------------------------
def tool_list() -> str:
    """Tools anonymised as type1..type6 (letters A..F) with their descriptions, in the paper's order."""
    return "\n".join(f"({TOOL_LETTERS[i]}) type{i + 1}: {get_tool(t).description}" for i, t in enumerate(TOOL_IDS))


def agent_prompt(question: str) -> str:
    return AGENT_PROMPT.format(tools=tool_list(), question=question)


@dataclass(frozen=True)
class Selection:
    tools: tuple[str, ...]
    valid: bool
    reason: str = ""


def parse_selection(text: str | None) -> Selection:
    """``<answer>1,3</answer>`` -> tools 1 and 3.  ``<answer></answer>`` is a valid choice of no tool;
    no tag, several tags, junk, an index outside 1..6 or a repeated index make the completion invalid."""
    if not text:
        return Selection((), False, "empty completion")
    found = ANSWER_PATTERN.findall(text)
    if len(found) != 1:
        return Selection((), False, "no <answer> tag" if not found else "several <answer> tags")
    body = found[0].strip()
    if not body:
        return Selection((), True)
    parts = [p.strip() for p in body.split(",")]
    if not all(re.fullmatch(r"\d+", p) for p in parts):
        return Selection((), False, f"not a list of tool numbers: {body!r}")
    numbers = [int(p) for p in parts]
    if any(not 1 <= n <= len(TOOL_IDS) for n in numbers):
        return Selection((), False, f"tool number out of range 1..{len(TOOL_IDS)}: {body!r}")
    if len(set(numbers)) != len(numbers):
        return Selection((), False, f"repeated tool number: {body!r}")
    return Selection(tuple(TOOL_IDS[n - 1] for n in sorted(numbers)), True)


class AnswerGrammar:
    """``prefix_allowed_tokens_fn`` for ``generate``: only ``<answer>`` + distinct indices + ``</answer>``.

    Candidate tokens are the few vocabulary entries made only of the grammar's characters; at each
    step those that keep the text a prefix of a valid answer are allowed, and EOS once it is complete.
    """

    def __init__(self, tokenizer, prompt_length: int):
        self.tokenizer = tokenizer
        self.prompt_length = prompt_length
        alphabet = set("<answer>/,") | {str(i) for i in range(1, len(TOOL_IDS) + 1)}
        self.candidates = {}
        for token_id in range(len(tokenizer)):
            piece = tokenizer.decode([token_id])
            if piece and set(piece) <= alphabet:
                self.candidates[token_id] = piece
        self.eos = tokenizer.eos_token_id

    @staticmethod
    def is_prefix(text: str) -> bool:
        head = "<answer>"
        if len(text) <= len(head):
            return head.startswith(text)
        body = text[len(head):]
        if not text.startswith(head):
            return False
        end = body.find("<")
        numbers, tail = (body, "") if end < 0 else (body[:end], body[end:])
        if not re.fullmatch(r"(?:[1-6](?:,[1-6])*,?)?", numbers):
            return False
        digits = [d for d in numbers.split(",") if d]
        if len(set(digits)) != len(digits) or numbers.endswith(",") and tail:
            return False
        return "</answer>".startswith(tail)

    def __call__(self, batch_id: int, input_ids) -> list[int]:
        text = self.tokenizer.decode(input_ids[self.prompt_length:], skip_special_tokens=True)
        if parse_selection(text).valid and text.endswith("</answer>"):
            return [self.eos]
        allowed = [t for t, piece in self.candidates.items() if self.is_prefix(text + piece)]
        return allowed or [self.eos]


# ---- audio in and out of TRL ----------------------------------------------------------------------
def encode_prompts(processor, texts: list[str], audio_paths: list[str], max_seconds: float):
    """Chat-templated prompts with the clip, through the real Qwen2-Audio processor."""
    from tools.audio import load_audio

    sr = processor.feature_extractor.sampling_rate
    processor.tokenizer.padding_side = "left"  # batched generation continues every row from its last prompt token
    chats = [processor.apply_chat_template([{"role": "user", "content": [{"type": "audio", "audio_url": path},
                                                                         {"type": "text", "text": text}]}],
                                           add_generation_prompt=True, tokenize=False) for text, path in zip(texts, audio_paths)]
    audios = [load_audio(path, sr, max_seconds).samples for path in audio_paths]
    return processor(text=chats, audio=audios, sampling_rate=sr, return_tensors="pt", padding=True)


def generate_selections(model, processor, inputs, config: LMPolicyConfig, do_sample: bool, temperature: float = 1.0):
    """Completion token ids (a list per row, EOS kept, padding dropped) for already-encoded prompts."""
    import torch

    tokenizer = processor.tokenizer
    prompt_length = inputs["input_ids"].shape[1]
    # A sampled <|AUDIO|> would no longer match the clip's features in the log-probability pass.
    audio_tokens = [processor.audio_token, processor.audio_bos_token, processor.audio_eos_token]
    kwargs = dict(max_new_tokens=config.max_completion_length, do_sample=do_sample, pad_token_id=tokenizer.pad_token_id,
                  eos_token_id=tokenizer.eos_token_id, suppress_tokens=tokenizer.convert_tokens_to_ids(audio_tokens))
    if do_sample:
        kwargs.update(temperature=temperature, top_k=0, top_p=1.0)
    if config.constrained_decoding:
        kwargs["prefix_allowed_tokens_fn"] = AnswerGrammar(tokenizer, prompt_length)
    with torch.no_grad():
        out = model.generate(**inputs, **kwargs)
    completions = []
    for row in out[:, prompt_length:].tolist():
        ids = []
        for token in row:
            if token == tokenizer.pad_token_id and token != tokenizer.eos_token_id:
                break
            ids.append(token)
            if token == tokenizer.eos_token_id:
                break
        completions.append(ids)
    return completions


def completion_logprob(model, processor, question: str, audio: str, completion: str, max_seconds: float = 30.0) -> float:
    """log π(completion | clip, question) under ``model``, teacher-forced, EOS included."""
    import torch

    inputs = encode_prompts(processor, [agent_prompt(question)], [audio], max_seconds)
    target = processor.tokenizer(completion, add_special_tokens=False)["input_ids"] + [processor.tokenizer.eos_token_id]
    ids = torch.cat([inputs["input_ids"], torch.tensor([target])], dim=1)
    mask = torch.ones_like(ids)
    with torch.no_grad():
        logits = model(input_ids=ids, attention_mask=mask, input_features=inputs["input_features"],
                       feature_attention_mask=inputs["feature_attention_mask"]).logits
    logp = torch.log_softmax(logits[0, -len(target) - 1:-1].float(), dim=-1)
    return float(logp.gather(1, torch.tensor(target).unsqueeze(1)).sum())


def _trainer_class():
    from trl import GRPOTrainer

    class AudioGRPOTrainer(GRPOTrainer):
        """GRPOTrainer whose rollouts and log-probability passes see the audio."""

        _audio: tuple | None = None
        _audio_paths: list[str] | None = None

        def _generate_and_score_completions(self, inputs):
            self._audio_paths = [x["audio"] for x in inputs]  # aligned with the prompts the rollout receives
            output = super()._generate_and_score_completions(inputs)
            output["input_features"], output["feature_attention_mask"] = self._audio
            return output

        def _compute_loss(self, model, inputs):
            self._audio = (inputs["input_features"], inputs["feature_attention_mask"])
            return super()._compute_loss(model, inputs)

        def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, batch_size=None,
                                               compute_entropy=False, compute_aux_loss=False, **_image_inputs):
            import torch

            features, feature_mask = self._audio
            batch_size = batch_size or input_ids.size(0)
            logps, entropies = [], []
            for start in range(0, input_ids.size(0), batch_size):
                end = min(start + batch_size, input_ids.size(0))
                ids, mask = input_ids[start:end], attention_mask[start:end]
                labels = ids.masked_fill(mask == 0, -100)
                labels[:, :-logits_to_keep] = -100
                with self.accelerator.autocast():
                    out = model(input_ids=ids, attention_mask=mask, input_features=features[start:end].to(ids.device),
                                feature_attention_mask=feature_mask[start:end].to(ids.device), labels=labels,
                                fused_lm_head=True)
                logps.append(out.log_probs[:, -logits_to_keep:])
                if compute_entropy:
                    entropies.append(out.entropy[:, -logits_to_keep:])
            return torch.cat(logps), (torch.cat(entropies) if compute_entropy else None), None

    return AudioGRPOTrainer


def make_rollout(processor, config: LMPolicyConfig):
    """TRL ``rollout_func``: encode prompt + clip, sample one completion per row, stash the features."""

    def rollout(prompts: list[str], trainer) -> dict:
        inputs = encode_prompts(processor, prompts, trainer._audio_paths, config.audio_max_seconds)
        inputs = inputs.to(trainer.accelerator.device)
        unwrapped = trainer.accelerator.unwrap_model(trainer.model)
        completions = generate_selections(unwrapped, processor, inputs, config, do_sample=True,
                                          temperature=trainer.temperature)
        mask = inputs["attention_mask"].bool()
        prompt_ids = [row[m].tolist() for row, m in zip(inputs["input_ids"], mask)]
        trainer._audio = (inputs["input_features"], inputs["feature_attention_mask"])
        return {"prompt_ids": prompt_ids, "completion_ids": completions, "logprobs": None}

    return rollout


# ---- reward: parse, run the tools, ask the reasoner, score -------------------------------------------
class ToolSelectionReward:
    """A TRL reward function: parses each completion, runs the selected tools (cache first), asks the
    frozen reasoner, and returns the differential (or binary) reward; invalid completions get
    ``invalid_reward`` and are counted."""

    def __init__(self, samples_by_id: dict, pool, reasoner, kind: str, tool_cost: float, invalid_reward: float):
        from rewards import get_reward

        self.samples, self.pool, self.reasoner = samples_by_id, pool, reasoner
        self.score = get_reward(kind, tool_cost)
        self.__name__ = f"{kind}_tool_reward"
        self.invalid_reward = invalid_reward
        self.invalid_reasons: dict[str, int] = {}
        self.metrics: dict | None = None  # the trainer's metric lists (TRL averages them into each log line)

    def __call__(self, prompts, completions, sample_id, base_prediction, **_) -> list[float]:
        selections = [parse_selection(c if isinstance(c, str) else c[0]["content"]) for c in completions]
        samples = [self.samples[i] for i in sample_id]
        requests = []
        for sample, selection in zip(samples, selections):
            records = list(self.pool.run(sample.audio, selection.tools).values()) if selection.tools else None
            requests.append((sample, records))
        predictions = self.reasoner.answer_many(requests)
        rewards = self.score(prompts, completions, predictions=predictions, base_predictions=list(base_prediction),
                             answer=[s.answer for s in samples], choices=[s.choices for s in samples],
                             num_tools=[len(s.tools) for s in selections])
        for i, selection in enumerate(selections):
            if not selection.valid:
                rewards[i] = self.invalid_reward
                reason = selection.reason.split(":")[0]
                self.invalid_reasons[reason] = self.invalid_reasons.get(reason, 0) + 1
        if self.metrics is not None:
            self.metrics["selection/invalid_share"].append(sum(not s.valid for s in selections) / len(selections))
            self.metrics["selection/avg_tools"].append(sum(len(s.tools) for s in selections) / len(selections))
        return rewards


# ---- training ---------------------------------------------------------------------------------------
def lm_config(config) -> LMPolicyConfig:
    from ..config import from_dict

    return from_dict(LMPolicyConfig, config.policy.lm, "policy.lm")


def ensure_model(lm: LMPolicyConfig) -> str:
    path = Path(lm.model_id)
    if lm.build_tiny and not (path / "config.json").exists():
        from ..tiny import build_tiny_qwen2_audio

        build_tiny_qwen2_audio(path)
    return lm.model_id


def build_grpo_trainer(config, samples, base_predictions: dict, reward_funcs: list, output_dir: Path):
    """The TRL trainer for the LM policy, wired to our rollout, the given rewards and the run config."""
    import datasets
    import torch
    from transformers import AutoProcessor, Qwen2AudioForConditionalGeneration
    from trl import GRPOConfig as TRLGRPOConfig

    lm = lm_config(config)
    model_id = ensure_model(lm)
    processor = AutoProcessor.from_pretrained(model_id)
    dtype = torch.bfloat16 if lm.bf16 and not lm.use_cpu else torch.float32
    model = Qwen2AudioForConditionalGeneration.from_pretrained(model_id, dtype=dtype)
    rows = [{"prompt": agent_prompt(s.question), "audio": s.audio, "sample_id": s.id,
             "base_prediction": base_predictions[s.id]} for s in samples]
    dataset = datasets.Dataset.from_list(rows)
    grpo = config.grpo
    args = TRLGRPOConfig(
        output_dir=str(output_dir), max_steps=grpo.steps, learning_rate=lm.learning_rate,
        per_device_train_batch_size=lm.per_device_train_batch_size, gradient_accumulation_steps=lm.gradient_accumulation_steps,
        num_generations=grpo.group_size, temperature=grpo.temperature, beta=grpo.beta, epsilon=grpo.clip_epsilon,
        num_iterations=grpo.inner_epochs, max_completion_length=lm.max_completion_length, use_cpu=lm.use_cpu,
        bf16=lm.bf16 and not lm.use_cpu, gradient_checkpointing=lm.gradient_checkpointing, deepspeed=lm.deepspeed,
        save_steps=lm.save_steps, save_strategy="steps", logging_steps=lm.logging_steps, seed=config.seed,
        report_to=["wandb"] if config.logging.wandb and config.logging.wandb_mode != "disabled" else [],
        remove_unused_columns=False, disable_tqdm=not config.logging.progress, save_only_model=False,
        **lm.extra_args)
    # TRL's processor handling assumes images; the audio processor lives in our rollout, TRL gets its tokenizer.
    trainer = _trainer_class()(model=model, reward_funcs=list(reward_funcs), args=args, train_dataset=dataset,
                               processing_class=processor.tokenizer, rollout_func=make_rollout(processor, lm))
    return trainer, processor


def export_lm(directory: Path, model, processor, config, metrics: dict | None = None) -> Path:
    from ..config import to_dict
    from ..plugin import export_plugin

    lm = lm_config(config)

    def write(tmp: Path) -> None:
        model.save_pretrained(tmp, safe_serialization=True)
        processor.save_pretrained(tmp)

    return export_plugin(directory, "lm", write, config.tools.profile, config.tools.settings, config.tools.max_seconds, {
        "encoders": {"policy": "qwen2-audio (in this folder)"}, "prompt": AGENT_PROMPT, "tool_list": tool_list(),
        "policy_config": dataclasses.asdict(lm), "training_config": to_dict(config), "metrics": metrics or {}})


class LMPlugin:
    """A loaded LM plugin: the model hears the clip and writes its tool choice."""

    def __init__(self, directory: Path, manifest: dict):
        from transformers import AutoProcessor, Qwen2AudioForConditionalGeneration

        self.directory, self.manifest = directory, manifest
        self.config = LMPolicyConfig(**manifest["policy_config"])
        self.processor = AutoProcessor.from_pretrained(directory)
        self.model = Qwen2AudioForConditionalGeneration.from_pretrained(directory).eval()
        self.invalid = 0

    @property
    def tools(self) -> list[str]:
        return [t["id"] for t in self.manifest["tools"]]

    def select_many(self, samples) -> list[tuple[str, ...]]:
        chosen = []
        for sample in samples:
            chosen.append(tuple(self.select(sample.audio, sample.question)))
        return chosen

    def select(self, audio: str, question: str) -> list[str]:
        """Greedy tool choice; an unparseable completion selects no tool (and is counted in ``invalid``)."""
        inputs = encode_prompts(self.processor, [agent_prompt(question)], [str(audio)], self.config.audio_max_seconds)
        (ids,) = generate_selections(self.model, self.processor, inputs, self.config, do_sample=False)
        selection = parse_selection(self.processor.tokenizer.decode(ids, skip_special_tokens=True))
        self.invalid += not selection.valid
        return list(selection.tools)


def run_lm_train(config, resume: bool = False) -> dict:
    """The main job with the LM policy: tools, y_base, TRL GRPO, plugin, evaluation."""
    import os

    from ..config import save_config
    from ..pipeline import load_splits, run_eval, tool_records
    from ..reasoners import build_reasoner
    from tools.pool import ToolPool

    from accelerate import PartialState

    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    state = PartialState()  # one process here; one per GPU under `accelerate launch`
    run_dir = config.run_dir
    checkpoints = run_dir / "trainer"
    if not resume and checkpoints.exists() and any(checkpoints.glob("checkpoint-*")):
        raise FileExistsError(f"{run_dir} already holds a run: use --resume to continue it, or another name")
    run_dir.mkdir(parents=True, exist_ok=True)
    save_config(config, run_dir / "config.yaml")
    with state.main_process_first():  # rank 0 fills the tool and answer caches, the others then read them
        splits = load_splits(config)
        pool = ToolPool(config.tools)
        records = tool_records(config, splits.train + splits.test, pool)
        reasoner = build_reasoner(config.reasoner, config.answer_cache_dir, config.tools.max_seconds)
        base = dict(zip([s.id for s in splits.train], reasoner.answer_many([(s, None) for s in splits.train])))
    reward = ToolSelectionReward({s.id: s for s in splits.train}, pool, reasoner, config.reward.kind,
                                 config.reward.tool_cost, lm_config(config).invalid_reward)
    trainer, processor = build_grpo_trainer(config, splits.train, base, [reward], checkpoints)
    reward.metrics = trainer._metrics["train"]
    started = time.perf_counter()
    trainer.train(resume_from_checkpoint=True if resume else None)
    train_seconds = time.perf_counter() - started
    reasoner.close()
    if not state.is_main_process:
        return None
    history = [row for row in trainer.state.log_history if "loss" in row or "reward" in row]
    (run_dir / "train_log.jsonl").write_text("".join(json.dumps(row) + "\n" for row in history))
    summary = {"steps": trainer.state.global_step, "train_seconds": round(train_seconds, 1),
               "invalid_reasons": reward.invalid_reasons, "final": history[-1] if history else None}
    plugin_dir = export_lm(run_dir / "plugin", trainer.accelerator.unwrap_model(trainer.model), processor, config,
                           {"training": summary})
    metrics = run_eval(config, run_dir, plugin_dir, splits.test, records, splits.test_name)
    metrics["training"] = summary
    (run_dir / "metrics.json").write_text(json.dumps(metrics, indent=2))
    return metrics
