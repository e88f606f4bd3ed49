"""Keras TextVectorization in SavedModels: Keras 3 (``model.export``) and tf_keras (``model.save``) exports
of tools/make_text_fixtures.py load and give TensorFlow's outputs exactly. Their graphs standardize with
RE2 patterns (Keras' default punctuation class, ``[[:punct:]]``), split on whitespace or into characters
(UnicodeDecode/UnicodeEncode), make bigrams (StringNGrams), look tokens up, and count them per row
(RaggedBincount: multi_hot, count, tf_idf)."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest
from support import FIXTURES, assert_same, from_json

from poolserve import load_saved_model


def recorded(name: str) -> tuple[str, dict[str, Any], dict[str, Any]]:
    record = json.loads((FIXTURES / "saved_models" / f"{name}.json").read_text())
    inputs = {k: from_json(v) for k, v in record["inputs"].items()}
    return record["signature"], inputs, {k: from_json(v) for k, v in record["outputs"].items()}


@pytest.mark.parametrize("name", ["keras3_text", "tf_keras_text"])
def test_text_vectorization_models_give_tensorflows_outputs(name: str):
    signature, inputs, outputs = recorded(name)
    model = load_saved_model(FIXTURES / "saved_models" / name / "1")
    try:
        got = model.run(inputs, signature_name=signature)
    finally:
        model.close()
    assert sorted(got) == sorted(outputs)
    for key, want in outputs.items():
        assert_same(got[key], want, key)


def test_the_fixture_covers_each_mode_and_a_malformed_string():
    _, inputs, outputs = recorded("keras3_text")
    assert set(outputs) == {"int_default", "int_punct", "chars", "multi_hot", "count_bigrams", "tf_idf"}
    assert b"\xff" in inputs["text"].tolist()[2]
    # [[:punct:]] took the comma and the '!' away: "the cat the dog" is four known tokens
    assert np.count_nonzero(outputs["int_punct"][0] > 1) == 4
