"""Object detection post-processing: non-max suppression (NonMaxSuppression to V5, WithOverlaps, Combined),
CropAndResize, ExtractImagePatches, and DrawBoundingBoxes (V1, V2: ``tf.image.draw_bounding_boxes``, what a
graph that answers with its detections drawn ends with).

TF Object Detection API exports (SSD, Faster R-CNN, EfficientDet) end in NonMaxSuppressionV3/V5 or
CombinedNonMaxSuppression (``tf.image.non_max_suppression*``, ``combined_non_max_suppression``); two-stage
models crop their proposals with CropAndResize; Keras CV's detectors and patch embeddings use
ExtractImagePatches (``tf.image.extract_patches``).

Greedy NMS follows TensorFlow's CPU kernel (non_max_suppression_op.cc) exactly:

- candidates are the scores strictly above ``score_threshold``, taken by score descending, ties by the lower
  box index (TensorFlow's priority queue order); a NaN score is never a candidate;
- boxes are normalized first (each corner pair min/max with ``std::min``/``std::max``'s NaN rules, so
  y1 > y2 is a flipped box, not an empty one); IoU is float32 arithmetic in TensorFlow's order, 0 when
  either area is <= 0;
- a candidate is dropped when its IoU with an already selected box is above ``iou_threshold``. TensorFlow
  also weighs its score by ``exp(0 * iou^2)`` where the IoU is at most the threshold, and by 0 where it is
  not a number: such a candidate goes back in the queue with score 0 (or -0) when that is above
  ``score_threshold`` (a NaN weight, from an infinite ``WithOverlaps`` similarity, drops it). The vectorized
  path covers finite similarities; a candidate meeting any other takes TensorFlow's step-by-step path;
- half boxes and scores: IoU in float32, rounded to half before the threshold test, as TensorFlow does;
- soft-NMS (V5, ``soft_nms_sigma`` > 0) re-queues a candidate whose score decayed, with TensorFlow's
  Gaussian weights in the scores' precision, multiplied in TensorFlow's order.

CombinedNonMaxSuppression runs the plain greedy NMS per batch and class (without the NaN rule: its kernel
only compares the IoU) and keeps the best ``max_total_size``. Its per-class queue and its final sort order
equal scores in an order that is an artifact of ``std::priority_queue`` and ``std::sort``; here equal
scores keep the lower box index, then the lower class, first (what TensorFlow gives for up to 16 results).
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np

from poolserve.proto import types_pb2
from poolserve.runtime.errors import InvalidArgumentError, OutOfRangeError, UnimplementedError
from poolserve.runtime.kernels._common import _bad_attr, _shape_str
from poolserve.runtime.kernels.conv_ops import _out_dim
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node

_F32 = np.dtype(np.float32)
_F16 = np.dtype(np.float16)
_INT32_MAX = 2**31 - 1


# --- IoU ---------------------------------------------------------------------------------------------------


def _std_min(a: Any, b: Any) -> Any:
    return np.where(b < a, b, a)  # std::min(a, b): a unless b < a (so a NaN ``a`` wins)


def _std_max(a: Any, b: Any) -> Any:
    return np.where(a < b, b, a)  # std::max(a, b): a unless a < b


class _Boxes:
    """[n, 4] boxes as float32, normalized once: corners (ymin, xmin, ymax, xmax) and areas."""

    __slots__ = ("area", "xmax", "xmin", "ymax", "ymin")

    def __init__(self, boxes: Any) -> None:
        b = boxes.astype(_F32, copy=False).reshape(-1, 4)
        self.ymin, self.ymax = _std_min(b[:, 0], b[:, 2]), _std_max(b[:, 0], b[:, 2])
        self.xmin, self.xmax = _std_min(b[:, 1], b[:, 3]), _std_max(b[:, 1], b[:, 3])
        self.area = (self.ymax - self.ymin) * (self.xmax - self.xmin)

    def iou(self, i: Any, j: int) -> Any:
        """TensorFlow's ``IOU(boxes, i, j)`` of the boxes ``i`` (an index array) with the box ``j``."""
        area_i, area_j = self.area[i], self.area[j]
        iy0 = _std_max(self.ymin[i], self.ymin[j])
        ix0 = _std_max(self.xmin[i], self.xmin[j])
        iy1 = _std_min(self.ymax[i], self.ymax[j])
        ix1 = _std_min(self.xmax[i], self.xmax[j])
        zero = np.float32(0)
        inter = _std_max(iy1 - iy0, zero) * _std_max(ix1 - ix0, zero)
        with np.errstate(all="ignore"):
            iou = inter / (area_i + area_j - inter)
        return np.where((area_i <= 0) | (area_j <= 0), zero, iou)


