"""op_fuzz families: block moves (SpaceToBatchND, BatchToSpaceND and their v1 forms, SpaceToDepth,
DepthToSpace) and bucketing (Bucketize, Bincount, DenseBincount)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from op_fuzz import Case, values


def _i(v: object, dtype: str = "int32") -> np.ndarray:
    return np.array(v, dtype=dtype)


def block_moves(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count * 3):
        m = int(rng.integers(1, 4))
        rest = tuple(int(d) for d in rng.integers(1, 4, size=int(rng.integers(0, 2))))
        block = [int(b) for b in rng.integers(1, 4, size=m)]
        pads = [[int(a), int(b)] for a, b in rng.integers(0, 3, size=(m, 2))]
        spatial = []
        for b, (p0, p1) in zip(block, pads, strict=True):
            n = int(rng.integers(0, 3)) * b - p0 - p1
            if n < 0 or rng.random() < 0.1:
                n = int(rng.integers(0, 5))  # often not divisible: refused
            spatial.append(max(n, 0))
        batch = int(rng.integers(1, 3))
        dtype = str(rng.choice(["float32", "int32", "float64", "int64", "bool", "uint8"]))
        x = values(rng, (batch, *spatial, *rest), dtype)
        cases.append(Case("SpaceToBatchND", {"input": x, "block_shape": _i(block), "paddings": _i(pads)}))
        out_spatial = [int(rng.integers(0, 4)) for _ in range(m)]
        bb = batch * int(np.prod(block)) if rng.random() < 0.85 else batch * int(np.prod(block)) + 1
        crops = [[int(rng.integers(0, 3)), int(rng.integers(0, 3))] for _ in range(m)]
        y = values(rng, (bb, *out_spatial, *rest), dtype)
        idx = str(rng.choice(["int32", "int64"]))
        cases.append(
            Case("BatchToSpaceND", {"input": y, "block_shape": _i(block, idx), "crops": _i(crops, idx)})
        )
    for _ in range(count):
        size = int(rng.integers(2, 4))
        h, w = (int(rng.integers(0, 3)) * size for _ in range(2))
        x = values(rng, (int(rng.integers(1, 3)), h, w, int(rng.integers(1, 3))), "float32")
        pads = _i([[int(rng.integers(0, 2)) * size, 0], [0, int(rng.integers(0, 2)) * size]])
        cases.append(Case("SpaceToBatch", {"input": x, "paddings": pads}, {"block_size": size}))
        y = values(rng, (size * size * int(rng.integers(1, 3)), 2, 3, 2), "float32")
        cases.append(Case("BatchToSpace", {"input": y, "crops": _i([[0, 1], [1, 0]])}, {"block_size": size}))
        z = values(rng, (1, h + int(rng.random() < 0.2), w, 3), "float32")
        cases.append(Case("SpaceToDepth", {"input": z}, {"block_size": size}))
        d = values(rng, (2, 2, 3, size * size * int(rng.integers(1, 3)) + int(rng.random() < 0.2)), "int32")
        cases.append(Case("DepthToSpace", {"input": d}, {"block_size": size}))
    return cases


def buckets(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count):
        dtype = str(rng.choice(["float32", "float64", "int32", "int64"]))
        x = values(rng, tuple(int(d) for d in rng.integers(0, 4, size=int(rng.integers(0, 3)))), dtype)
        bounds = sorted(float(b) for b in rng.integers(-4, 5, size=int(rng.integers(0, 5))) / 2)
        cases.append(Case("Bucketize", {"input": x}, {"boundaries": bounds}))
    for _ in range(count * 2):
        rank = int(rng.integers(1, 3))
        dims = tuple(int(d) for d in rng.integers(0, 5, size=rank))
        idx = str(rng.choice(["int32", "int64"]))
        arr = rng.integers(-1 if rng.random() < 0.1 else 0, 8, size=dims).astype(idx)
        wdt = str(rng.choice(["float32", "float64", "int32", "int64"]))
        weights = values(rng, dims, wdt, edge=False) if rng.random() < 0.5 else np.zeros((0,), wdt)
        size = _i(int(rng.integers(0, 9)), idx)
        binary = bool(rng.random() < 0.4)
        cases.append(
            Case(
                "DenseBincount",
                {"input": arr, "size": size, "weights": weights},
                {"binary_output": binary},
            )
        )
        if rank == 1 and idx == "int32":
            w1 = weights if weights.size else np.zeros((0,), wdt)
            cases.append(Case("Bincount", {"arr": arr, "size": _i(int(size)), "weights": w1}))
    return cases


def volumes(rng: np.random.Generator, count: int) -> list[Case]:
    """Conv3D, its input gradients and the 3-D pools (NDHWC)."""
    cases = []
    for _ in range(count * 2):
        dtype = str(rng.choice(["float32", "float32", "float64", "float16"]))
        n = int(rng.integers(0 if rng.random() < 0.05 else 1, 3))
        spatial = [int(d) for d in rng.integers(1, 7, size=3)]
        c, o = (int(d) for d in rng.integers(1, 4, size=2))
        k = [int(d) for d in rng.integers(1, 4, size=3)]
        strides = [1, *(int(s) for s in rng.integers(1, 3, size=3)), 1]
        dil = [1, *(int(s) for s in rng.integers(1, 3, size=3)), 1] if rng.random() < 0.4 else [1] * 5
        padding = str(rng.choice(["SAME", "VALID"]))
        x = values(rng, (n, *spatial, c), dtype, edge=False)
        w = values(rng, (*k, c if rng.random() < 0.95 else c + 1, o), dtype, edge=False)
        attrs = {"strides": strides, "padding": padding, "dilations": dil}
        cases.append(Case("Conv3D", {"input": x, "filter": w}, attrs))
        # the gradient of the same geometry: out_backprop of the forward output's shape
        outs = []
        for size, kk, s, d in zip(spatial, k, strides[1:4], dil[1:4], strict=True):
            eff = (kk - 1) * d + 1
            outs.append((size + s - 1) // s if padding == "SAME" else max((size - eff + s) // s, 0))
        dy = values(rng, (n, *outs, o), dtype, edge=False)
        wb = values(rng, (*k, c, o), dtype, edge=False)
        sizes = _i([n, *spatial, c])
        cases.append(
            Case("Conv3DBackpropInputV2", {"input_sizes": sizes, "filter": wb, "out_backprop": dy}, attrs)
        )
        ksize = [1, *k, 1]
        pool = {"ksize": ksize, "strides": strides, "padding": padding}
        xp = values(rng, (n, *spatial, c), dtype, edge=rng.random() < 0.7)
        xp[np.isnan(xp)] = 0  # NaN windows: see max_pool3d
        cases.append(Case("MaxPool3D", {"input": xp}, pool))
        cases.append(Case("AvgPool3D", {"input": x}, pool))
    return cases


def resizes(rng: np.random.Generator, count: int) -> list[Case]:
    """ResizeBicubic and ResizeArea, up and down, every corner/center setting."""
    cases = []
    for _ in range(count * 2):
        dtype = str(rng.choice(["float32", "float64", "uint8", "int32", "float16"]))
        dims = (
            int(rng.integers(1, 3)),
            int(rng.integers(1, 9)),
            int(rng.integers(1, 9)),
            int(rng.integers(1, 4)),
        )
        x = values(rng, dims, dtype, edge=False)
        size = _i([int(rng.integers(1, 13)), int(rng.integers(1, 13))])
        align = bool(rng.random() < 0.3)
        half = bool(rng.random() < 0.5) and not align
        cases.append(
            Case(
                "ResizeBicubic",
                {"images": x, "size": size},
                {"align_corners": align, "half_pixel_centers": half},
            )
        )
        cases.append(Case("ResizeArea", {"images": x, "size": size}, {"align_corners": align}))
    return cases


def colors(rng: np.random.Generator, count: int) -> list[Case]:
    """RGB/HSV conversions and the contrast and saturation adjustments."""
    cases = []
    for _ in range(count):
        dtype = str(rng.choice(["float32", "float64"]))
        dims = (*(int(d) for d in rng.integers(1, 5, size=int(rng.integers(1, 3)))), 3)
        x = rng.uniform(0, 1, dims).astype(dtype)
        if rng.random() < 0.3:  # grays, pure hues, blacks: the branches of the conversion
            flat = x.reshape(-1, 3)
            flat[0] = flat[0, :1]
            flat[-1] = [1.0, 0.0, 0.0][: flat.shape[1]]
        cases.append(Case("RGBToHSV", {"images": x}))
        cases.append(Case("HSVToRGB", {"images": x}))
        img = rng.uniform(0, 1, (int(rng.integers(1, 3)), 4, 5, 3)).astype(np.float32)
        factor = np.array(rng.uniform(0, 3), np.float32)
        cases.append(Case("AdjustContrastv2", {"images": img, "contrast_factor": factor}))
        cases.append(Case("AdjustSaturation", {"images": img, "scale": factor}))
    return cases


def projective(rng: np.random.Generator, count: int) -> list[Case]:
    """ImageProjectiveTransformV3: every interpolation and fill mode, affine and projective transforms."""
    cases = []
    for _ in range(count * 2):
        dtype = str(rng.choice(["float32", "float64", "uint8", "int32"]))
        n = int(rng.integers(1, 3))
        x = values(
            rng,
            (n, int(rng.integers(1, 7)), int(rng.integers(1, 7)), int(rng.integers(1, 3))),
            dtype,
            edge=False,
        )
        t = rng.normal(size=(1 if rng.random() < 0.5 else n, 8)).astype(np.float32)
        t[:, 0] += 1
        t[:, 4] += 1
        t[:, 2] *= 3
        t[:, 5] *= 3
        if rng.random() < 0.6:
            t[:, 6:] = 0  # affine
        else:
            t[:, 6:] *= 0.1
        size = _i([int(rng.integers(1, 8)), int(rng.integers(1, 8))])
        attrs = {
            "interpolation": str(rng.choice(["NEAREST", "BILINEAR"])),
            "fill_mode": str(rng.choice(["REFLECT", "WRAP", "CONSTANT", "NEAREST"])),
        }
        fill = np.array(float(rng.choice([0.0, 2.0, -1.5])), np.float32)
        cases.append(
            Case(
                "ImageProjectiveTransformV3",
                {"images": x, "transforms": t, "output_shape": size, "fill_value": fill},
                attrs,
            )
        )
    return cases


def scale_translate(rng: np.random.Generator, count: int) -> list[Case]:
    """ScaleAndTranslate with every sampling kernel, up and down, translated, with and without antialias."""
    cases = []
    kinds = ["lanczos1", "lanczos3", "lanczos5", "gaussian", "box", "triangle", "keyscubic", "mitchellcubic"]
    for _ in range(count):
        for kind in kinds:
            dtype = str(rng.choice(["float32", "float64", "uint8", "int32"]))
            dims = (
                int(rng.integers(1, 3)),
                int(rng.integers(1, 9)),
                int(rng.integers(1, 9)),
                int(rng.integers(1, 3)),
            )
            x = values(rng, dims, dtype, edge=False)
            out = [int(rng.integers(1, 13)), int(rng.integers(1, 13))]
            scale = np.array([out[0] / dims[1], out[1] / dims[2]], np.float32) * np.float32(
                rng.choice([1.0, 1.0, 0.7, 1.3])
            )
            translation = np.array(rng.normal(size=2) * float(rng.choice([0.0, 1.0])), np.float32)
            attrs = {"kernel_type": kind, "antialias": bool(rng.random() < 0.6)}
            cases.append(
                Case(
                    "ScaleAndTranslate",
                    {"images": x, "size": _i(out), "scale": scale, "translation": translation},
                    attrs,
                )
            )
    return cases


def families() -> dict[str, Callable[[np.random.Generator, int], list[Case]]]:
    return {
        "block_moves": block_moves,
        "buckets": buckets,
        "volumes": volumes,
        "resizes": resizes,
        "colors": colors,
        "projective": projective,
        "scale_translate": scale_translate,
    }
