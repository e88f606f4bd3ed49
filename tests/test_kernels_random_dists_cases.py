"""StatelessRandomGammaV2 and V3, StatelessRandomPoisson and StatelessRandomBinomial
(runtime/kernels/random_dist_ops.py), which ``tf.random.stateless_gamma``, ``stateless_poisson``,
``stateless_binomial`` and Keras 3's seeded ``keras.random.gamma`` and ``beta`` draw, against what
TensorFlow 2.21 drew (tools/make_op_case_fixtures.py, group "random_dists"): the same numbers, bit for bit,
for every output type (half rounded through float, integers), alphas below, at and above 1, rates on both
sides of 10 (Knuth's and Hormann's samplers), binomials by inversion and by BTRS on p and on 1 - p, with
probabilities 0, 1 and NaN, broadcast counts and probabilities, and the shapes TensorFlow refuses."""

from __future__ import annotations

import re

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


def test_odd_parameters_draw_as_in_c_without_failing() -> None:
    """alpha 0 or below, infinities, subnormal and huge rates and counts: C's answers (log(0) = -inf, an
    overflowing exp = inf...), never a Python math error."""
    shape, seed = np.array([3, 6], np.int32), np.array([1, 2], np.int64)
    odd = np.array([0.0, -0.5, -5.0, np.inf, 5e-324, 1e300])
    gamma = run_op("StatelessRandomGammaV2", [shape, seed, odd], {"dtype": np.float64})
    assert gamma[:, 0].tolist() == [0.0] * 3 and np.isinf(gamma[:, 3]).all()
    rates = np.array([0.0, -1e4, 5e-324, 1e300, 3.0, 1e6])
    poisson = run_op("StatelessRandomPoisson", [shape, seed, rates], {"dtype": np.int64})
    assert (poisson[:, :3] == 0).all()
    counts = np.array([1e300, np.inf, 5.0, 5.0, 5.0, 1e9])
    probs = np.array([0.5, 0.5, np.nan, np.inf, 5e-324, 1e-300])
    binomial = run_op("StatelessRandomBinomial", [shape, seed, counts, probs], {"dtype": np.float64})
    assert np.isnan(binomial[:, 2]).all() and (binomial[:, 3] == 5).all()


@pytest.mark.parametrize(
    ("key", "counter", "alg", "message"),
    [
        ([], [1, 2], 1, "key must have shape [1], not [0]"),
        ([1], [1], 1, "counter must be a vector of at least 2 elements"),
        ([1], [1, 2], [1, 1], "alg must be a scalar"),
    ],
)
def test_v3_refuses_bad_keys_counters_and_algorithms(
    key: list, counter: list, alg: object, message: str
) -> None:
    inputs = [
        np.array([2], np.int32),
        np.array(key, np.uint64),
        np.array(counter, np.uint64),
        np.array(alg, np.int32),
        np.array([1.0]),
    ]
    with pytest.raises(InvalidArgumentError, match=re.escape(message)):
        run_op("StatelessRandomGammaV3", inputs, {"dtype": np.float64})


def test_binomial_refuses_nan_counts_tensorflow_would_loop_on_forever() -> None:
    with pytest.raises(InvalidArgumentError, match="counts must not be NaN"):
        run_op(
            "StatelessRandomBinomial",
            [np.array([1], np.int32), np.array([1, 2], np.int64), np.array([np.nan]), np.array([0.3])],
            {"dtype": np.float64},
        )
