"""Small, pure audio builders for the embedded benchmark: espeak-ng speech, fluidsynth music,
synthesised tones and sound effects, and mixing.  Every function returns float32 mono at ``SR``.
"""
from __future__ import annotations

import io
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

SR = 22050
SOUNDFONTS = ("/usr/share/sounds/sf2/FluidR3_GM.sf2", "/usr/share/sounds/sf2/default-GM.sf2")


class SynthError(RuntimeError):
    pass


def _require(binary: str) -> str:
    found = shutil.which(binary)
    if not found:
        raise SynthError(f"{binary} not found: run `make setup` (it installs espeak-ng and fluidsynth via apt)")
    return found


def _read_wav_bytes(data: bytes) -> np.ndarray:
    import librosa
    import soundfile as sf

    samples, sr = sf.read(io.BytesIO(data), dtype="float32", always_2d=True)
    mono = samples.mean(axis=1)
    return librosa.resample(mono, orig_sr=sr, target_sr=SR) if sr != SR else mono


def speech(text: str, voice: str = "en-us", rate: int = 160, pitch: int = 50, amplitude: int = 100,
           word_gap: int = 0) -> np.ndarray:
    """espeak-ng speech: ``rate`` words/min, ``pitch`` 0-99, ``amplitude`` 0-200, ``word_gap`` x10 ms."""
    cmd = [_require("espeak-ng"), "-v", voice, "-s", str(rate), "-p", str(pitch), "-a", str(amplitude),
           "-g", str(word_gap), "--stdout", text]
    result = subprocess.run(cmd, capture_output=True, check=False)
    if result.returncode != 0 or not result.stdout:
        raise SynthError(f"espeak-ng failed for {text!r}: {result.stderr.decode(errors='replace')}")
    return _read_wav_bytes(result.stdout)


def render_midi(notes: list[tuple[float, float, int, int]], program: int = 0, drums: bool = False,
                duration: float | None = None, gain: float = 0.8) -> np.ndarray:
    """Render ``(start_s, end_s, midi_pitch, velocity)`` notes with fluidsynth and a GM soundfont."""
    import mido

    soundfont = next((f for f in SOUNDFONTS if os.path.exists(f)), None)
    if soundfont is None:
        raise SynthError("no General-MIDI soundfont found: run `make setup` (installs fluid-soundfont-gm)")
    channel = 9 if drums else 0
    ticks_per_beat, tempo = 480, 500000  # 120 BPM => 960 ticks per second
    events = []
    for start, end, pitch, velocity in notes:
        events.append((start, mido.Message("note_on", note=int(pitch), velocity=int(velocity), channel=channel)))
        events.append((end, mido.Message("note_off", note=int(pitch), velocity=0, channel=channel)))
    events.sort(key=lambda e: (e[0], e[1].type == "note_on"))
    track = mido.MidiTrack([mido.MetaMessage("set_tempo", tempo=tempo)])
    if not drums:
        track.append(mido.Message("program_change", program=program, channel=channel))
    now = 0
    for time_s, message in events:
        tick = int(round(time_s * 960))
        track.append(message.copy(time=max(tick - now, 0)))
        now = max(tick, now)
    midi = mido.MidiFile(ticks_per_beat=ticks_per_beat)
    midi.tracks.append(track)
    with tempfile.TemporaryDirectory() as tmp:
        mid_path, wav_path = Path(tmp) / "in.mid", Path(tmp) / "out.wav"
        midi.save(mid_path)
        cmd = [_require("fluidsynth"), "-ni", "-g", str(gain), "-r", str(SR), "-F", str(wav_path), soundfont, str(mid_path)]
        result = subprocess.run(cmd, capture_output=True, check=False)
        if result.returncode != 0 or not wav_path.exists():
            raise SynthError(f"fluidsynth failed: {result.stderr.decode(errors='replace')[-300:]}")
        audio = _read_wav_bytes(wav_path.read_bytes())
    if duration is not None:
        audio = fit(audio, duration)
    return audio


def fit(audio: np.ndarray, duration: float) -> np.ndarray:
    """Cut or zero-pad to exactly ``duration`` seconds."""
    n = int(round(duration * SR))
    return audio[:n] if len(audio) >= n else np.pad(audio, (0, n - len(audio)))


def tone(freqs, duration: float, harmonics: int = 1, decay: float = 0.0) -> np.ndarray:
    t = np.arange(int(duration * SR)) / SR
    out = sum(np.sin(2 * np.pi * f * k * t) / k for f in np.atleast_1d(freqs) for k in range(1, harmonics + 1))
    return (out * np.exp(-decay * t)).astype(np.float32)


def sweep_siren(duration: float, low: float, high: float, period: float) -> np.ndarray:
    t = np.arange(int(duration * SR)) / SR
    freq = low + (high - low) * 0.5 * (1 - np.cos(2 * np.pi * t / period))
    return np.sin(2 * np.pi * np.cumsum(freq) / SR).astype(np.float32)


def beeps(duration: float, freq: float, on: float, off: float) -> np.ndarray:
    t = np.arange(int(duration * SR)) / SR
    gate = ((t % (on + off)) < on).astype(np.float32)
    return (np.sin(2 * np.pi * freq * t) * gate).astype(np.float32)


def noise(duration: float, rng: np.random.Generator, color: str = "white") -> np.ndarray:
    white = rng.standard_normal(int(duration * SR)).astype(np.float32)
    if color == "brown":
        brown = np.cumsum(white)
        brown -= np.convolve(brown, np.ones(2001) / 2001, mode="same")
        return brown / (np.abs(brown).max() + 1e-9)
    return white / 4.0


def normalise(audio: np.ndarray, peak_db: float = -3.0) -> np.ndarray:
    peak = float(np.max(np.abs(audio))) or 1.0
    return (audio / peak * 10 ** (peak_db / 20)).astype(np.float32)


def mix(foreground: np.ndarray, background: np.ndarray, snr_db: float) -> np.ndarray:
    """Foreground plus background at ``snr_db`` (RMS ratio), length of the longer."""
    n = max(len(foreground), len(background))
    fg, bg = np.pad(foreground, (0, n - len(foreground))), np.pad(background, (0, n - len(background)))
    rms = lambda x: float(np.sqrt(np.mean(x ** 2)) + 1e-9)  # noqa: E731
    return fg + bg * (rms(fg) / rms(bg)) * 10 ** (-snr_db / 20)


def write_wav(path: str | Path, audio: np.ndarray) -> None:
    import soundfile as sf

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.wav")
    sf.write(str(tmp), audio.astype(np.float32), SR, subtype="PCM_16")
    tmp.replace(path)
