"""StatelessRandomGammaV2 and V3, StatelessRandomPoisson and StatelessRandomBinomial
(runtime/kernels/random_dist_ops.py), which ``tf.random.stateless_gamma``, ``stateless_poisson``,
``stateless_binomial`` and Keras 3's seeded ``keras.random.gamma`` and ``beta`` draw, against what
TensorFlow 2.21 drew (tools/make_op_case_fixtures.py, group "random_dists"): the same numbers, bit for bit,
for every output type (half rounded through float, integers), alphas below, at and above 1, rates on both
sides of 10 (Knuth's and Hormann's samplers), binomials by inversion and by BTRS on p and on 1 - p, with
probabilities 0, 1 and NaN, broadcast counts and probabilities, and the shapes TensorFlow refuses."""

from __future__ import annotations

import numpy as np
import pytest
from support import OpCases, run_op

from poolserve.runtime.errors import InvalidArgumentError

CASES = OpCases("random_dists")


@pytest.mark.parametrize("case", CASES.names())
def test_matches_tensorflow_exactly(case: str) -> None:
    CASES.check(case, atol=0)


def test_fixture_covers_each_sampler() -> None:
    refused = {name for name, m in CASES.meta.items() if "error" in m}
    assert refused == {
        "binomial_bad_broadcast",
        "binomial_bad_shape",
        "gamma_bad_seed",
        "gamma_bad_shape",
        "gamma_v3_bad_alg",
        "poisson_bad_shape",
    }


def test_poisson_refuses_rates_tensorflow_would_loop_on_forever() -> None:
    with pytest.raises(InvalidArgumentError, match="lam must be finite"):
        run_op(
            "StatelessRandomPoisson",
            [np.array([3, 1], np.int32), np.array([1, 2], np.int64), np.array([np.nan], np.float32)],
            {"dtype": np.float32},
        )
