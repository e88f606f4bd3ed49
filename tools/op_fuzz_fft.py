"""op_fuzz families: Fourier transforms and complex parts."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from op_fuzz import Case, values


def ffts(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        for dims, suffix in ((1, ""), (2, "2D"), (3, "3D")):
            shape = tuple(int(d) for d in rng.integers(1, 6, size=dims + int(rng.integers(0, 2))))
            ctype = str(rng.choice(["complex64", "complex128"]))
            z = values(rng, shape, ctype, edge=False)
            cases.append(Case(f"FFT{suffix}", {"input": z}))
            cases.append(Case(f"IFFT{suffix}", {"input": z}))
            rtype = "float32" if ctype == "complex64" else "float64"
            x = values(rng, shape, rtype, edge=False)
            lengths = [
                int(n) if rng.random() < 0.7 else int(d)
                for n, d in zip(rng.integers(1, 8, size=dims), shape[-dims:], strict=True)
            ]
            fl = np.array(lengths, np.int32)
            cases.append(Case(f"RFFT{suffix}", {"input": x, "fft_length": fl}, {"Tcomplex": ctype}))
            cases.append(Case(f"IRFFT{suffix}", {"input": z, "fft_length": fl}, {"Treal": rtype}))
        ctype = str(rng.choice(["complex64", "complex128"]))
        z = values(rng, (int(rng.integers(0, 4)), 3), ctype, edge=False)
        rtype = "float32" if ctype == "complex64" else "float64"
        for op in ("Real", "Imag", "ComplexAbs", "Angle"):
            cases.append(Case(op, {"input": z} if op != "ComplexAbs" else {"x": z}, {"Tout": rtype}))
        cases.append(Case("Conj", {"input": z}))
        re = values(rng, (2, 3), rtype, edge=False)
        cases.append(
            Case("Complex", {"real": re, "imag": values(rng, (3,), rtype, edge=False)}, {"Tout": ctype})
        )
    return cases


def inverses(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    edges = np.array([-1.0, 1.0, -1.0000001, 1.5, 0.0, -0.0, 0.9999999, -0.9999, 1e-30, 0.5, np.nan])
    for _ in range(count):
        for dtype in ("float32", "float64", "float16"):
            y = np.concatenate([rng.uniform(-1, 1, 20), np.tanh(rng.standard_normal(10) * 4), edges]).astype(
                dtype
            )
            cases.append(Case("Erfinv", {"x": y}))
            p = np.concatenate([rng.uniform(0, 1, 20), [0.0, 1.0, 1e-10, 1 - 1e-7, 0.5, -0.1, 1.1]]).astype(
                dtype
            )
            cases.append(Case("Ndtri", {"x": p}))
    return cases


def families() -> dict[str, Callable[[np.random.Generator, int], list[Case]]]:
    return {"fft": ffts, "inverses": inverses}
