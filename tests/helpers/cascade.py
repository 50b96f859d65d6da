"""What the cascade's tests share: two records, a sample, and the reference its tree scoring is held to."""

from __future__ import annotations

from autagent.data.sample import Sample
from autagent.reasoners.cascade.scoring import Prompt

TEMPO = {"tool": "tempo", "output": {"bpm": 90.0, "beats": []}, "backend": "b", "version": "v"}
CHORDS = {"tool": "chords", "output": [{"start": 0.0, "end": 2.0, "chord": "A#:min"}], "backend": "b", "version": "v"}


def cascade_sample(question="How fast is the music?", choices=("90 BPM", "120 BPM", "slow", "fast"), sid="s"):
    answer = choices[0] if choices else "fast"
    return Sample(id=sid, audio="/nonexistent.wav", question=question, choices=tuple(choices), answer=answer)


def naive_scores(model, prompt: Prompt) -> list[float]:
    """Each choice's summed log-likelihood from its own full forward pass (no tree, no sharing)."""
    import torch

    context = [t for _, ids in prompt.pieces for t in ids]
    scores = []
    for ids in prompt.choices:
        with torch.inference_mode():
            logp = torch.log_softmax(model(torch.tensor([context + ids])).logits[0].float(), -1)
        scores.append(float(sum(logp[len(context) - 1 + k, t] for k, t in enumerate(ids))))
    return scores
