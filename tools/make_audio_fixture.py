"""Generates ``tests/fixtures/audio`` (dev only): a speech-commands front end and a WAV file.

Run with the TensorFlow environment::

    /opt/tfenv/bin/python tools/make_audio_fixture.py

``frontend.pb`` is what TensorFlow's speech commands models put before their network: WAV bytes in
(``wav_data``), DecodeWav to 16,000 samples of one channel, AudioSpectrogram (a 30 ms window, 10 ms
stride, squared magnitude), Mfcc (40 bands, 13 coefficients), ``features`` out, and the CTC greedy decoding
of a few random frames (``decoded``). ``tone.wav`` is 0.5 s of a chirp with noise at 16 kHz;
``frontend.npz`` holds TensorFlow's outputs for it.
"""

from __future__ import annotations

import io
import os
import wave
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "audio"


def main() -> None:
    rate = 16000
    t = np.arange(rate // 2) / rate
    signal = 0.4 * np.sin(2 * np.pi * (300 + 1500 * t) * t) + 0.05 * np.random.default_rng(0).normal(
        size=t.size
    )
    pcm = np.clip(signal * 32767, -32768, 32767).astype("<i2")
    buffer = io.BytesIO()
    with wave.open(buffer, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(pcm.tobytes())
    (OUT / "tone.wav").write_bytes(buffer.getvalue())

    graph = tf.Graph()
    with graph.as_default():
        wav = tf.compat.v1.placeholder(tf.string, [], name="wav_data")
        audio, sample_rate = tf.raw_ops.DecodeWav(contents=wav, desired_channels=1, desired_samples=rate)
        spectrogram = tf.raw_ops.AudioSpectrogram(
            input=audio, window_size=480, stride=160, magnitude_squared=True
        )
        mfcc = tf.raw_ops.Mfcc(spectrogram=spectrogram, sample_rate=sample_rate, dct_coefficient_count=13)
        tf.identity(mfcc, name="features")
        logits = tf.constant(np.random.default_rng(1).normal(size=(9, 2, 5)).astype(np.float32))
        decoded = tf.raw_ops.CTCGreedyDecoder(inputs=logits, sequence_length=[9, 6], merge_repeated=True)
        tf.identity(decoded.decoded_values, name="decoded")
    with tf.compat.v1.Session(graph=graph) as sess:
        got_mfcc, got_decoded = sess.run(["features:0", "decoded:0"], {"wav_data:0": buffer.getvalue()})
    (OUT / "frontend.pb").write_bytes(graph.as_graph_def().SerializeToString())
    np.savez(OUT / "frontend.npz", mfcc=got_mfcc, decoded=got_decoded)


if __name__ == "__main__":
    main()
