"""CTCBeamSearchDecoder (runtime/kernels/ctc_ops.py) against what TensorFlow 2.21 decoded from the same
logits (tools/make_serving_op_cases.py, group "ctc_beam"): 120 random cases of 1 to 5 sequences (about 360
decoded), float and double, a third with rounded logits (equal probabilities, decided in TensorFlow's
order), beams of 1 to 40, up to 3 paths, with and without merge_repeated; and the inputs TensorFlow
refuses."""

from __future__ import annotations

import pytest
from support import OpCases

CASES = OpCases("ctc_beam")


@pytest.mark.parametrize("case", CASES.names())
def test_matches_tensorflow(case: str) -> None:
    CASES.check(case, atol=1e-5)


def test_fixture_decodes_hundreds_of_sequences() -> None:
    lengths = [CASES.arrays[f"{c}/in/{m['feeds'][1]}"] for c, m in CASES.meta.items() if "error" not in m]
    assert sum(x.size for x in lengths) > 300