class _Overlaps:
    """NonMaxSuppressionWithOverlaps' similarity: a given [n, n] matrix."""

    __slots__ = ("m",)

    def __init__(self, overlaps: Any) -> None:
        self.m = overlaps

    def iou(self, i: Any, j: int) -> Any:
        return self.m[i, j]


# --- greedy NMS (NonMaxSuppression .. V5, WithOverlaps) -----------------------------------------------------


def _candidates(scores: Any, score_threshold: Any) -> Any:
    """Indices of the scores above the threshold, by score descending then index ascending."""
    keep = np.flatnonzero(scores > score_threshold)
    return keep[np.argsort(-scores[keep], kind="stable")]


def _fast_nms(
    sim: Any, scores: Any, limit: int, iou_thr: Any, score_thr: Any, dtype: Any, weighted: bool = True
) -> list[int] | None:
    """Greedy hard NMS: each candidate in turn is selected unless a selected box overlaps it by more than
    ``iou_thr``. With ``weighted`` (TensorFlow's NonMaxSuppression kernels, which weigh the score by
    ``exp(0 * iou^2)``), None when a candidate still in the running meets a similarity that is not finite:
    its weight is then 0 or NaN, which ``_exact_nms`` follows."""
    order = _candidates(scores, score_thr)
    alive = np.ones(order.size, dtype=bool)
    selected: list[int] = []
    k = 0
    while len(selected) < limit and k < order.size:
        if not alive[k]:
            step = int(np.argmax(alive[k:]))
            if not alive[k + step]:
                break
            k += step
        box = int(order[k])
        selected.append(box)
        rest = order[k + 1 :]
        if rest.size:
            s = sim.iou(rest, box).astype(dtype, copy=False)
            if weighted and not np.isfinite(s[alive[k + 1 :]]).all():
                return None
            alive[k + 1 :] &= ~(s > iou_thr)
        k += 1
    return selected


def _exact_nms(
    sim: Any, scores: Any, limit: int, iou_thr: Any, score_thr: Any, sigma: Any, dtype: Any
) -> tuple[list[int], list[Any]]:
    """TensorFlow's ``DoNonMaxSuppressionOp`` step by step: a priority queue of (score, index); each
    candidate popped is compared with the boxes selected since it was last queued, last first, its score
    multiplied by ``exp(scale * iou^2)`` (scale -0.5 / sigma, 0 without soft-NMS; a weight of 0 where a hard
    NMS similarity is not <= the threshold), in the scores' precision, until a similarity above
    ``iou_thr`` suppresses it (hard NMS) or its score falls to ``score_thr``. An unchanged score is selected,
    a lowered one above the threshold queued again."""
    t = np.dtype(dtype)
    soft = bool(sigma > 0)
    scale = t.type(-0.5) / t.type(sigma) if soft else t.type(0)
    queue = [(-float(scores[i]), int(i), 0, scores[i]) for i in _candidates(scores, score_thr)]
    heapq.heapify(queue)
    selected: list[int] = []
    kept: list[Any] = []
    while len(selected) < limit and queue:
        _, box, begin, score = heapq.heappop(queue)
        original = score
        if begin < len(selected):
            s = sim.iou(box, np.array(selected[begin:][::-1])).astype(t)
            with np.errstate(all="ignore"):
                x = (scale * s * s).astype(np.float64)
                weights = np.exp(x).astype(_F32).astype(t)
                if not soft:
                    weights = np.where(s <= iou_thr, weights, t.type(0))
                running = np.multiply.accumulate(np.concatenate([np.array([score], t), weights]))[1:]
            hard = (s > iou_thr) if not soft else np.zeros(s.shape, bool)
            stop = np.flatnonzero(hard | (running <= score_thr))
            if stop.size and hard[stop[0]]:
                continue
            score = running[stop[0]] if stop.size else running[-1]
        if score == original:
            selected.append(box)
            kept.append(score)
        elif score > score_thr:
            heapq.heappush(queue, (-float(score), box, len(selected), score))
    return selected, kept


