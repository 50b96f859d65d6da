"""Small, pure audio builders for the embedded benchmark: espeak-ng speech, fluidsynth music,
recorded sounds, synthesised tones and sound effects, and mixing.  Every function returns float32 mono at ``SR``.
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


def recording(path: str | Path) -> np.ndarray:
    """A recorded sound file (any format libsndfile reads), mono at ``SR``."""
    path = Path(path)
    if not path.exists():
        raise SynthError(f"recording {path} not found: run `make setup` (it installs tuxpaint-stamps-default via apt)")
    return _read_wav_bytes(path.read_bytes())


NO_SOUND_SERVER = {"PULSE_SERVER": "unix:/nonexistent"}
"""espeak-ng and fluidsynth link libpulse and connect to a sound server even when writing to a file.  On a
machine (or a ``$HOME``) where no PulseAudio client ran before, libpulse first creates its runtime folder,
trying names drawn from C ``rand()``; espeak-ng's breathy voices (``+f2`` and others) draw their noise
from the same unseeded ``rand()``, so the first clip of a cold machine came out different bytes from the
same clip later.  An impossible server address makes libpulse fail at once, before touching ``rand()``."""


def _render(cmd: list[str]) -> subprocess.CompletedProcess:
    """Run a synthesiser with no sound server to find (:data:`NO_SOUND_SERVER`)."""
    return subprocess.run(cmd, capture_output=True, check=False, env={**os.environ, **NO_SOUND_SERVER})


def speech(
    text: str, voice: str = "en-us", rate: int = 160, pitch: int = 50, amplitude: int = 100, word_gap: int = 0
) -> np.ndarray:
    """espeak-ng speech: ``rate`` words/min, ``pitch`` 0-99, ``amplitude`` 0-200, ``word_gap`` x10 ms."""
    cmd = [
        _require("espeak-ng"),
        "-v",
        voice,
        "-s",
        str(rate),
        "-p",
        str(pitch),
        "-a",
        str(amplitude),
        "-g",
        str(word_gap),
        "--stdout",
        text,
    ]
    result = _render(cmd)
    if result.returncode != 0 or not result.stdout:
        raise SynthError(f"espeak-ng failed for {text!r}: {result.stderr.decode(errors='replace')}")
    return _read_wav_bytes(result.stdout)


def render_midi(
    notes: list[tuple[float, float, int, int]],
    program: int = 0,
    drums: bool = False,
    duration: float | None = None,
    gain: float = 0.8,
) -> np.ndarray:
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
        cmd = [
            _require("fluidsynth"),
            "-ni",
            "-g",
            str(gain),
            "-r",
            str(SR),
            "-F",
            str(wav_path),
            soundfont,
            str(mid_path),
        ]
        result = _render(cmd)
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
    rms = lambda x: float(np.sqrt(np.mean(x**2)) + 1e-9)  # noqa: E731
    return fg + bg * (rms(fg) / rms(bg)) * 10 ** (-snr_db / 20)


def write_wav(path: str | Path, audio: np.ndarray) -> None:
    import soundfile as sf

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.stem + ".tmp.wav")
    sf.write(str(tmp), audio.astype(np.float32), SR, subtype="PCM_16")
    tmp.replace(path)


# ---- everyday sounds (numpy only) --------------------------------------------------------------------
def _envelope(n: int, attack: float, decay: float) -> np.ndarray:
    t = np.arange(n) / SR
    return (1 - np.exp(-t / max(attack, 1e-4))) * np.exp(-t / max(decay, 1e-4))


def _place(out: np.ndarray, sound: np.ndarray, start_s: float) -> None:
    """Add ``sound`` into ``out`` from ``start_s`` (a negative start cuts its head), in place."""
    start = int(start_s * SR)
    if start < 0:
        sound, start = sound[-start:], 0
    end = min(len(out), start + len(sound))
    if start < end:
        out[start:end] += sound[: end - start]


def lowpass(x: np.ndarray, cutoff_hz: float) -> np.ndarray:
    from scipy.signal import butter, sosfilt

    return sosfilt(butter(4, cutoff_hz, "low", fs=SR, output="sos"), x).astype(np.float32)


def bandpass(x: np.ndarray, low_hz: float, high_hz: float) -> np.ndarray:
    from scipy.signal import butter, sosfilt

    return sosfilt(butter(4, [low_hz, high_hz], "band", fs=SR, output="sos"), x).astype(np.float32)


def rain(duration: float, rng: np.random.Generator) -> np.ndarray:
    hiss = bandpass(noise(duration, rng), 800, 8000) * 0.3
    drops = np.zeros_like(hiss)
    for t in rng.uniform(0, duration, int(duration * 40)):
        _place(drops, tone(rng.uniform(1500, 4000), 0.02, decay=200.0) * rng.uniform(0.2, 1.0), t)
    return hiss + drops


def wind(duration: float, rng: np.random.Generator) -> np.ndarray:
    gust = 0.5 + 0.5 * np.sin(2 * np.pi * np.arange(int(duration * SR)) / SR * rng.uniform(0.15, 0.4))
    return lowpass(noise(duration, rng), 600) * gust.astype(np.float32) * 3


def thunder(duration: float, rng: np.random.Generator) -> np.ndarray:
    out = np.zeros(int(duration * SR), dtype=np.float32)
    for t in np.arange(rng.uniform(0, 0.5), duration - 0.5, rng.uniform(1.5, 2.5)):
        n = int(rng.uniform(1.0, 2.0) * SR)
        _place(out, lowpass(rng.standard_normal(n).astype(np.float32), 150) * _envelope(n, 0.05, 0.6) * 4, t)
    return out


def siren(duration: float, rng: np.random.Generator) -> np.ndarray:
    return sweep_siren(duration, rng.uniform(550, 700), rng.uniform(1100, 1500), rng.uniform(1.5, 3.0))


def beeping(duration: float, rng: np.random.Generator) -> np.ndarray:
    return beeps(duration, rng.uniform(900, 2500), on=0.15, off=float(rng.uniform(0.15, 0.4)))


def doorbell(duration: float, rng: np.random.Generator) -> np.ndarray:
    out = np.zeros(int(duration * SR), dtype=np.float32)
    base = rng.uniform(600, 800)
    for t in np.arange(0.1, duration - 1.0, 2.2):
        _place(out, tone(base * 1.26, 1.0, harmonics=3, decay=3.0), t)
        _place(out, tone(base, 1.2, harmonics=3, decay=2.5), t + 0.5)
    return out


def clock(duration: float, rng: np.random.Generator) -> np.ndarray:
    out = np.zeros(int(duration * SR), dtype=np.float32)
    for k, t in enumerate(np.arange(0.05, duration, 0.5)):
        _place(
            out,
            bandpass(rng.standard_normal(400).astype(np.float32), 2000 + 800 * (k % 2), 6000)
            * _envelope(400, 0.001, 0.004),
            t,
        )
    return out


def footsteps(duration: float, rng: np.random.Generator) -> np.ndarray:
    out = np.zeros(int(duration * SR), dtype=np.float32)
    for t in np.arange(0.1, duration, rng.uniform(0.45, 0.6)):
        n = int(0.12 * SR)
        _place(out, lowpass(rng.standard_normal(n).astype(np.float32), 900) * _envelope(n, 0.003, 0.03) * 3, t)
    return out


def typing(duration: float, rng: np.random.Generator) -> np.ndarray:
    out = np.zeros(int(duration * SR), dtype=np.float32)
    t = 0.05
    while t < duration:
        _place(out, bandpass(rng.standard_normal(300).astype(np.float32), 1500, 7000) * _envelope(300, 0.001, 0.006), t)
        t += rng.uniform(0.06, 0.25)
    return out


def engine(duration: float, rng: np.random.Generator) -> np.ndarray:
    t = np.arange(int(duration * SR)) / SR
    rpm = rng.uniform(25, 45) * (1 + 0.03 * np.sin(2 * np.pi * 0.7 * t))
    phase = 2 * np.pi * np.cumsum(rpm) / SR
    hum = sum(np.sin(k * phase) / k for k in range(1, 8)).astype(np.float32)
    return hum + lowpass(noise(duration, rng), 400)


def crowd(duration: float, rng: np.random.Generator, voices, sentences) -> np.ndarray:
    """Babble: several espeak-ng voices talking over each other, none intelligible."""
    out = np.zeros(int(duration * SR), dtype=np.float32)
    for _ in range(5):
        said = speech(
            str(rng.choice(sentences)),
            voice=str(rng.choice(voices)),
            rate=int(rng.integers(150, 200)),
            pitch=int(rng.integers(20, 80)),
        )
        _place(out, said * rng.uniform(0.5, 1.0), rng.uniform(-0.5, 1.0))
    return lowpass(out, 3000)


def place(background: np.ndarray, sound: np.ndarray, start_s: float) -> np.ndarray:
    """``background`` (extended if needed) with ``sound`` added from ``start_s``."""
    end = int(start_s * SR) + len(sound)
    out = np.pad(background, (0, max(0, end - len(background)))).astype(np.float32)
    _place(out, sound, start_s)
    return out
