"""Generates ``tests/fixtures/rnn/tf1_dynamic_rnn.pb`` and ``.npz`` (dev only): a TF1 recurrent graph.

Run with the TensorFlow environment and tf_keras (``tf.compat.v1.nn.rnn_cell`` needs Keras 2)::

    TF_USE_LEGACY_KERAS=1 /opt/tfenv/bin/python tools/make_tensor_array_fixture.py

With control flow v2 off, ``tf.compat.v1.nn.dynamic_rnn`` (an LSTMCell) and ``bidirectional_dynamic_rnn``
(a GRUCell each way) with ``sequence_length`` write v1 frames over TensorArrays (TensorArrayV3, scatter,
read, write, gather), ReverseSequence and Asserts: what a TF1-era frozen sequence model holds. The graph is
frozen with ``convert_variables_to_constants``; the npz holds the inputs (batch 3, 7 steps, lengths 7, 3,
5) and TensorFlow's outputs.
"""

from __future__ import annotations

import os
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")

import numpy as np
import tensorflow as tf

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "rnn"


def main() -> None:
    tf.compat.v1.disable_eager_execution()
    tf.compat.v1.disable_control_flow_v2()
    graph = tf.Graph()
    with graph.as_default():
        x = tf.compat.v1.placeholder(tf.float32, [None, None, 6], name="x")
        lengths = tf.compat.v1.placeholder(tf.int32, [None], name="lengths")
        cells = tf.compat.v1.nn.rnn_cell
        init = tf.compat.v1.glorot_uniform_initializer
        lstm = cells.LSTMCell(5, initializer=init(seed=1))
        out, state = tf.compat.v1.nn.dynamic_rnn(lstm, x, sequence_length=lengths, dtype=tf.float32)
        gru = cells.GRUCell(4, kernel_initializer=init(seed=2))
        (fw, bw), _ = tf.compat.v1.nn.bidirectional_dynamic_rnn(
            gru, gru, out, sequence_length=lengths, dtype=tf.float32, scope="bi"
        )
        tf.identity(tf.concat([fw, bw], -1), name="y")
        tf.identity(state.h, name="h")
        feeds = {
            x: np.random.default_rng(0).standard_normal((3, 7, 6)).astype(np.float32),
            lengths: np.array([7, 3, 5], np.int32),
        }
        with tf.compat.v1.Session(graph=graph) as sess:
            sess.run(tf.compat.v1.global_variables_initializer())
            frozen = tf.compat.v1.graph_util.convert_variables_to_constants(
                sess, graph.as_graph_def(), ["y", "h"]
            )
            y, h = sess.run(["y:0", "h:0"], feeds)
    (OUT / "tf1_dynamic_rnn.pb").write_bytes(frozen.SerializeToString())
    np.savez(OUT / "tf1_dynamic_rnn.npz", x=feeds[x], lengths=feeds[lengths], y=y, h=h)


if __name__ == "__main__":
    main()
