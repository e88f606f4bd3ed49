"""op_fuzz families: seeded random ops (stateless v1 and v2, the key/counter op, seeded stateful ops' first
run)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from op_fuzz import Case


def randoms(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dims = np.array([int(d) for d in rng.integers(0, 7, size=int(rng.integers(0, 3)))], np.int32)
        seed = rng.integers(-(2**40), 2**40, size=2).astype(
            str(rng.choice(["int64", "int32"])) if rng.random() < 0.5 else "int64"
        )
        dtype = str(rng.choice(["float32", "float64", "float16"]))
        cases.append(Case("StatelessRandomUniform", {"shape": dims, "seed": seed}, {"dtype": dtype}))
        cases.append(Case("StatelessRandomNormal", {"shape": dims, "seed": seed}, {"dtype": dtype}))
        cases.append(Case("StatelessTruncatedNormal", {"shape": dims, "seed": seed}, {"dtype": dtype}))
        itype = str(rng.choice(["int32", "int64"]))
        low = int(rng.integers(-100, 100))
        high = low + int(rng.choice([1, 7, 1000, 2**20]))
        bounds = {"minval": np.array(low, itype), "maxval": np.array(high, itype)}
        cases.append(Case("StatelessRandomUniformInt", {"shape": dims, "seed": seed, **bounds}))
        key = np.array([int(rng.integers(0, 2**63))], np.uint64)
        counter = rng.integers(0, 2**63, size=2).astype(np.uint64)
        alg = np.array(1, np.int32)
        cases.append(
            Case(
                "StatelessRandomUniformV2",
                {"shape": dims, "key": key, "counter": counter, "alg": alg},
                {"dtype": dtype},
            )
        )
        cases.append(
            Case(
                "StatelessTruncatedNormalV2",
                {"shape": dims, "key": key, "counter": counter, "alg": alg},
                {"dtype": dtype},
            )
        )
        cases.append(
            Case(
                "StatelessRandomNormalV2",
                {"shape": dims, "key": key, "counter": counter, "alg": alg},
                {"dtype": dtype},
            )
        )
        cases.append(
            Case(
                "StatelessRandomUniformIntV2",
                {"shape": dims, "key": key, "counter": counter, "alg": alg, **bounds},
            )
        )
        cases.append(Case("StatelessRandomGetKeyCounter", {"seed": seed}))
        seeds = {"seed": int(rng.integers(1, 2**31)), "seed2": int(rng.integers(0, 2**31))}
        cases.append(Case("RandomUniform", {"shape": dims}, {"dtype": dtype, **seeds}))
        cases.append(Case("RandomStandardNormal", {"shape": dims}, {"dtype": dtype, **seeds}))
        cases.append(Case("TruncatedNormal", {"shape": dims}, {"dtype": dtype, **seeds}))
        cases.append(Case("RandomUniformInt", {"shape": dims, **bounds}, seeds))
    return cases


def categorical(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        logits = (rng.normal(size=(int(rng.integers(1, 4)), int(rng.integers(1, 7)))) * 3).astype(
            str(rng.choice(["float32", "float64"]))
        )
        if rng.random() < 0.3:
            logits.flat[0] = -np.inf
        samples = np.array(int(rng.integers(0, 9)), np.int32)
        seed = rng.integers(-(2**40), 2**40, size=2).astype(np.int64)
        out = str(rng.choice(["int64", "int32"]))
        cases.append(
            Case(
                "StatelessMultinomial",
                {"logits": logits, "num_samples": samples, "seed": seed},
                {"output_dtype": out},
            )
        )
        seeds = {"seed": int(rng.integers(1, 2**31)), "seed2": int(rng.integers(0, 2**31))}
        cases.append(
            Case("Multinomial", {"logits": logits, "num_samples": samples}, {"output_dtype": out, **seeds})
        )
    return cases


def families() -> dict[str, Callable[[np.random.Generator, int], list[Case]]]:
    return {"random": randoms, "categorical": categorical}