def _greedy(
    sim: Any, scores: Any, limit: int, iou_thr: Any, score_thr: Any, dtype: Any, sigma: Any = 0
) -> tuple[list[int], list[Any]]:
    """The selected indices and their (soft-NMS: decayed) scores."""
    if not sigma > 0:
        fast = _fast_nms(sim, scores, limit, iou_thr, score_thr, dtype)
        if fast is not None:
            return fast, [scores[i] for i in fast]
    return _exact_nms(sim, scores, limit, iou_thr, score_thr, sigma, dtype)


def _scalar_input(t: Any, what: str, rank_note: bool = False) -> Any:
    if t.ndim != 0:
        note = f" (Shape must be rank 0 but is rank {t.ndim})" if rank_note else ""
        raise InvalidArgumentError(f"{what} must be 0-D, got shape {_shape_str(t.shape)}{note}")
    return t.reshape(())


def _check_boxes(boxes: Any, scores: Any) -> int:
    if boxes.ndim != 2:
        raise InvalidArgumentError(
            f"boxes must be 2-D{_shape_str(boxes.shape)} (Shape must be rank 2 but is rank {boxes.ndim})"
        )
    n = boxes.shape[0]
    if boxes.shape[1] != 4:
        raise InvalidArgumentError(f"boxes must have 4 columns (Dimension must be 4 but is {boxes.shape[1]})")
    _check_scores(scores, n)
    return int(n)


def _check_scores(scores: Any, n: int) -> None:
    if scores.ndim != 1:
        raise InvalidArgumentError(
            f"scores must be 1-D{_shape_str(scores.shape)} (Shape must be rank 1 but is rank {scores.ndim})"
        )
    if scores.shape[0] != n:
        raise InvalidArgumentError(
            f"scores has incompatible shape (Dimensions must be equal, but are {n} and {scores.shape[0]})"
        )


def _iou_threshold(t: Any, dtype: Any) -> Any:
    v = np.asarray(t).astype(dtype)
    if not (v >= 0 and v <= 1):
        raise InvalidArgumentError("iou_threshold must be in [0, 1]")
    return v


def _limit(t: Any) -> int:
    n = int(t)
    if n < 0:
        raise InvalidArgumentError("output size must be non-negative")
    return n


def _nms_type(node: Node, attr: str = "T") -> np.dtype[Any]:
    dtype = node.attr_dtype(attr, types_pb2.DT_FLOAT)
    if dtype not in (_F32, _F16):
        raise _bad_attr(node, attr, f"must be float32 or float16, got {dtype}")
    return dtype


def _nms(
    boxes: Any,
    scores: Any,
    limit_t: Any,
    iou_t: Any,
    score_t: Any | None,
    dtype: np.dtype[Any],
    rank_note: bool = False,
) -> list[int]:
    """The checks and the selection of NonMaxSuppressionV2/V3/V4 (no soft-NMS)."""
    _scalar_input(limit_t, "max_output_size", rank_note)
    iou = _iou_threshold(_scalar_input(iou_t, "iou_threshold", rank_note), dtype)
    score_thr = (
        np.asarray(np.finfo(dtype).min, dtype)
        if score_t is None
        else _scalar_input(score_t, "score_threshold").astype(dtype)
    )
    _check_boxes(boxes, scores)
    return _greedy(_Boxes(boxes), scores, _limit(limit_t), iou, score_thr, dtype)[0]


def _indices(selected: list[int], pad_to: int | None = None) -> Any:
    out = np.array(selected, dtype=np.int32)
    if pad_to is not None and out.size < pad_to:
        out = np.concatenate([out, np.zeros(pad_to - out.size, np.int32)])
    return out


@kernel("NonMaxSuppression")
def non_max_suppression(node: Node) -> Compute:
    iou_attr = node.attr_float("iou_threshold", 0.5)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        boxes, scores, limit_t = inputs
        _scalar_input(limit_t, "max_output_size")
        if not 0 <= iou_attr <= 1:
            raise InvalidArgumentError("iou_threshold must be in [0, 1]")
        _check_boxes(boxes, scores)
        lowest = np.float32(np.finfo(_F32).min)
        iou = _F32.type(iou_attr)
        return (_indices(_greedy(_Boxes(boxes), scores, _limit(limit_t), iou, lowest, _F32)[0]),)

    return compute


