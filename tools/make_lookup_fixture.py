"""Generates ``tests/fixtures/saved_models/tf2_lookup`` (dev only): Keras' lookup layers in a SavedModel.

Run with the TensorFlow environment, not the project's::

    /opt/tfenv/bin/python tools/make_lookup_fixture.py

``tf2_lookup/1`` is a Keras model exported by ``model.export`` with two inputs, ``words`` (strings [None, 3])
and ``ids`` (int64 [None, 2]), and four outputs: a StringLookup with its vocabulary inline (one OOV index),
the same vocabulary read from a file among the SavedModel's assets (an InitializeTableFromTextFileV2 in the
init op), an IntegerLookup, and a StringLookup in multi_hot mode (a DenseBincount after the find).
``tf2_lookup.npz`` holds the inputs fed (strings as fixed-width bytes) and what TensorFlow computed, by
loading the written SavedModel back.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras
import numpy as np
import tensorflow as tf
from keras import layers

OUT_DIR = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "saved_models"
VOCAB = ["cat", "dog", "bird", "fish"]


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        vocab_file = Path(tmp) / "vocab.txt"
        vocab_file.write_text("\n".join(reversed(VOCAB)) + "\n")
        words = keras.Input((3,), dtype="string", name="words")
        ids = keras.Input((2,), dtype="int64", name="ids")
        outputs = {
            "word_ids": layers.StringLookup(vocabulary=VOCAB)(words),
            "file_ids": layers.StringLookup(vocabulary=str(vocab_file))(words),
            "id_ids": layers.IntegerLookup(vocabulary=[3, 7, 11])(ids),
            "multi_hot": layers.StringLookup(vocabulary=VOCAB, output_mode="multi_hot")(words),
        }
        model = keras.Model({"words": words, "ids": ids}, outputs)
        path = OUT_DIR / "tf2_lookup" / "1"
        shutil.rmtree(path.parent, ignore_errors=True)
        model.export(str(path), verbose=False)
    feeds = {
        "words": np.array([["cat", "zebra", "fish"], ["", "dog", "cat"]], dtype=object),
        "ids": np.array([[3, 5], [11, 7]], dtype=np.int64),
    }
    serve = tf.saved_model.load(str(path)).signatures["serving_default"]
    out = serve(**{k: tf.constant(v) for k, v in feeds.items()})
    arrays = {"in:words": feeds["words"].astype("S"), "in:ids": feeds["ids"]}
    arrays |= {f"out:{k}": v.numpy() for k, v in out.items()}
    np.savez(OUT_DIR / "tf2_lookup.npz", **arrays)
    print({k: v.tolist() for k, v in arrays.items()})


if __name__ == "__main__":
    main()
