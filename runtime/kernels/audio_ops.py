"""Audio front ends: DecodeWav, EncodeWav, AudioSpectrogram and Mfcc, what TensorFlow's speech models hold
(the speech commands graphs take WAV bytes and compute MFCCs in the graph).

As TensorFlow computes them (spectrogram.cc, mfcc*.cc): a periodic Hann window, the FFT length the next
power of two of the window, frames while a whole window remains (``stride`` apart), the squared magnitude
or its square root; MFCCs take the square root of each bin, HTK-style triangular mel bands from the lower
to the upper frequency limit (bins below the lower limit + 1.5 and above the upper one left out), the log
of each band floored at 1e-12 and a DCT-II scaled by sqrt(2 / bands), all in float64, output in float32.
WAV: 16-bit PCM only, values / 32768; ``desired_samples`` pads with zeros or truncates, and channels past
the file's repeat its last one.
"""

from __future__ import annotations

import struct
from functools import cache
from typing import Any

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels._common import _bad_attr, _shape_str
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node


def _wav(data: bytes) -> tuple[np.ndarray, int]:
    """(samples [n, channels] float32, sample rate) of a 16-bit PCM WAV file."""
    if len(data) < 12 or data[:4] != b"RIFF" or data[8:12] != b"WAVE":
        raise InvalidArgumentError("Header mismatch: Expected RIFF ... WAVE at the start of the WAV file")
    pos, channels, rate, samples = 12, 0, 0, None
    while pos + 8 <= len(data):
        chunk, size = data[pos : pos + 4], struct.unpack("<I", data[pos + 4 : pos + 8])[0]
        body = data[pos + 8 : pos + 8 + size]
        if chunk == b"fmt ":
            if len(body) < 16:
                raise InvalidArgumentError("Bad fmt chunk size in the WAV file")
            fmt, channels, rate, _, _, bits = struct.unpack("<HHIIHH", body[:16])
            if fmt != 1:
                raise InvalidArgumentError(f"Bad audio format {fmt}: only PCM (1) WAV files are supported")
            if bits != 16:
                raise InvalidArgumentError(f"Can only read 16-bit WAV files, but received {bits}")
            if channels < 1:
                raise InvalidArgumentError("Bad number of channels in the WAV file: 0")
        elif chunk == b"data":
            if not channels:
                raise InvalidArgumentError("The WAV file's data chunk comes before its fmt chunk")
            if len(body) < size:
                raise InvalidArgumentError("Data chunk of the WAV file is truncated")
            count = size // (2 * channels)
            pcm = np.frombuffer(body, "<i2", count * channels).reshape(count, channels)
            samples = (pcm.astype(np.float32) / np.float32(32768.0)).astype(np.float32)
            break
        pos += 8 + size + (size & 1)  # chunks are padded to even sizes
    if samples is None:
        raise InvalidArgumentError("No data chunk found in the WAV file")
    return samples, rate


@kernel("DecodeWav", outputs=2)
def decode_wav(node: Node) -> Compute:
    want_channels = node.attr_int("desired_channels", -1)
    want_samples = node.attr_int("desired_samples", -1)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        contents = inputs[0]
        if contents.ndim != 0:
            raise InvalidArgumentError(f"contents must be scalar, got shape {_shape_str(contents.shape)}")
        samples, rate = _wav(contents.item())
        count, channels = samples.shape
        out_channels = channels if want_channels == -1 else want_channels
        out_count = count if want_samples == -1 else want_samples
        source = np.minimum(np.arange(out_channels), channels - 1)
        out = np.zeros((out_count, out_channels), np.float32)
        keep = min(count, out_count)
        out[:keep] = samples[:keep][:, source]
        return out, np.array(rate, np.int32)

    return compute


@kernel("EncodeWav")
def encode_wav(node: Node) -> Compute:
    """Float samples [n, channels] to 16-bit PCM WAV bytes, as TensorFlow writes them: each value times
    32768, rounded half away from zero, clamped to int16."""

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        audio, rate_t = inputs
        if audio.ndim != 2:
            raise InvalidArgumentError(f"audio must be 2-dimensional{_shape_str(audio.shape)}")
        if rate_t.ndim != 0:
            raise InvalidArgumentError(
                f"Input sample_rate should be a scalar tensor, got {_shape_str(rate_t.shape)}"
            )
        channels = audio.shape[1]
        rate = int(rate_t)
        scaled = audio.astype(np.float32) * np.float32(32768.0)
        pcm = np.clip(np.sign(scaled) * np.floor(np.abs(scaled) + 0.5), -32768, 32767).astype("<i2")
        data = pcm.tobytes()
        header = (
            b"RIFF"
            + struct.pack("<I", 36 + len(data))
            + b"WAVEfmt "
            + struct.pack("<IHHIIHH", 16, 1, channels, rate, rate * channels * 2, channels * 2, 16)
        )
        out = np.empty((), dtype=object)
        out[()] = header + b"data" + struct.pack("<I", len(data)) + data
        return (out,)

    return compute


