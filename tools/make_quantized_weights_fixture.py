"""Generates ``tests/fixtures/models/quantized_weights.pb`` (dev only): weights stored quantized.

Run with the TensorFlow environment::

    /opt/tfenv/bin/python tools/make_quantized_weights_fixture.py

What TF1's graph_transforms ``quantize_weights`` leaves: Const weights of a quantized type (quint8,
qint8) turned back to floats by Dequantize (MIN_COMBINED and SCALED) before a matmul and an add. Prints
what TensorFlow computes for ``x = [[1, 2]]`` (``tests/test_kernels_quant.py`` holds it).
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "models" / "quantized_weights.pb"


def main() -> None:
    graph = tf.Graph()
    with graph.as_default():
        w = tf.constant(np.array([[0, 7, 128], [255, 3, 64]], np.uint8), dtype=tf.quint8, name="w_q")
        weights = tf.raw_ops.Dequantize(input=w, min_range=-1.0, max_range=2.0, mode="MIN_COMBINED", name="w")
        x = tf.compat.v1.placeholder(tf.float32, [None, 2], name="x")
        b = tf.constant(np.array([-3, 5, 100], np.int8), dtype=tf.qint8, name="b_q")
        bias = tf.raw_ops.Dequantize(input=b, min_range=-1.0, max_range=1.0, mode="SCALED", name="b")
        tf.identity(tf.matmul(x, weights) + bias, name="z")
    with tf.compat.v1.Session(graph=graph) as sess:
        print(sess.run("z:0", {"x:0": np.array([[1.0, 2.0]], np.float32)}).tolist())
    OUT.write_bytes(graph.as_graph_def().SerializeToString())


if __name__ == "__main__":
    main()