@kernel("NonMaxSuppressionV2")
def non_max_suppression_v2(node: Node) -> Compute:
    dtype = _nms_type(node)
    _nms_type(node, "T_threshold")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        boxes, scores, limit_t, iou_t = inputs
        return (_indices(_nms(boxes, scores, limit_t, iou_t, None, dtype)),)

    return compute


@kernel("NonMaxSuppressionV3")
def non_max_suppression_v3(node: Node) -> Compute:
    dtype = _nms_type(node)
    _nms_type(node, "T_threshold")

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        boxes, scores, limit_t, iou_t, score_t = inputs
        return (_indices(_nms(boxes, scores, limit_t, iou_t, score_t, dtype, rank_note=True)),)

    return compute


@kernel("NonMaxSuppressionV4", outputs=2)
def non_max_suppression_v4(node: Node) -> Compute:
    dtype = _nms_type(node)
    _nms_type(node, "T_threshold")
    pad = node.attr_bool("pad_to_max_output_size", False)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        boxes, scores, limit_t, iou_t, score_t = inputs
        selected = _nms(boxes, scores, limit_t, iou_t, score_t, dtype)
        valid = np.array(len(selected), np.int32)
        return _indices(selected, int(limit_t) if pad else None), valid

    return compute


@kernel("NonMaxSuppressionV5", outputs=3)
def non_max_suppression_v5(node: Node) -> Compute:
    dtype = _nms_type(node)
    pad = node.attr_bool("pad_to_max_output_size", False)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        boxes, scores, limit_t, iou_t, score_t, sigma_t = inputs
        _scalar_input(limit_t, "max_output_size")
        iou = _iou_threshold(_scalar_input(iou_t, "iou_threshold"), dtype)
        score_thr = _scalar_input(score_t, "score_threshold")
        sigma = _scalar_input(sigma_t, "soft_nms_sigma")
        if not sigma >= 0:
            raise InvalidArgumentError("soft_nms_sigma_val must be >= 0")
        _check_boxes(boxes, scores)
        limit = _limit(limit_t)
        selected, kept = _greedy(_Boxes(boxes), scores, limit, iou, score_thr, dtype, sigma)
        out_scores = np.array(kept, dtype=dtype).reshape(-1)
        indices = _indices(selected, limit if pad else None)
        if pad and out_scores.size < limit:
            out_scores = np.concatenate([out_scores, np.zeros(limit - out_scores.size, dtype)])
        return indices, out_scores, np.array(len(selected), np.int32)

    return compute


@kernel("NonMaxSuppressionWithOverlaps")
def non_max_suppression_with_overlaps(node: Node) -> Compute:
    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        overlaps, scores, limit_t, thr_t, score_t = inputs
        _scalar_input(limit_t, "max_output_size")
        thr = _scalar_input(thr_t, "overlap_threshold")
        score_thr = _scalar_input(score_t, "score_threshold")
        if overlaps.ndim != 2:
            raise InvalidArgumentError(f"overlaps must be 2-D{_shape_str(overlaps.shape)}")
        n = overlaps.shape[0]
        if overlaps.shape[1] != n:
            raise InvalidArgumentError(f"overlaps must be square{_shape_str(overlaps.shape)}")
        _check_scores(scores, n)
        selected = _greedy(_Overlaps(overlaps), scores, _limit(limit_t), thr, score_thr, _F32)[0]
        return (_indices(selected),)

    return compute


# --- CombinedNonMaxSuppression ------------------------------------------------------------------------------


