"""op_fuzz families: CTC decoding (greedy and beam search) and audio front ends."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from op_fuzz import Case


def ctc(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count * 2):
        frames, batch, classes = (int(d) for d in rng.integers(1, 7, size=3))
        dtype = str(rng.choice(["float32", "float64"]))
        x = rng.normal(size=(frames, batch, classes)).astype(dtype)
        if rng.random() < 0.3:
            x = np.round(x)  # ties
        lengths = rng.integers(0, frames + 1, size=batch).astype(np.int32)
        attrs = {
            "merge_repeated": bool(rng.random() < 0.5),
            "blank_index": int(rng.choice([-1, 0, classes - 1])),
        }
        cases.append(Case("CTCGreedyDecoder", {"inputs": x, "sequence_length": lengths}, attrs))
        beam = int(rng.choice([1, 2, 3, 8, 20]))
        beam_attrs = {
            "beam_width": beam,
            "top_paths": int(rng.integers(1, min(beam, 3) + 1)),
            "merge_repeated": bool(rng.random() < 0.5),
        }
        cases.append(Case("CTCBeamSearchDecoder", {"inputs": x, "sequence_length": lengths}, beam_attrs))
    return cases


def _wav_bytes(samples: np.ndarray, rate: int) -> bytes:
    import io
    import wave

    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(samples.shape[1])
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(samples.astype("<i2").tobytes())
    return out.getvalue()


def audio(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        n, channels = int(rng.integers(0, 2000)), int(rng.integers(1, 3))
        pcm = rng.integers(-32768, 32768, size=(n, channels))
        wav = np.array(_wav_bytes(pcm, int(rng.choice([8000, 16000]))), dtype=object)
        attrs = {
            "desired_channels": int(rng.choice([-1, 1, 2])),
            "desired_samples": int(rng.choice([-1, 100, 3000])),
        }
        cases.append(Case("DecodeWav", {"contents": wav}, attrs))
        x = rng.normal(size=(int(rng.integers(0, 3000)), channels)).astype(np.float32) * 0.3
        window = int(rng.choice([2, 30, 64, 200, 480]))
        spec_attrs = {
            "window_size": window,
            "stride": int(rng.integers(1, 300)),
            "magnitude_squared": bool(rng.random() < 0.5),
        }
        cases.append(Case("AudioSpectrogram", {"input": x}, spec_attrs))
        bins = int(rng.choice([129, 257, 513]))
        spectrogram = (
            np.abs(rng.normal(size=(channels, int(rng.integers(0, 5)), bins))).astype(np.float32) ** 2
        )
        rate = np.array(int(rng.choice([8000, 16000, 44100])), np.int32)
        filters = int(rng.choice([20, 40]))
        mfcc_attrs = {
            "upper_frequency_limit": float(rng.choice([4000.0, 7600.0])),
            "lower_frequency_limit": float(rng.choice([20.0, 125.0])),
            "filterbank_channel_count": filters,
            "dct_coefficient_count": int(rng.integers(1, filters + 1)),
        }
        cases.append(Case("Mfcc", {"spectrogram": spectrogram, "sample_rate": rate}, mfcc_attrs))
    return cases


def families() -> dict[str, Callable[[np.random.Generator, int], list[Case]]]:
    return {"ctc": ctc, "audio": audio}
