"""Audio front ends against TensorFlow 2.21: a speech-commands front end (WAV bytes -> DecodeWav ->
AudioSpectrogram -> Mfcc) frozen by TensorFlow with its outputs for a WAV file (tools/make_audio_fixture.py),
and DecodeWav's rules; tools/op_fuzz_audio.py compares the kernels on random cases."""

from __future__ import annotations

import io
import wave
from pathlib import Path

import numpy as np
import pytest
from support import run_op

from poolserve import Session, load_graph_def
from poolserve.runtime.errors import InvalidArgumentError

AUDIO = Path(__file__).parent / "fixtures" / "audio"


def test_speech_frontend_matches_tensorflow() -> None:
    want = np.load(AUDIO / "frontend.npz")
    wav = np.array((AUDIO / "tone.wav").read_bytes(), dtype=object)
    with Session(load_graph_def(AUDIO / "frontend.pb")) as sess:
        features, decoded = sess.run(["features:0", "decoded:0"], {"wav_data:0": wav})
    assert features.shape == (1, 98, 13) and features.dtype == np.float32
    np.testing.assert_allclose(features, want["mfcc"], rtol=1e-5, atol=1e-5)
    np.testing.assert_array_equal(decoded, want["decoded"])


def _wav(pcm: np.ndarray, rate: int = 8000) -> np.ndarray:
    out = io.BytesIO()
    with wave.open(out, "wb") as w:
        w.setnchannels(pcm.shape[1])
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.astype("<i2").tobytes())
    return np.array(out.getvalue(), dtype=object)


def test_decode_wav_pads_truncates_and_repeats_the_last_channel() -> None:
    pcm = np.array([[16384], [-32768], [32767]], np.int16)
    audio, rate = run_op(
        "DecodeWav", [_wav(pcm)], {"desired_channels": 2, "desired_samples": 4}, num_outputs=2
    )
    assert rate == 8000 and audio.dtype == np.float32
    np.testing.assert_array_equal(audio, [[0.5, 0.5], [-1.0, -1.0], [32767 / 32768] * 2, [0.0, 0.0]])
    short, _ = run_op("DecodeWav", [_wav(pcm)], {"desired_samples": 2}, num_outputs=2)
    np.testing.assert_array_equal(short, [[0.5], [-1.0]])
    with pytest.raises(InvalidArgumentError, match="RIFF"):
        run_op("DecodeWav", [np.array(b"not a wav", dtype=object)], num_outputs=2)


def test_encode_wav_writes_tensorflows_bytes() -> None:
    x = np.array([[0.0, 0.5], [-1.2, 1.0], [0.25, -0.5000153]], np.float32)
    got = run_op("EncodeWav", [x, np.int32(16000)]).item()
    header = "524946463000000057415645666d74201000000001000200803e000000fa000004001000646174610c000000"
    assert got.hex() == header + "000000400080ff7f0020ffbf"  # TensorFlow 2.21's, byte for byte
    back, rate = run_op("DecodeWav", [np.array(got, dtype=object)], num_outputs=2)
    assert rate == 16000 and back.shape == (3, 2)