@kernel("CombinedNonMaxSuppression", outputs=4, expensive=True)
def combined_non_max_suppression(node: Node) -> Compute:
    pad_per_class = node.attr_bool("pad_per_class", False)
    clip = node.attr_bool("clip_boxes", True)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        boxes, scores, per_class_t, total_t, iou_t, score_t = inputs
        if boxes.ndim != 4:
            raise InvalidArgumentError(
                f"boxes must be 4-D [batch, num_boxes, q, 4], got shape {_shape_str(boxes.shape)}"
            )
        if scores.ndim != 3:
            raise InvalidArgumentError(
                f"scores must be 3-D [batch, num_boxes, num_classes], got shape {_shape_str(scores.shape)}"
            )
        batch, num_boxes, q, _ = boxes.shape
        num_classes = scores.shape[2]
        if q not in (1, num_classes):
            raise InvalidArgumentError("third dimension of boxes must be either 1 or num classes")
        if boxes.shape[3] != 4:
            raise InvalidArgumentError("boxes must have 4 columns")
        if scores.shape[1] != num_boxes:
            raise InvalidArgumentError("scores has incompatible shape")
        if scores.shape[0] != batch:
            raise InvalidArgumentError("boxes and scores must have same batch size")
        per_class = int(_scalar_input(per_class_t, "max_size_per_class"))
        if per_class <= 0:
            raise InvalidArgumentError("max_size_per_class must be positive")
        total = int(_scalar_input(total_t, "max_total_size"))
        if total <= 0:
            raise InvalidArgumentError("max_total_size must be > 0")
        iou_thr = _scalar_input(iou_t, "iou_threshold")
        score_thr = _scalar_input(score_t, "score_threshold")
        if not (iou_thr >= 0 and iou_thr <= 1):
            raise InvalidArgumentError("iou_threshold must be in [0, 1]")
        size_per_class = min(per_class, num_boxes)
        if size_per_class * num_classes > _INT32_MAX:
            raise InvalidArgumentError("size_per_class * num_classes causes overflow")
        width = total
        if pad_per_class:
            width = min(total, min(_INT32_MAX, per_class * num_classes))
        out_boxes = np.zeros((batch, width, 4), _F32)
        out_scores = np.zeros((batch, width), _F32)
        out_classes = np.zeros((batch, width), _F32)
        valid = np.zeros(batch, np.int32)
        for b in range(batch):
            found_boxes, found_scores, found_classes = [], [], []
            shared = _Boxes(boxes[b, :, 0]) if q == 1 else None
            for c in range(num_classes):
                class_boxes = shared if shared is not None else _Boxes(boxes[b, :, c])
                class_scores = scores[b, :, c]
                # its kernel only compares the IoU: a NaN one suppresses nothing
                picked = _fast_nms(
                    class_boxes, class_scores, size_per_class, iou_thr, score_thr, _F32, weighted=False
                )
                assert picked is not None
                if picked:
                    found_boxes.append(boxes[b, picked, 0 if q == 1 else c])
                    found_scores.append(class_scores[picked])
                    found_classes.append(np.full(len(picked), c, _F32))
            if not found_scores:
                continue
            all_scores = np.concatenate(found_scores)
            order = np.argsort(-all_scores, kind="stable")
            n = min(order.size, total if not pad_per_class else width)
            order = order[:n]
            picked_boxes = np.concatenate(found_boxes)[order]
            if clip:
                picked_boxes = np.clip(picked_boxes, np.float32(0), np.float32(1))
            out_boxes[b, :n] = picked_boxes
            out_scores[b, :n] = all_scores[order]
            out_classes[b, :n] = np.concatenate(found_classes)[order]
            valid[b] = n
        return out_boxes, out_scores, out_classes, valid

    return compute


# --- CropAndResize ------------------------------------------------------------------------------------------


def _crop_axis(lo: Any, hi: Any, size: int, crop: int) -> tuple[Any, Any]:
    """Per box and output position, the float32 source coordinate TensorFlow computes, and whether it lies
    inside [0, size - 1]."""
    f = np.float32
    if crop > 1:
        scale = (hi - lo) * f(size - 1) / f(crop - 1)
        pos = lo[:, None] * f(size - 1) + np.arange(crop, dtype=f)[None, :] * scale[:, None]
    else:  # 0.5 * (y1 + y2) * (height - 1): a double product, stored as float
        pos = (0.5 * (lo + hi).astype(np.float64) * (size - 1)).astype(f)[:, None]
    inside = ~((pos < 0) | (pos > f(size - 1)))
    return np.where(inside, pos, f(0)), inside


