"""GRPO training of the router policy: the paper's Algorithm 1, written as one readable loop.

Per step, for a batch of B queries:
  1. y_base: the reasoner's no-tool answer, computed once per query for the whole run;
  2. G tool subsets per query sampled from π_old (temperature T);
  3. the reasoner answers with each subset's cached tool records; a subset drawn twice in a
     group, or already asked in an earlier step, is not asked again;
  4. rewards (differential or binary, TRL signature), advantages (``grpo.advantage``: the group
     normalisation of Eq. 2, Algorithm 1's A = r, or batch normalisation);
  5. ``inner_epochs`` passes of the clipped objective with a KL penalty to the frozen reference.

A checkpoint after every ``checkpoint_every`` steps holds the policy, the optimiser state and the
step; batches and sampling are functions of (seed, step), so a resumed run continues exactly where
the killed one stopped.  Everything is safetensors/JSON, nothing pickled.
"""

from __future__ import annotations

import copy
import json
import shutil
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from safetensors.torch import load_file, save_file

from rewards import get_reward
from rewards.scoring import is_correct

from ...data.progress import progress as tqdm
from ...data.sample import Sample
from ...reasoners.base import ask_with_records
from ..grpo import advantages, grpo_loss
from .answers import AnswerSource, TrainCounters
from .config import RouterGRPOConfig
from .exact import expected_loss, subset_matrix
from .model import Router, drop_inputs, subset_ids


@dataclass
class TrainingRun:
    """Where one trained router writes and reports; the default writes nothing (a cross-validation fold)."""

    directory: Path | None = None
    """Checkpoints and ``train_log.jsonl`` go here."""
    checkpoint_every: int = 1
    """Steps between checkpoints (the last step always writes one)."""
    logger: object = None
    """W&B-like ``log(metrics, step=)``; None: not logged."""
    progress: bool = False
    """Show a progress bar."""
    dev: tuple[torch.Tensor, list[Sample]] | None = None
    """(features, samples) of dev queries, scored every ``eval_every`` steps."""
    eval_every: int = 25


