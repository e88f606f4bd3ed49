"""Generates ``tests/fixtures/saved_models/tf1_partitioned`` (dev only): TF1 partitioned variables.

Run with the TensorFlow environment::

    /opt/tfenv/bin/python tools/make_partitioned_fixture.py

A ``tf.compat.v1`` graph saved by ``SavedModelBuilder`` with a sharded Saver: an embedding [11, 4] split in 3
parts along its rows and a weight [5, 4] split in 2 along its columns (``fixed_size_partitioner``), so the
checkpoint holds each as slices of one tensor and the restore op reads them by slice specs. The signature
looks ids up in the embedding with both partition strategies (``mod``, ``div``: DynamicPartition,
ResourceGather, DynamicStitch) and adds a product with the weight's parts concatenated.
``tf1_partitioned.npz`` holds the inputs fed and what TensorFlow computed, as the other fixtures do.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "saved_models"


def main() -> None:
    tf.compat.v1.disable_eager_execution()
    path = OUT / "tf1_partitioned" / "1"
    shutil.rmtree(path.parent, ignore_errors=True)
    graph = tf.Graph()
    with graph.as_default():
        ids = tf.compat.v1.placeholder(tf.int64, [None, 3], name="ids")
        x = tf.compat.v1.placeholder(tf.float32, [None, 5], name="x")
        init = tf.compat.v1.random_normal_initializer
        part = tf.compat.v1.fixed_size_partitioner
        emb = tf.compat.v1.get_variable("embedding", [11, 4], initializer=init(seed=1), partitioner=part(3))
        w = tf.compat.v1.get_variable("w", [5, 4], initializer=init(seed=2), partitioner=part(2, axis=1))
        by_mod = tf.compat.v1.nn.embedding_lookup(emb, ids, partition_strategy="mod")
        by_div = tf.compat.v1.nn.embedding_lookup(emb, ids, partition_strategy="div")
        y = tf.reduce_sum(by_mod, axis=1) + tf.matmul(x, tf.concat(list(w), axis=1))
        y2 = tf.reduce_sum(by_div, axis=1)
        feeds = {
            ids: np.array([[0, 5, 10], [3, 3, 7]]),
            x: np.arange(10, dtype=np.float32).reshape(2, 5) / 10,
        }
        with tf.compat.v1.Session(graph=graph) as sess:
            # each part drawn from its own seed, so the parts differ
            sess.run(tf.compat.v1.global_variables_initializer())
            for i, v in enumerate(list(emb) + list(w)):
                v.load(np.random.default_rng(i).standard_normal(v.shape.as_list()).astype(np.float32), sess)
            builder = tf.compat.v1.saved_model.Builder(str(path))
            sig = tf.compat.v1.saved_model.predict_signature_def({"ids": ids, "x": x}, {"y": y, "y2": y2})
            builder.add_meta_graph_and_variables(
                sess,
                ["serve"],
                signature_def_map={"serving_default": sig},
                saver=tf.compat.v1.train.Saver(sharded=True),
            )
            builder.save()
            y_value, y2_value = sess.run([y, y2], feeds)
    np.savez(
        OUT / "tf1_partitioned.npz",
        **{
            "serving_default/in:ids": feeds[ids],
            "serving_default/in:x": feeds[x],
            "serving_default/out:y": y_value,
            "serving_default/out:y2": y2_value,
        },
    )


if __name__ == "__main__":
    main()