@kernel("CropAndResize", expensive=True)
def crop_and_resize(node: Node) -> Compute:
    method = node.attr_str("method", "bilinear")
    if method not in ("bilinear", "nearest"):
        raise _bad_attr(node, "method", f"must be 'bilinear' or 'nearest', got '{method}'")
    extrapolation = np.float32(node.attr_float("extrapolation_value", 0.0))

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        image, boxes, box_index, crop_size = inputs
        if image.ndim != 4:
            raise InvalidArgumentError(f"input image must be 4-D{_shape_str(image.shape)}")
        batch, height, width, depth = image.shape
        if height <= 0 or width <= 0:
            raise InvalidArgumentError("image dimensions must be positive")
        if boxes.ndim != 2:
            raise InvalidArgumentError(f"boxes must be 2-D, got: {_shape_str(boxes.shape)}")
        if box_index.ndim != 1:
            raise InvalidArgumentError(
                f"box_indices must be rank 1 but is shape {_shape_str(box_index.shape)}"
            )
        num_boxes = 0
        if boxes.size or box_index.size:
            num_boxes = boxes.shape[0]
            if boxes.shape[1] != 4:
                raise InvalidArgumentError("boxes must have 4 columns")
            if box_index.shape[0] != num_boxes:
                raise InvalidArgumentError("box_index has incompatible shape")
        if crop_size.ndim != 1:
            raise InvalidArgumentError(f"crop_size must be 1-D{_shape_str(crop_size.shape)}")
        if crop_size.shape[0] != 2:
            raise InvalidArgumentError(f"crop_size must have two elements{_shape_str(crop_size.shape)}")
        ch, cw = (int(v) for v in crop_size.tolist())
        if ch <= 0 or cw <= 0:
            raise InvalidArgumentError("crop dimensions must be positive")
        if num_boxes and ((box_index < 0) | (box_index >= batch)).any():
            raise OutOfRangeError("box_index has values outside [0, batch_size)")
        if num_boxes == 0:
            return (np.zeros((0, ch, cw, depth), _F32),)
        b = boxes.astype(_F32, copy=False)
        if not np.isfinite(b).all():
            raise InvalidArgumentError("Boxes contains at least one element that is not finite")
        ys, y_in = _crop_axis(b[:, 0], b[:, 2], height, ch)
        xs, x_in = _crop_axis(b[:, 1], b[:, 3], width, cw)
        rows = box_index.astype(np.intp)[:, None, None]  # indexes the image, never copies it per box
        if method == "nearest":
            yi, xi = _round_half_up(ys), _round_half_up(xs)
            out = image[rows, yi[:, :, None], xi[:, None, :]].astype(_F32)
        else:
            top, bottom = np.floor(ys), np.ceil(ys)
            left, right = np.floor(xs), np.ceil(xs)
            y_lerp = (ys - top)[:, :, None, None]
            x_lerp = (xs - left)[:, None, :, None]
            t, bt = top.astype(np.intp)[:, :, None], bottom.astype(np.intp)[:, :, None]
            lf, rt = left.astype(np.intp)[:, None, :], right.astype(np.intp)[:, None, :]
            tl = image[rows, t, lf].astype(_F32)
            tr = image[rows, t, rt].astype(_F32)
            bl = image[rows, bt, lf].astype(_F32)
            br = image[rows, bt, rt].astype(_F32)
            upper = tl + (tr - tl) * x_lerp
            lower = bl + (br - bl) * x_lerp
            out = upper + (lower - upper) * y_lerp
        inside = (y_in[:, :, None] & x_in[:, None, :])[..., None]
        return (np.where(inside, out, extrapolation).astype(_F32, copy=False),)

    return compute


def _round_half_up(x: Any) -> Any:
    """``roundf`` of non-negative float32 coordinates (halves away from zero), as indices."""
    fl = np.floor(x)
    return np.where(x - fl >= np.float32(0.5), fl + 1, fl).astype(np.intp)


# --- ExtractImagePatches ------------------------------------------------------------------------------------


def _patch_attr(node: Node, name: str) -> tuple[int, int]:
    v = node.attr_ints(name, length=4)
    if v[0] != 1 or v[3] != 1:
        raise UnimplementedError(
            f"Node '{node.name}' (op '{node.op}'): Only support {name} across space.", node.name
        )
    if v[1] < 1 or v[2] < 1:
        raise OutOfRangeError(f"Node '{node.name}' (op '{node.op}'): {name} is out of range.", node.name)
    return v[1], v[2]


@kernel("ExtractImagePatches", expensive=True)
def extract_image_patches(node: Node) -> Compute:
    kr, kc = _patch_attr(node, "ksizes")
    sr, sc = _patch_attr(node, "strides")
    rr, rc = _patch_attr(node, "rates")
    padding = node.attr_str("padding", choices=("SAME", "VALID"))

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        (x,) = inputs
        if x.ndim != 4:
            raise InvalidArgumentError(f"input must be 4-dimensional{_shape_str(x.shape)}")
        n, h, w, d = x.shape
        oh, top, bottom = _out_dim(h, kr, sr, rr, padding, 0, 0)
        ow, left, right = _out_dim(w, kc, sc, rc, padding, 0, 0)
        if n * oh * ow * kr * kc * d == 0:
            return (np.zeros((n, oh, ow, kr * kc * d), x.dtype),)
        if top or bottom or left or right:
            x = np.pad(x, [(0, 0), (top, bottom), (left, right), (0, 0)])
        taps = [
            x[:, i * rr : i * rr + (oh - 1) * sr + 1 : sr, j * rc : j * rc + (ow - 1) * sc + 1 : sc]
            for i in range(kr)
            for j in range(kc)
        ]
        return (np.stack(taps, axis=3).reshape(n, oh, ow, kr * kc * d),)

    return compute