class RouterTrainer:
    """GRPO on a router: ``answers`` says where the reasoner's answers come from, ``grpo`` how it trains (the
    reward, its price and the seed included), ``run`` where the run writes;
    ``columns`` (input name -> its feature columns) serve ``policy.router.input_dropout``.  The reference
    policy of the KL term is a frozen copy of ``policy`` as given (a warm start's routers)."""

    def __init__(
        self,
        policy: Router,
        features: torch.Tensor,
        samples: list[Sample],
        answers: AnswerSource,
        grpo: RouterGRPOConfig,
        run: TrainingRun | None = None,
        columns: dict | None = None,
    ):
        if len(samples) != features.shape[0]:
            raise ValueError(f"{len(samples)} samples but {features.shape[0]} feature rows")
        self.policy, self.features, self.samples, self.answers = policy, features, samples, answers
        self.cfg, self.seed, self.tool_ids = grpo, grpo.seed, answers.tool_ids
        self.reward_fn = get_reward(grpo.reward_kind, grpo.tool_cost)
        self.reward_kind, self.tool_cost = grpo.reward_kind, grpo.tool_cost
        self.reference = copy.deepcopy(policy)
        self.reference.requires_grad_(False)
        self.optimizer = torch.optim.AdamW(policy.parameters(), lr=grpo.learning_rate, weight_decay=grpo.weight_decay)
        self.run = run or TrainingRun()
        self.run_dir = Path(self.run.directory) if self.run.directory else None
        self.columns = columns or {}
        missing = set(policy.config.input_dropout) - set(self.columns)
        if missing:
            raise ValueError(
                f"policy.router.input_dropout names {sorted(missing)}, but no feature columns were given for them"
            )
        self.step = 0

    @property
    def counters(self) -> TrainCounters:
        return self.answers.counters

    @property
    def base_predictions(self) -> dict[str, str | None]:
        return self.answers.base_predictions

    # -- Algorithm 1, line by line ----------------------------------------------------------------
    def batch_indices(self, step: int) -> np.ndarray:
        """The queries of ``step``: consecutive slices of per-epoch permutations seeded by (seed, epoch)."""
        n, b = len(self.samples), self.cfg.batch_size
        start = step * b
        order = []
        epoch = start // n
        while len(order) < (start % n) + b:
            order.extend(np.random.default_rng([self.seed, epoch]).permutation(n).tolist())
            epoch += 1
        return np.array(order[start % n : start % n + b])

    def rewards_of(self, batch: list[Sample], draws: torch.Tensor) -> tuple[torch.Tensor, list[tuple]]:
        """``[B, G]`` rewards of the 0/1 subsets ``draws [B, G, T]`` (the reasoner asked only for new ones),
        and the (query, subset, answer) of each, flattened."""
        subsets = [[subset_ids(row, self.tool_ids) for row in group] for group in draws]
        predictions = self.answers.answers_for(batch, subsets)
        flat = [(s, z, p) for s, group, preds in zip(batch, subsets, predictions) for z, p in zip(group, preds)]
        rewards = self.reward_fn(
            prompts=[s.question for s, _, _ in flat],
            completions=[",".join(z) for _, z, _ in flat],
            predictions=[p for _, _, p in flat],
            base_predictions=[self.base_predictions[s.id] for s, _, _ in flat],
            answer=[s.answer for s, _, _ in flat],
            choices=[s.choices for s, _, _ in flat],
            num_tools=[len(z) for _, z, _ in flat],
        )
        return torch.tensor(rewards, dtype=torch.float32).view(draws.shape[0], draws.shape[1]), flat

    def train_step(self) -> dict:
        if self.cfg.objective == "expected":
            return self.expected_step()
        started = time.perf_counter()
        cfg = self.cfg
        index = self.batch_indices(self.step)
        batch = [self.samples[i] for i in index]
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.step)
        feats = self.features[index]
        if self.policy.config.input_dropout:
            feats = drop_inputs(feats, self.columns, self.policy.config.input_dropout, generator)
        draws = self.policy.sample(feats, cfg.group_size, generator, cfg.temperature)  # [B, G, T]
        reward_matrix, flat = self.rewards_of(batch, draws)
        per_tool = cfg.credit == "tool"
        if per_tool:  # [B, G, T]: what flipping each tool's decision would change
            tools = draws.shape[-1]
            every_flip = torch.cat([flipped(draws, t) for t in range(tools)], dim=1)  # one ask for all: [B, T·G, T]
            flip_rewards = self.rewards_of(batch, every_flip)[0].view(len(batch), tools, cfg.group_size)
            advantage = reward_matrix.unsqueeze(-1) - flip_rewards.transpose(1, 2)
        else:
            advantage = advantages(reward_matrix, cfg.advantage, cfg.advantage_epsilon)
        with torch.no_grad():
            logp_old = self.policy.log_prob(feats, draws, cfg.temperature, per_tool)
            logp_ref = self.reference.log_prob(feats, draws, cfg.temperature, per_tool)
        for _ in range(cfg.inner_epochs):
            logp_new = self.policy.log_prob(feats, draws, cfg.temperature, per_tool)
            loss, stats = grpo_loss(logp_new, logp_old, logp_ref, advantage, cfg.clip_epsilon, cfg.beta)
            if per_tool:  # summed over the tools, as a subset's log-probability sums them: the same step size
                loss = loss * draws.shape[-1]
            if cfg.entropy_coef:
                entropy = self.policy.tool_entropy(feats, cfg.temperature)
                loss, stats = loss - cfg.entropy_coef * entropy, {**stats, "entropy": entropy.item()}
            self._update(loss)
        self.step += 1
        self.counters.steps += 1
        self.counters.naive_reasoner_calls += len(batch) * (cfg.group_size * (1 + per_tool * len(self.tool_ids)) + 1)
        self.counters.naive_tool_runs += int(draws.sum())
        r = reward_matrix.flatten()
        calls = draws.sum(dim=(0, 1))
        metrics = {
            "step": self.step,
            "loss": loss.item(),
            **stats,
            "reward_mean": float(r.mean()),
            "reward_std": float(r.std()),
            "reward_share_neg": float((r < 0).float().mean()),
            "reward_share_zero": float((r == 0).float().mean()),
            "reward_share_pos": float((r > 0).float().mean()),
            "accuracy_sampled": float(np.mean([is_correct(s, p) for s, _, p in flat])),
            "accuracy_no_tool": float(np.mean([is_correct(s, self.base_predictions[s.id]) for s in batch])),
            "avg_tools": float(draws.sum(-1).mean()),
            "reasoner_failures": self.answers.reasoner.failures,
            "step_seconds": time.perf_counter() - started,
            **{f"tool_share/{t}": float(c) / draws.shape[0] / draws.shape[1] for t, c in zip(self.tool_ids, calls)},
        }
        return metrics

    def _update(self, loss: torch.Tensor) -> None:
        """One optimiser step on ``loss`` (gradients clipped), shared by the sampled and the exact objective."""
        self.optimizer.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(self.policy.parameters(), self.cfg.max_grad_norm)
        self.optimizer.step()

    def expected_step(self) -> dict:
        """One step of the exact objective (:mod:`.exact`) on the step's batch of queries."""
        started = time.perf_counter()
        cfg = self.cfg
        index = self.batch_indices(self.step)
        all_rewards, asked = self.answers.expected_rewards(self.samples, self.reward_kind, self.tool_cost)
        rewards, mask = all_rewards[index], (asked[index] if asked is not None else None)
        generator = torch.Generator().manual_seed(self.seed * 1_000_003 + self.step)
        feats = self.features[index]
        if self.policy.config.input_dropout:
            feats = drop_inputs(feats, self.columns, self.policy.config.input_dropout, generator)
        subsets = subset_matrix(len(self.tool_ids))
        with torch.no_grad():
            reference = self.reference.logits(feats)
        for _ in range(cfg.inner_epochs):
            loss, stats = expected_loss(self.policy.logits(feats), reference, rewards, subsets, cfg.beta, mask)
            self._update(loss)
        self.step += 1
        self.counters.steps += 1
        with torch.no_grad():
            probs = torch.sigmoid(self.policy.logits(feats))
        return {
            "step": self.step,
            "loss": loss.item(),
            **stats,
            "reward_mean": stats["expected_reward"],
            "avg_tools": float(probs.sum(-1).mean()),
            "step_seconds": time.perf_counter() - started,
            **{f"tool_share/{t}": float(p) for t, p in zip(self.tool_ids, probs.mean(0))},
        }

    def dev_accuracy(self) -> dict:
        feats, samples = self.run.dev
        subsets = [subset_ids(row, self.tool_ids) for row in self.policy.select(feats)]
        replies = ask_with_records(self.answers.reasoner, samples, self.answers.records, subsets)
        return {
            "dev_accuracy": float(np.mean([is_correct(s, r.text) for s, r in zip(samples, replies)])),
            "dev_avg_tools": float(np.mean([len(z) for z in subsets])),
        }

    def train(self, resume: bool = False) -> list[dict]:
        if resume:
            self.load_latest()
        elif self.run_dir is not None and (self.run_dir / "checkpoints").exists():
            raise FileExistsError(
                f"{self.run_dir}/checkpoints exists: pass --resume to continue that run, "
                f"or choose another run name / remove the directory"
            )
        if self.run_dir is not None:
            self.run_dir.mkdir(parents=True, exist_ok=True)
        if self.cfg.objective == "expected" and self.answers.table is None:
            raise ValueError(
                "policy.router.objective expected reads every subset's reward from an answer table: "
                "policy.router.table.enabled"
            )
        if self.step < self.cfg.steps:  # a zero-step run (a warm start exported as it is) asks nothing
            self.answers.baseline(self.samples)
        history, run = [], self.run
        bar = tqdm(total=self.cfg.steps, initial=self.step, desc="grpo", unit="step", disable=not run.progress)
        while self.step < self.cfg.steps:
            metrics = self.train_step()
            if run.dev is not None and (self.step % run.eval_every == 0 or self.step == self.cfg.steps):
                metrics.update(self.dev_accuracy())
            history.append(metrics)
            self.log(metrics)
            if self.run_dir is not None and (self.step % run.checkpoint_every == 0 or self.step == self.cfg.steps):
                self.save_checkpoint()
            bar.update(1)
            bar.set_postfix(reward=f"{metrics['reward_mean']:+.2f}", tools=f"{metrics['avg_tools']:.2f}", refresh=False)
        bar.close()
        return history

    # -- logging and checkpoints ------------------------------------------------------------------
    def log(self, metrics: dict) -> None:
        if self.run_dir is not None:
            with open(self.run_dir / "train_log.jsonl", "a") as handle:
                handle.write(json.dumps(metrics) + "\n")
        if self.run.logger is not None:
            self.run.logger.log(metrics, step=metrics["step"])

    def save_checkpoint(self) -> Path:
        """``checkpoints/step-N``: written to a temporary folder, then renamed; the two newest are kept."""
        root = self.run_dir / "checkpoints"
        root.mkdir(parents=True, exist_ok=True)
        final = root / f"step-{self.step:06d}"
        tmp = root / f".tmp-step-{self.step:06d}"
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir()
        save_file({k: v.contiguous() for k, v in self.policy.state_dict().items()}, tmp / "policy.safetensors")
        save_file({k: v.contiguous() for k, v in self.reference.state_dict().items()}, tmp / "reference.safetensors")
        tensors, meta = optimizer_to_tensors(self.optimizer)
        save_file(tensors, tmp / "optimizer.safetensors")
        state = {"step": self.step, "optimizer": meta, **self.answers.state()}
        (tmp / "state.json").write_text(json.dumps(state))
        shutil.rmtree(final, ignore_errors=True)
        tmp.rename(final)
        for old in sorted(root.glob("step-*"))[:-2]:
            shutil.rmtree(old, ignore_errors=True)
        return final

    def load_latest(self) -> None:
        root = self.run_dir / "checkpoints" if self.run_dir else None
        found = sorted(root.glob("step-*")) if root and root.exists() else []
        if not found:
            raise FileNotFoundError(f"--resume: no checkpoint under {root}")
        path = found[-1]
        self.policy.load_state_dict(load_file(path / "policy.safetensors"))
        self.reference.load_state_dict(load_file(path / "reference.safetensors"))
        state = json.loads((path / "state.json").read_text())
        optimizer_from_tensors(self.optimizer, load_file(path / "optimizer.safetensors"), state["optimizer"])
        self.step = state["step"]
        self.answers.load_state(state)
        log = self.run_dir / "train_log.jsonl"
        if log.exists():  # drop log lines of steps after the checkpoint (the step that was lost)
            kept = [line for line in log.read_text().splitlines() if line and json.loads(line)["step"] <= self.step]
            log.write_text("".join(line + "\n" for line in kept))


def flipped(draws: torch.Tensor, tool: int) -> torch.Tensor:
    """``draws`` with tool ``tool``'s decision reversed in every subset."""
    out = draws.clone()
    out[..., tool] = 1 - out[..., tool]
    return out


def optimizer_to_tensors(optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """An optimiser's state as flat tensors plus JSON metadata (no pickle)."""
    state = optimizer.state_dict()
    tensors, meta = {}, {"param_groups": state["param_groups"], "scalars": {}}
    for pid, slots in state["state"].items():
        for name, value in slots.items():
            if torch.is_tensor(value):
                tensors[f"{pid}.{name}"] = value.contiguous()
            else:
                meta["scalars"][f"{pid}.{name}"] = value
    return tensors, meta


def optimizer_from_tensors(optimizer: torch.optim.Optimizer, tensors: dict, meta: dict) -> None:
    state: dict = {}
    for key, value in list(tensors.items()) + list(meta["scalars"].items()):
        pid, name = key.split(".", 1)
        state.setdefault(int(pid), {})[name] = value
    optimizer.load_state_dict({"state": state, "param_groups": meta["param_groups"]})
