"""op_fuzz families: tf.Example parsing (ParseExample, ParseSingleExample, ParseExampleV2)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from op_fuzz import Case

KEYS = ["age", "tags", "score", "ids"]


def _example(rng: np.random.Generator) -> bytes:
    import tensorflow as tf

    feature = {}
    if rng.random() < 0.8:
        feature["age"] = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(rng.integers(0, 90))]))
    if rng.random() < 0.8:
        words = [bytes(rng.choice([b"a", b"bc", b""])) for _ in range(int(rng.integers(0, 4)))]
        feature["tags"] = tf.train.Feature(bytes_list=tf.train.BytesList(value=words))
    if rng.random() < 0.8:
        n = 2 if rng.random() < 0.9 else 3
        feature["score"] = tf.train.Feature(
            float_list=tf.train.FloatList(value=rng.standard_normal(n).tolist())
        )
    if rng.random() < 0.7:
        ids = rng.integers(0, 9, size=int(rng.integers(0, 5))).tolist()
        feature["ids"] = tf.train.Feature(int64_list=tf.train.Int64List(value=ids))
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def _strings(items: list[bytes], shape: tuple[int, ...]) -> np.ndarray:
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out.reshape(shape)


def _s(text: str) -> np.ndarray:
    return np.array(text.encode(), dtype=object)


def examples(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        n = int(rng.integers(0, 4))
        batch = _strings([_example(rng) for _ in range(n)], (n,))
        age_default = np.array([-1], np.int64) if rng.random() < 0.7 else np.zeros(0, np.int64)
        score_default = np.zeros((2,), np.float32) if rng.random() < 0.5 else np.zeros(0, np.float32)
        cases.append(
            Case(
                "ParseExample",
                {
                    "serialized": batch,
                    "names": np.zeros(0, dtype=object),
                    "sparse_keys": [_s("tags"), _s("ids")],
                    "dense_keys": [_s("age"), _s("score")],
                    "dense_defaults": [age_default, score_default],
                },
                {"sparse_types": ["string", "int64"], "dense_shapes": [[1], [2]]},
            )
        )
        one = _strings([_example(rng)], ())
        cases.append(
            Case(
                "ParseSingleExample",
                {"serialized": one, "dense_defaults": [age_default, score_default]},
                {
                    "num_sparse": 2,
                    "sparse_keys": ["tags", "ids"],
                    "dense_keys": ["age", "score"],
                    "sparse_types": ["string", "int64"],
                    "dense_shapes": [[1], [2]],
                },
            )
        )
    return cases


def families() -> dict[str, Callable[[np.random.Generator, int], list[Case]]]:
    return {"parsing": examples}