# TensorFlow's colors when DrawBoundingBoxes has none: yellow, blue, red, lime, purple, olive, maroon, navy,
# aqua, fuchsia (RGBA); a gray image draws every box in 1
_BOX_COLORS = np.array(
    [
        [1, 1, 0, 1],
        [0, 0, 1, 1],
        [1, 0, 0, 1],
        [0, 1, 0, 1],
        [0.5, 0, 0.5, 1],
        [0.5, 0.5, 0, 1],
        [0.5, 0, 0, 1],
        [0, 0, 0.5, 1],
        [0, 1, 1, 1],
        [1, 0, 1, 1],
    ],
    np.float32,
)


def _box_colors(colors: Any, depth: int) -> Any:
    if colors is not None:
        if colors.ndim != 2:
            raise InvalidArgumentError(f"colors must be a 2-D matrix{_shape_str(colors.shape)}")
        if colors.shape[1] < depth:
            raise InvalidArgumentError(
                f"colors must have equal or more channels than the image provided: {_shape_str(colors.shape)}"
            )
        if colors.size:
            return colors[:, :depth].astype(np.float32)
    table = _BOX_COLORS[:, :depth].copy()
    if depth == 1:
        table[:, 0] = 1
    return table


@kernel("DrawBoundingBoxes", "DrawBoundingBoxesV2", expensive=True)
def draw_bounding_boxes(node: Node) -> Compute:
    """Each box's outline, one pixel wide, in the color of its index (cycling through ``colors``). Corners
    are ``box * (size - 1)`` in float32, truncated toward zero; an inverted box or one wholly outside is
    not drawn, and the sides of one partly outside are drawn only where they fall inside, as TensorFlow
    does."""

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        images, boxes = inputs[0], inputs[1]
        if images.ndim != 4:
            raise InvalidArgumentError("The rank of the images should be 4")
        if boxes.ndim != 3:
            raise InvalidArgumentError("The rank of the boxes tensor should be 3")
        if images.shape[0] != boxes.shape[0]:
            raise InvalidArgumentError("The batch sizes should be the same")
        batch, height, width, depth = images.shape
        if depth not in (1, 3, 4):
            raise InvalidArgumentError("Channel depth should be either 1 (GRY), 3 (RGB), or 4 (RGBA)")
        if boxes.shape[2] != 4:
            raise InvalidArgumentError(
                f"The size of the third dimension of the box must be 4. Received: {boxes.shape[2]}"
            )
        table = _box_colors(inputs[2] if len(inputs) > 2 else None, depth).astype(images.dtype)
        canvas = images.copy()
        scale = np.array([height - 1, width - 1, height - 1, width - 1], np.float32)
        with np.errstate(invalid="ignore", over="ignore"):
            corners = np.trunc(boxes.astype(np.float32) * scale).astype(np.int64)
        for b in range(batch):
            for k, (top, left, bottom, right) in enumerate(corners[b].tolist()):
                if top > bottom or left > right:
                    continue  # inverted
                if top >= height or bottom < 0 or left >= width or right < 0:
                    continue  # wholly outside
                # what TensorFlow then checks can fail only for an image of no rows or no columns
                if min(bottom, height - 1) < 0:
                    raise InvalidArgumentError("Max box row clamp is less than 0.")
                if min(right, width - 1) < 0:
                    raise InvalidArgumentError("Max box col clamp is less than 0.")
                color = table[k % len(table)]
                rows = slice(max(top, 0), min(bottom, height - 1) + 1)
                cols = slice(max(left, 0), min(right, width - 1) + 1)
                if top >= 0:
                    canvas[b, top, cols] = color
                if bottom < height:
                    canvas[b, bottom, cols] = color
                if left >= 0:
                    canvas[b, rows, left] = color
                if right < width:
                    canvas[b, rows, right] = color
        return (canvas,)

    return compute