@cache
def _hann(window: int) -> np.ndarray:
    return 0.5 - 0.5 * np.cos(2.0 * np.pi * np.arange(window) / window)


@kernel("AudioSpectrogram", expensive=True)
def audio_spectrogram(node: Node) -> Compute:
    window = node.attr_int("window_size")
    stride = node.attr_int("stride")
    squared = node.attr_bool("magnitude_squared", False)
    if window < 2:
        raise _bad_attr(node, "window_size", f"must be at least 2, got {window}")
    if stride < 1:
        raise _bad_attr(node, "stride", f"must be positive, got {stride}")
    fft_length = 1 << (window - 1).bit_length()

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        (audio,) = inputs
        if audio.ndim != 2:
            raise InvalidArgumentError(f"input must be 2-dimensional{_shape_str(audio.shape)}")
        samples, channels = audio.shape
        frames = 1 + (samples - window) // stride if samples >= window else 0
        bins = fft_length // 2 + 1
        if frames == 0:
            return (np.zeros((channels, 0, bins), np.float32),)
        starts = np.arange(frames) * stride
        taps = audio.astype(np.float64)[starts[:, None] + np.arange(window)]  # [frames, window, channels]
        spectrum = np.fft.rfft(taps * _hann(window)[None, :, None], n=fft_length, axis=1)
        power = spectrum.real**2 + spectrum.imag**2
        out = power if squared else np.sqrt(power)
        return (out.transpose(2, 0, 1).astype(np.float32),)

    return compute


@cache
def _mel_bank(bins: int, rate: float, channels: int, low: float, high: float) -> tuple[Any, Any, int, int]:
    """mfcc_mel_filterbank.cc's band of each FFT bin and its weight (the rest goes to the next band)."""

    def mel(f: Any) -> Any:
        return 1127.0 * np.log1p(np.asarray(f, np.float64) / 700.0)

    mel_low, mel_high = float(mel(low)), float(mel(high))
    spacing = (mel_high - mel_low) / (channels + 1)
    centers = mel_low + spacing * np.arange(1, channels + 2)
    hz_per_bin = 0.5 * rate / (bins - 1)
    start = int(1.5 + low / hz_per_bin)
    end = int(high / hz_per_bin)
    band = np.full(bins, -2, np.int64)
    weights = np.zeros(bins)
    channel = 0
    for i in range(bins):
        if start <= i <= end:
            m = float(mel(i * hz_per_bin))
            while channel < channels and centers[channel] < m:
                channel += 1
            band[i] = channel - 1
            c = band[i]
            if c >= 0:
                weights[i] = (centers[c + 1] - m) / (centers[c + 1] - centers[c])
            else:
                weights[i] = (centers[0] - m) / (centers[0] - mel_low)
    return band, weights, start, end


@kernel("Mfcc", expensive=True)
def mfcc(node: Node) -> Compute:
    high = node.attr_float("upper_frequency_limit", 4000.0)
    low = node.attr_float("lower_frequency_limit", 20.0)
    channels = node.attr_int("filterbank_channel_count", 40)
    coefficients = node.attr_int("dct_coefficient_count", 13)
    if channels < 1 or coefficients < 1 or coefficients > channels:
        raise _bad_attr(node, "dct_coefficient_count", "must be between 1 and filterbank_channel_count")
    if low < 0 or high <= low:
        raise _bad_attr(node, "upper_frequency_limit", "must be above lower_frequency_limit (at least 0)")
    dct = np.sqrt(2.0 / channels) * np.cos(
        np.outer(np.arange(coefficients), np.arange(channels) + 0.5) * (np.pi / channels)
    )

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        spectrogram, rate_t = inputs
        if spectrogram.ndim != 3:
            raise InvalidArgumentError(f"spectrogram must be 3-dimensional{_shape_str(spectrogram.shape)}")
        if rate_t.ndim != 0:
            raise InvalidArgumentError(
                f"Input sample_rate should be a scalar tensor, got {_shape_str(rate_t.shape)}"
            )
        rate = float(rate_t)
        bins = spectrogram.shape[2]
        if bins < 2 or rate <= 0:
            raise InvalidArgumentError(
                "Mfcc: the spectrogram needs 2 or more bins and the sample rate must be positive"
            )
        band, weights, start, end = _mel_bank(bins, rate, channels, low, high)
        if bins <= end:
            # TensorFlow logs "Input too short to compute filterbank" and answers zeros: the upper limit is
            # past the spectrogram's top frequency
            return (np.zeros((*spectrogram.shape[:2], coefficients), np.float32),)
        values = np.sqrt(spectrogram.astype(np.float64))[..., start : end + 1]
        bank = np.zeros((end + 1 - start, channels))  # each used bin's share of each band
        rows = np.arange(end + 1 - start)
        b, w = band[start : end + 1], weights[start : end + 1]
        right, left = b >= 0, b + 1 < channels
        bank[rows[right], b[right]] += w[right]
        bank[rows[left], b[left] + 1] += 1.0 - w[left]
        mels = np.maximum(values @ bank, 1e-12)
        return ((np.log(mels) @ dct.T).astype(np.float32),)

    return compute
