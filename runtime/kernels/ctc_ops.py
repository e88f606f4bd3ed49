"""CTC decoding: CTCGreedyDecoder, what OCR and speech models end their serving graph with (Keras'
``ops.ctc_decode`` with the greedy strategy, ``tf.nn.ctc_greedy_decoder``).

Per batch entry, over its first ``sequence_length`` frames: the most likely class of each frame (the first
of equal ones), a blank (``blank_index``, the last class by default) emitted as nothing, and with
``merge_repeated`` a class repeating the frame before it (blank or not) merged away. The decoded classes
come as a SparseTensor (indices, values, dense shape [batch, longest]); the log probability is minus the
sum of each frame's largest logit.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from poolserve.runtime.errors import InvalidArgumentError
from poolserve.runtime.kernels._common import _shape_str
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node


@kernel("CTCGreedyDecoder", outputs=4)
def ctc_greedy_decoder(node: Node) -> Compute:
    merge = node.attr_bool("merge_repeated", False)
    blank_attr = node.attr_int("blank_index", -1)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        logits, lengths = inputs
        if logits.ndim != 3:
            raise InvalidArgumentError(f"inputs is not a 3-Tensor, got shape {_shape_str(logits.shape)}")
        if lengths.ndim != 1:
            raise InvalidArgumentError(
                f"sequence_length is not a vector, got shape {_shape_str(lengths.shape)}"
            )
        frames, batch, classes = logits.shape
        if lengths.shape[0] != batch:
            raise InvalidArgumentError(
                f"len(sequence_length) != batch_size.  len(sequence_length):  {lengths.shape[0]} batch_size: "
                f"{batch}"
            )
        if classes == 0:
            raise InvalidArgumentError("num_classes cannot be 0.")
        blank = blank_attr if blank_attr >= 0 else classes + blank_attr
        if not 0 <= blank < classes:
            raise InvalidArgumentError(f"blank_index expected to be between {-classes} and {classes - 1}")
        steps = [int(n) for n in lengths.tolist()]
        for b, n in enumerate(steps):
            if n > frames:
                raise InvalidArgumentError(f"sequence_length({b}) <= {frames}")
        best = logits.argmax(axis=2) if frames and classes else np.zeros((frames, batch), np.int64)
        peak = logits.max(axis=2) if frames and classes else np.zeros((frames, batch), logits.dtype)
        decoded: list[list[int]] = []
        log_prob = np.zeros((batch, 1), logits.dtype)
        for b, n in enumerate(steps):
            row, prev = [], -1
            for c in best[:n, b].tolist():
                if c != blank and not (merge and c == prev):
                    row.append(c)
                prev = c
            decoded.append(row)
            log_prob[b, 0] = -peak[:n, b].sum(dtype=logits.dtype)
        lengths_out = [len(r) for r in decoded]
        total = sum(lengths_out)
        indices = np.zeros((total, 2), np.int64)
        values = np.zeros(total, np.int64)
        at = 0
        for b, row in enumerate(decoded):
            indices[at : at + len(row), 0] = b
            indices[at : at + len(row), 1] = np.arange(len(row))
            values[at : at + len(row)] = row
            at += len(row)
        shape = np.array([batch, max(lengths_out, default=0)], np.int64)
        return indices, values, shape, log_prob

    return compute
