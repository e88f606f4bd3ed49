"""op_fuzz families: detection post-processing (NonMaxSuppression V2-V5, WithOverlaps, Combined,
CropAndResize, ExtractImagePatches) and the array extras (Roll, ReverseSequence, LinSpace, the MatrixDiag
family, Diag, DiagPart, LowerBound/UpperBound, UniqueV2, UniqueWithCounts(V2), InTopKV2, ListDiff, Empty,
Bitcast, Print, CheckNumericsV2)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from op_fuzz import Case, values


def _i(v: object, dtype: str = "int32") -> np.ndarray:
    return np.array(v, dtype=dtype)


def _f(v: object, dtype: str = "float32") -> np.ndarray:
    return np.array(v, dtype=dtype)


def _boxes(rng: np.random.Generator, n: int, dtype: str = "float32", nan: bool = False) -> np.ndarray:
    """Boxes on a coarse grid (many exact overlaps, IoUs on the threshold), some flipped or empty."""
    lo = rng.integers(0, 6, size=(n, 2)) / 4
    size = rng.integers(0, 5, size=(n, 2)) / 4
    hi = lo + size
    b = np.concatenate([lo, hi], axis=1)[:, [0, 1, 2, 3]]
    flip = rng.random(n) < 0.2
    b[flip] = b[flip][:, [2, 3, 0, 1]]
    if nan and n:
        b[rng.random((n, 4)) < 0.05] = np.nan
    return b.astype(dtype)


def _scores(rng: np.random.Generator, n: int, dtype: str = "float32", ties: bool = True) -> np.ndarray:
    if ties:
        return (rng.integers(0, 8, size=n) / 8).astype(dtype)
    return (rng.permutation(n * 3)[:n] / max(n * 3, 1)).astype(dtype)


def nms(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count * 2):
        n = int(rng.integers(0, 12))
        dtype = str(rng.choice(["float32", "float32", "float16"]))
        tdt = str(rng.choice(["float32", "float16"]))
        boxes = _boxes(rng, n, dtype, nan=rng.random() < 0.2)
        scores = _scores(rng, n, dtype)
        if n and rng.random() < 0.1:
            scores[int(rng.integers(0, n))] = np.nan
        limit = _i(int(rng.integers(-1 if rng.random() < 0.05 else 0, n + 3)))
        iou = float(rng.choice([0.0, 0.25, 0.5, 1 / 3, 0.7, 1.0, 1.5 if rng.random() < 0.1 else 0.5]))
        thr = float(rng.choice([-np.inf, 0.0, 0.25, 0.5]))
        base = {"boxes": boxes, "scores": scores, "max_output_size": limit}
        cases.append(Case("NonMaxSuppressionV2", {**base, "iou_threshold": _f(iou, tdt)}))
        cases.append(
            Case(
                "NonMaxSuppressionV3",
                {**base, "iou_threshold": _f(iou, tdt), "score_threshold": _f(thr, tdt)},
            )
        )
        cases.append(
            Case(
                "NonMaxSuppressionV4",
                {**base, "iou_threshold": _f(iou, tdt), "score_threshold": _f(thr, tdt)},
                {"pad_to_max_output_size": bool(rng.random() < 0.5)},
            )
        )
        sigma = float(rng.choice([0.0, 0.0, 0.1, 0.5, 1.0, -0.5 if rng.random() < 0.1 else 0.3]))
        cases.append(
            Case(
                "NonMaxSuppressionV5",
                {
                    **base,
                    "iou_threshold": _f(iou, dtype),
                    "score_threshold": _f(thr, dtype),
                    "soft_nms_sigma": _f(sigma, dtype),
                },
                {"pad_to_max_output_size": bool(rng.random() < 0.5)},
            )
        )
        cases.append(Case("NonMaxSuppression", {**base}, {"iou_threshold": iou}))
        ov = values(rng, (n, n), "float32", edge=rng.random() < 0.3)
        cases.append(
            Case(
                "NonMaxSuppressionWithOverlaps",
                {
                    "overlaps": ov,
                    "scores": scores.astype("float32"),
                    "max_output_size": limit,
                    "overlap_threshold": _f(float(rng.choice([0.0, 0.5, 1.0, 2.0]))),
                    "score_threshold": _f(thr),
                },
            )
        )
    return cases


def combined(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count * 2):
        batch = int(rng.integers(1, 3))
        n = int(rng.integers(0, 8))
        classes = int(rng.integers(1, 4))
        q = int(rng.choice([1, classes]))
        boxes = np.stack([_boxes(rng, n * q) for _ in range(batch)]).reshape(batch, n, q, 4)
        boxes = boxes * 1.5 - 0.25  # some corners outside [0, 1]: clipped
        # distinct scores: TensorFlow's order of equal ones is its heap's and its sort's
        scores = np.stack([_scores(rng, n * classes, ties=False) for _ in range(batch)])
        scores = scores.reshape(batch, n, classes)
        per_class = int(rng.integers(0 if rng.random() < 0.05 else 1, n + 2))
        total = int(rng.integers(0 if rng.random() < 0.05 else 1, n * classes + 3))
        cases.append(
            Case(
                "CombinedNonMaxSuppression",
                {
                    "boxes": boxes.astype("float32"),
                    "scores": scores.astype("float32"),
                    "max_output_size_per_class": _i(per_class),
                    "max_total_size": _i(total),
                    "iou_threshold": _f(float(rng.choice([0.0, 0.3, 0.5, 1.0]))),
                    "score_threshold": _f(float(rng.choice([-np.inf, 0.0, 0.3]))),
                },
                {"pad_per_class": bool(rng.random() < 0.5), "clip_boxes": bool(rng.random() < 0.5)},
            )
        )
    return cases


def crops(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count * 2):
        dtype = str(rng.choice(["float32", "uint8", "int32", "float64", "float16", "int64"]))
        batch = int(rng.integers(1, 3))
        h, w = int(rng.integers(1 if rng.random() < 0.95 else 0, 6)), int(rng.integers(1, 6))
        img = values(rng, (batch, h, w, int(rng.integers(1, 3))), dtype, edge=False)
        n = int(rng.integers(0, 4))
        boxes = (rng.integers(-2, 7, size=(n, 4)) / 4).astype("float32")
        if rng.random() < 0.3:
            boxes = rng.uniform(-0.3, 1.3, size=(n, 4)).astype("float32")
        if n and rng.random() < 0.05:
            boxes[0, 1] = np.inf
        box_ind = rng.integers(0, batch + (1 if rng.random() < 0.05 else 0), size=n).astype("int32")
        size = _i([int(rng.integers(1, 5)), int(rng.integers(1 if rng.random() < 0.95 else 0, 5))])
        cases.append(
            Case(
                "CropAndResize",
                {"image": img, "boxes": boxes, "box_ind": box_ind, "crop_size": size},
                {
                    "method": str(rng.choice(["bilinear", "nearest"])),
                    "extrapolation_value": float(rng.choice([0.0, -1.0, 2.5])),
                },
            )
        )
    return cases


def patches(rng: np.random.Generator, count: int) -> list[Case]:
    cases = []
    for _ in range(count * 2):
        dtype = str(rng.choice(["float32", "int32", "uint8", "float64", "complex64", "int64"]))
        x = values(rng, (int(rng.integers(0, 3)), int(rng.integers(0, 7)), int(rng.integers(1, 7)), 2), dtype)
        k = [1, int(rng.integers(1, 4)), int(rng.integers(1, 4)), 1]
        s = [1, int(rng.integers(1, 4)), int(rng.integers(1, 4)), 1]
        r = [1, int(rng.integers(1, 3)), int(rng.integers(1, 3)), 1]
        cases.append(
            Case(
                "ExtractImagePatches",
                {"images": x},
                {"ksizes": k, "strides": s, "rates": r, "padding": str(rng.choice(["SAME", "VALID"]))},
            )
        )
    return cases


def _dims(rng: np.random.Generator, lo: int = 0, hi: int = 4, max_dim: int = 4) -> tuple[int, ...]:
    return tuple(int(d) for d in rng.integers(0, max_dim + 1, size=int(rng.integers(lo, hi))))


DTYPES = ("float32", "int32", "float64", "int64", "uint8", "bool", "float16", "int8", "complex64")


def reorders(rng: np.random.Generator, count: int) -> list[Case]:
    """Roll, ReverseSequence, LinSpace, Empty, Bitcast."""
    cases = []
    for _ in range(count * 2):
        dtype = str(rng.choice(DTYPES))
        dims = _dims(rng, 0 if rng.random() < 0.05 else 1, 4)
        x = values(rng, dims, dtype)
        rank = len(dims)
        n = int(rng.integers(1, 4))
        idx = str(rng.choice(["int32", "int64"]))
        axis = rng.integers(-rank - (rng.random() < 0.05), max(rank, 1), size=n)
        shift = rng.integers(-7, 8, size=n)
        if rng.random() < 0.3:
            axis, shift = axis[:1].reshape(()), shift[:1].reshape(())
        cases.append(
            Case(
                "Roll",
                {
                    "input": x,
                    "shift": shift.astype(idx),
                    "axis": axis.astype(str(rng.choice(["int32", "int64"]))),
                },
            )
        )
        if rank >= 2:
            b, sdim = (int(v) for v in rng.choice(rank, size=2, replace=False))
            lens = rng.integers(0, dims[sdim] + 1, size=dims[b])
            if dims[b] and rng.random() < 0.05:
                lens[0] = dims[sdim] + 1
            cases.append(
                Case(
                    "ReverseSequence",
                    {"input": x, "seq_lengths": lens.astype(idx)},
                    {"seq_dim": sdim, "batch_dim": b},
                )
            )
        fdt = str(rng.choice(["float32", "float64", "float16"]))
        start, stop = (float(v) for v in rng.choice([0.0, 1.0, -2.5, 10.0, 1 / 3, 1e6], size=2))
        num = int(rng.integers(-1 if rng.random() < 0.05 else 1, 12))
        cases.append(Case("LinSpace", {"start": _f(start, fdt), "stop": _f(stop, fdt), "num": _i(num, idx)}))
        shape = rng.integers(-1 if rng.random() < 0.05 else 0, 4, size=int(rng.integers(0, 3)))
        cases.append(Case("Empty", {"shape": shape.astype("int32")}, {"dtype": dtype, "init": True}))
        to = str(
            rng.choice(["float32", "int32", "uint8", "int64", "float16", "int16", "complex64", "float64"])
        )
        bdt = str(rng.choice(["float32", "int32", "uint8", "int64", "float16", "int16"]))
        bd = _dims(rng, 0, 3)
        ratio = np.dtype(to).itemsize // np.dtype(bdt).itemsize
        if ratio > 1 and rng.random() < 0.8:
            bd = (*bd, ratio)
        bx = values(rng, bd, bdt, edge=False)
        cases.append(Case("Bitcast", {"input": bx}, {"type": to}))
    return cases


def diagonals(rng: np.random.Generator, count: int) -> list[Case]:
    """Diag, DiagPart and the MatrixDiag family, every alignment and k range."""
    cases = []
    aligns = ["LEFT_RIGHT", "RIGHT_LEFT", "LEFT_LEFT", "RIGHT_RIGHT"]
    for _ in range(count * 2):
        dtype = str(rng.choice(DTYPES))
        batch = _dims(rng, 0, 2, 3)
        rows, cols = (
            int(rng.integers(0 if rng.random() < 0.1 else 1, 5)),
            int(rng.integers(0 if rng.random() < 0.1 else 1, 5)),
        )
        x = values(rng, (*batch, rows, cols), dtype)
        lo = int(rng.integers(-rows, max(cols, 1))) if rng.random() < 0.95 else -rows - 1
        hi = int(rng.integers(lo, max(cols, lo + 1))) if rng.random() < 0.9 else lo
        if rng.random() < 0.05:
            lo, hi = hi, lo
        k = _i([lo, hi]) if rng.random() < 0.7 else _i(lo)
        if k.ndim == 0:
            hi = lo
        align = str(rng.choice(aligns))
        pad = values(rng, (), dtype)
        cases.append(Case("MatrixDiagPartV3", {"input": x, "k": k, "padding_value": pad}, {"align": align}))
        cases.append(Case("MatrixDiagPartV2", {"input": x, "k": k, "padding_value": pad}))
        cases.append(Case("MatrixDiagPart", {"input": x}))
        num = hi - lo + 1
        max_len = min(rows + min(hi, 0), cols - max(lo, 0))
        if lo <= hi and max_len >= 0:
            dshape = (*batch, *((num,) if num > 1 else ()), max(max_len, 0) + int(rng.random() < 0.05))
            d = values(rng, dshape, dtype)
            cases.append(Case("MatrixSetDiagV3", {"input": x, "diagonal": d, "k": k}, {"align": align}))
            cases.append(Case("MatrixSetDiagV2", {"input": x, "diagonal": d, "k": k}))
            nr = int(rng.choice([-1, -1, rows, rows + 1]))
            nc = int(rng.choice([-1, -1, cols, cols + 1]))
            cases.append(
                Case(
                    "MatrixDiagV3",
                    {"diagonal": d, "k": k, "num_rows": _i(nr), "num_cols": _i(nc), "padding_value": pad},
                    {"align": align},
                )
            )
            cases.append(
                Case(
                    "MatrixDiagV2",
                    {"diagonal": d, "k": k, "num_rows": _i(nr), "num_cols": _i(nc), "padding_value": pad},
                )
            )
        v = values(rng, (*batch, cols), dtype)
        cases.append(Case("MatrixDiag", {"diagonal": v}))
        cases.append(
            Case("MatrixSetDiag", {"input": x, "diagonal": values(rng, (*batch, min(rows, cols)), dtype)})
        )
        ddt = str(rng.choice(["float32", "int32", "float64", "int64", "complex64", "float16"]))
        dd = _dims(rng, 0 if rng.random() < 0.1 else 1, 4, 3)
        cases.append(Case("Diag", {"diagonal": values(rng, dd, ddt)}))
        sq = dd + dd if rng.random() < 0.9 else dd + tuple(d + 1 for d in dd)
        cases.append(Case("DiagPart", {"input": values(rng, sq, ddt)}))
    return cases


def lookups(rng: np.random.Generator, count: int) -> list[Case]:
    """LowerBound/UpperBound, UniqueV2, UniqueWithCounts(V2), InTopK(V2), ListDiff."""
    cases = []
    for _ in range(count * 2):
        dtype = str(rng.choice(["float32", "int32", "float64", "int64", "uint8", "float16", "int16"]))
        b = int(rng.integers(0 if rng.random() < 0.1 else 1, 4))
        srt = np.sort(values(rng, (b, int(rng.integers(0, 6))), dtype), axis=-1)
        vals = values(rng, (b, int(rng.integers(0, 6))), dtype)
        if dtype.startswith("float") and rng.random() < 0.5:
            srt = np.round(srt)  # exact ties with the values
            vals = np.round(vals)
        if dtype.startswith("float") and srt.size and rng.random() < 0.3:
            srt[rng.random(srt.shape) < 0.2] = np.nan  # NaNs anywhere: libstdc++'s probes decide
        out = str(rng.choice(["int32", "int64"]))
        cases.append(Case("LowerBound", {"sorted_inputs": srt, "values": vals}, {"out_type": out}))
        cases.append(Case("UpperBound", {"sorted_inputs": srt, "values": vals}, {"out_type": out}))
        udt = str(rng.choice(["float32", "int32", "float64", "int64", "float16", "bool", "int8"]))
        dims = _dims(rng, 0 if rng.random() < 0.1 else 1, 4, 4)
        x = values(rng, dims, udt)
        if udt not in ("bool",):
            x = (x % 3).astype(udt) if udt.startswith("int") else x
            if udt.startswith("float") and x.size:
                x[rng.random(x.shape) < 0.5] = 1.0  # repeats
        axis = int(rng.integers(-len(dims) - (rng.random() < 0.05), max(len(dims), 1)))
        ax = _i([axis], str(rng.choice(["int32", "int64"]))) if rng.random() < 0.85 else np.zeros(0, "int64")
        cases.append(Case("UniqueV2", {"x": x, "axis": ax}, {"out_idx": out}))
        cases.append(Case("UniqueWithCountsV2", {"x": x, "axis": ax}, {"out_idx": out}))
        flat = x.reshape(-1) if rng.random() < 0.9 else x
        cases.append(Case("UniqueWithCounts", {"x": flat}, {"out_idx": out}))
        y = values(rng, (int(rng.integers(0, 5)),), udt)
        if udt.startswith("int"):
            y = (y % 3).astype(udt)
        cases.append(Case("ListDiff", {"x": flat, "y": y}, {"out_idx": out}))
        nb, nc = int(rng.integers(0, 4)), int(rng.integers(0, 5))
        pred = values(rng, (nb, nc), "float32", edge=rng.random() < 0.3)
        if rng.random() < 0.5:
            pred = np.round(pred)  # ties
        tdt = str(rng.choice(["int32", "int64"]))
        tg = rng.integers(-1 if rng.random() < 0.1 else 0, nc + 1 + (rng.random() < 0.1), size=nb).astype(tdt)
        k = int(rng.integers(-1, nc + 2))
        cases.append(Case("InTopKV2", {"predictions": pred, "targets": tg, "k": _i(k, tdt)}))
        cases.append(Case("InTopK", {"predictions": pred, "targets": tg}, {"k": k}))
    return cases


def checks(rng: np.random.Generator, count: int) -> list[Case]:
    """CheckNumericsV2 and Print (a pass-through)."""
    cases = []
    for _ in range(count):
        dtype = str(rng.choice(["float32", "float64", "float16"]))
        x = values(rng, _dims(rng), dtype, edge=rng.random() < 0.5)
        cases.append(Case("CheckNumericsV2", {"tensor": x}, {"message": "checked"}))
        cases.append(Case("Print", {"input": x, "data": [x]}, {"message": "fuzz: ", "first_n": 1}))
    return cases


def draw_and_encode(rng: np.random.Generator, count: int) -> list[Case]:
    """DrawBoundingBoxes(V2) and EncodePng. Boxes stay finite: TensorFlow casts their corners to int64,
    undefined for NaN and infinities."""
    cases = []
    for _ in range(count):
        dims = (
            int(rng.integers(0, 3)),
            *(int(d) for d in rng.integers(0, 7, 2)),
            int(rng.choice([1, 2, 3, 4])),
        )
        images = values(rng, dims, str(rng.choice(["float32", "float16"])))
        boxes = rng.uniform(-0.5, 1.5, (dims[0] if rng.random() < 0.9 else 1, int(rng.integers(0, 5)), 4))
        boxes = boxes.astype(np.float32)
        cases.append(Case("DrawBoundingBoxes", {"images": images, "boxes": boxes}))
        colors = rng.uniform(-1, 2, (int(rng.integers(0, 4)), int(rng.integers(0, 6)))).astype(np.float32)
        cases.append(Case("DrawBoundingBoxesV2", {"images": images, "boxes": boxes, "colors": colors}))
        rank = int(rng.choice([2, 3, 3, 4]))
        png_dims = tuple(int(d) for d in rng.integers(0 if rng.random() < 0.1 else 1, 9, rank - 1))
        dtype = str(rng.choice(["uint8", "uint16"]))
        image = values(rng, (*png_dims, int(rng.choice([1, 2, 3, 4, 5]))), dtype)
        cases.append(Case("EncodePng", {"image": image}, {"compression": int(rng.integers(-1, 10))}))
    return cases


def families() -> dict[str, Callable[[np.random.Generator, int], list[Case]]]:
    return {
        "detect_draw_encode": draw_and_encode,
        "detect_nms": nms,
        "detect_combined": combined,
        "detect_crops": crops,
        "detect_patches": patches,
        "detect_reorders": reorders,
        "detect_diagonals": diagonals,
        "detect_lookups": lookups,
        "detect_checks": checks,
    }
