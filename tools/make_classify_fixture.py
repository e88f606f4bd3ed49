"""Generates ``tests/fixtures/saved_models/tf1_classify`` (dev only): a SavedModel whose signatures parse
serialized tf.Examples, as TF Serving's Classify and Regress feed them.

Run with the TensorFlow environment, not the project's::

    /opt/tfenv/bin/python tools/make_classify_fixture.py

Signatures: ``serving_default`` (classify: ``inputs`` -> ``classes``, ``scores``), ``regress`` (``inputs`` ->
``outputs``) and ``predict`` (``x`` -> ``scores``), over ``ParseExampleV2`` of a float feature ``x`` [2] and
an int64 feature ``k`` (default 3). ``tf1_classify.npz`` holds TensorFlow's answers for the examples below.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import tensorflow as tf

OUT = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "saved_models"
tf1 = tf.compat.v1


def example(**features: list[float] | list[int]) -> tf.train.Example:
    feature = {}
    for key, values in features.items():
        if all(isinstance(v, int) for v in values):
            feature[key] = tf.train.Feature(int64_list=tf.train.Int64List(value=values))
        else:
            feature[key] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
    return tf.train.Example(features=tf.train.Features(feature=feature))


def main() -> None:
    tf1.disable_eager_execution()
    target = OUT / "tf1_classify"
    shutil.rmtree(target, ignore_errors=True)
    graph = tf.Graph()
    with graph.as_default(), tf1.Session(graph=graph) as sess:
        serialized = tf1.placeholder(tf.string, [None], name="tf_example")
        spec = {
            "x": tf1.io.FixedLenFeature([2], tf.float32),
            "k": tf1.io.FixedLenFeature([], tf.int64, default_value=3),
        }
        feats = tf1.io.parse_example(serialized, spec)
        x = feats["x"] * tf.cast(tf.expand_dims(feats["k"], 1), tf.float32)
        w = tf.constant([[1.0, -1.0, 0.5], [0.5, 2.0, -1.0]])
        scores = tf.nn.softmax(tf.matmul(x, w), name="scores")
        classes = tf.tile(tf.constant([["a", "b", "c"]]), [tf.shape(x)[0], 1], name="classes")
        value = tf.reduce_sum(x, axis=1, name="value")
        builder = tf1.saved_model.Builder(str(target / "1"))
        signatures = {
            "serving_default": tf1.saved_model.classification_signature_def(serialized, classes, scores),
            "regress": tf1.saved_model.regression_signature_def(serialized, value),
            "predict": tf1.saved_model.predict_signature_def({"x": serialized}, {"scores": scores}),
        }
        builder.add_meta_graph_and_variables(sess, ["serve"], signature_def_map=signatures)
        builder.save()
        plain = [example(x=[1.0, 2.0]), example(x=[0.5, -1.0], k=[2])]
        # a context Example's features merged into each example's (TF Serving's ExampleListWithContext)
        merged = [example(k=[4]).SerializeToString() + example(x=[1.0, 1.0]).SerializeToString()]
        out = {}
        for name, blobs in (("plain", [e.SerializeToString() for e in plain]), ("context", merged)):
            s, v = sess.run([scores, value], {serialized: blobs})
            out[f"{name}_scores"], out[f"{name}_value"] = s, v
    np.savez(OUT / "tf1_classify.npz", **out)
    print("wrote", target, {k: v.tolist() for k, v in out.items()})


if __name__ == "__main__":
    main()
