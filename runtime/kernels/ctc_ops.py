"""CTC decoding: CTCGreedyDecoder, what OCR and speech models end their serving graph with (Keras'
``ops.ctc_decode`` with the greedy strategy, ``tf.nn.ctc_greedy_decoder``).

Per batch entry, over its first ``sequence_length`` frames: the most likely class of each frame (the first
of equal ones), a blank (``blank_index``, the last class by default) emitted as nothing, and with
``merge_repeated`` a class repeating the frame before it (blank or not) merged away. The decoded classes
come as a SparseTensor (indices, values, dense shape [batch, longest]); the log probability is minus the
sum of each frame's largest logit.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from poolserve.runtime.errors import FailedPreconditionError, InvalidArgumentError
from poolserve.runtime.kernels._common import _bad_attr, _shape_str
from poolserve.runtime.kernels.registry import Compute, OpContext, kernel
from poolserve.runtime.node import Node


@kernel("CTCGreedyDecoder", outputs=4)
def ctc_greedy_decoder(node: Node) -> Compute:
    merge = node.attr_bool("merge_repeated", False)
    blank_attr = node.attr_int("blank_index", -1)

    def compute(ctx: OpContext, inputs: list[Any]) -> tuple[Any, ...]:
        logits, lengths = inputs
        _, batch, classes, steps = _ctc_inputs(logits, lengths)
        blank = blank_attr if blank_attr >= 0 else classes + blank_attr
        if not 0 <= blank < classes:
            raise InvalidArgumentError(f"blank_index expected to be between {-classes} and {classes - 1}")
        best, peak = logits.argmax(axis=2), logits.max(axis=2)
        decoded: list[list[int]] = []
        log_prob = np.zeros((batch, 1), logits.dtype)
        for b, n in enumerate(steps):
            row, prev = [], -1
            for c in best[:n, b].tolist():
                if c != blank and not (merge and c == prev):
                    row.append(c)
                prev = c
            decoded.append(row)
            log_prob[b, 0] = -peak[:n, b].sum(dtype=logits.dtype)
        return (*_sparse(decoded, batch), log_prob)

    return compute


# --- beam search --------------------------------------------------------------------------------------------
#
# TensorFlow's CTCBeamSearchDecoder (util/ctc/ctc_beam_search.h), step for step: a trie of label sequences
# whose leaves are held in a gtl::TopN of ``beam_width`` entries. Which entries a step keeps, and the order
# its loops visit them in, follow from TopN's vector and from libstdc++'s heap and sort algorithms acting on
# it, so those are repeated here too (``_TopN``, ``_sort``): equal probabilities then come out in
# TensorFlow's order. Arithmetic is in the logits' precision, but LogSumExp's correction term, which
# TensorFlow computes with ``log1pf(expf(.))`` in float for double inputs too.

_NEG_INF = float("-inf")


def _f32(x: float) -> float:
    return float(np.float32(x))


def _float_functions() -> tuple[Callable[[float], float], Callable[[float], float], Callable[[float], float]]:
    """The C library's expf, logf and log1pf, which TensorFlow's kernel calls: a double result rounded to
    float differs from glibc's log1pf in the last bit for about 3% of arguments, enough to turn equal
    probabilities unequal (and the other way round). Without a loadable C library, those roundings."""
    try:
        libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
        functions = []
        for name in ("expf", "logf", "log1pf"):
            f = getattr(libm, name)
            f.argtypes, f.restype = [ctypes.c_float], ctypes.c_float
            functions.append(f)
        return functions[0], functions[1], functions[2]
    except (OSError, AttributeError):  # pragma: no cover - every supported platform has one
        return (
            lambda x: _f32(math.exp(_f32(x))),
            lambda x: _f32(math.log(_f32(x))),
            lambda x: _f32(math.log1p(_f32(x))),
        )


_EXPF, _LOGF, _LOG1PF = _float_functions()


class _Probability:
    __slots__ = ("blank", "label", "total")

    def __init__(self) -> None:
        self.total = self.blank = self.label = _NEG_INF

    def reset(self) -> None:
        self.total = self.blank = self.label = _NEG_INF

    def copy_from(self, other: _Probability) -> None:
        self.total, self.blank, self.label = other.total, other.blank, other.label


class _Entry:
    __slots__ = ("children", "label", "newp", "oldp", "parent")

    def __init__(self, parent: _Entry | None, label: int) -> None:
        self.parent = parent
        self.label = label
        self.children: dict[int, _Entry] = {}
        self.oldp = _Probability()
        self.newp = _Probability()

    def active(self) -> bool:
        return self.newp.total != _NEG_INF

    def child(self, label: int) -> _Entry:
        entry = self.children.get(label)
        if entry is None:
            entry = self.children[label] = _Entry(self, label)
        return entry

    def labels(self, merge_repeated: bool) -> list[int]:
        out, prev, entry = [], -1, self
        while entry.parent is not None:
            if not merge_repeated or entry.label != prev:
                out.append(entry.label)
            prev = entry.label
            entry = entry.parent
        return out[::-1]


def _greater(a: _Entry, b: _Entry) -> bool:
    return a.newp.total > b.newp.total


# libstdc++'s heap and sort algorithms (bits/stl_heap.h, bits/stl_algo.h) with TopN's greater-than
# comparison, which make the front of a heap its smallest entry.


def _push_heap(v: list[_Entry], first: int, hole: int, top: int, value: _Entry) -> None:
    parent = (hole - 1) // 2
    while hole > top and _greater(v[first + parent], value):
        v[first + hole] = v[first + parent]
        hole = parent
        parent = (hole - 1) // 2
    v[first + hole] = value


def _adjust_heap(v: list[_Entry], first: int, hole: int, length: int, value: _Entry) -> None:
    top, child = hole, hole
    while child < (length - 1) // 2:
        child = 2 * (child + 1)
        if _greater(v[first + child], v[first + child - 1]):
            child -= 1
        v[first + hole] = v[first + child]
        hole = child
    if length % 2 == 0 and child == (length - 2) // 2:
        child = 2 * (child + 1)
        v[first + hole] = v[first + child - 1]
        hole = child - 1
    _push_heap(v, first, hole, top, value)


def _make_heap(v: list[_Entry], first: int, last: int) -> None:
    length = last - first
    if length < 2:
        return
    parent = (length - 2) // 2
    while True:
        _adjust_heap(v, first, parent, length, v[first + parent])
        if parent == 0:
            return
        parent -= 1


def _pop_heap(v: list[_Entry], first: int, last: int, result: int) -> None:
    """Moves the front to ``result`` and re-heaps [first, last) without it (``std::__pop_heap``)."""
    value = v[result]
    v[result] = v[first]
    _adjust_heap(v, first, 0, last - first, value)


def _sort_heap(v: list[_Entry], first: int, last: int) -> None:
    while last - first > 1:
        last -= 1
        _pop_heap(v, first, last, last)


def _insertion_sort(v: list[_Entry], first: int, last: int, guarded: bool = True) -> None:
    """``std::__insertion_sort`` of [first, last); unguarded (``std::__unguarded_insertion_sort``), every
    element from ``first`` on is moved down past the greater ones before it, none of them at ``first``."""
    for i in range(first + 1 if guarded else first, last):
        value = v[i]
        if guarded and _greater(value, v[first]):
            v[first + 1 : i + 1] = v[first:i]
            v[first] = value
            continue
        j = i
        while _greater(value, v[j - 1]):
            v[j] = v[j - 1]
            j -= 1
        v[j] = value


_SORT_THRESHOLD = 16


def _sort(v: list[_Entry]) -> None:
    """std::sort: introsort down to runs of 16, then one insertion sort."""

    def introsort(first: int, last: int, depth: int) -> None:
        while last - first > _SORT_THRESHOLD:
            if depth == 0:
                _make_heap(v, first, last)
                _sort_heap(v, first, last)
                return
            depth -= 1
            mid = first + (last - first) // 2
            a, b, c = first + 1, mid, last - 1
            if _greater(v[a], v[b]):
                pick = b if _greater(v[b], v[c]) else (c if _greater(v[a], v[c]) else a)
            else:
                pick = a if _greater(v[a], v[c]) else (c if _greater(v[b], v[c]) else b)
            v[first], v[pick] = v[pick], v[first]
            lo, hi = first + 1, last
            while True:
                while _greater(v[lo], v[first]):
                    lo += 1
                hi -= 1
                while _greater(v[first], v[hi]):
                    hi -= 1
                if not lo < hi:
                    break
                v[lo], v[hi] = v[hi], v[lo]
                lo += 1
            introsort(lo, last, depth)
            last = lo

    n = len(v)
    if n:
        introsort(0, n, 2 * (n.bit_length() - 1))
    if n > _SORT_THRESHOLD:
        _insertion_sort(v, 0, _SORT_THRESHOLD)
        _insertion_sort(v, _SORT_THRESHOLD, n, guarded=False)
    else:
        _insertion_sort(v, 0, n)


class _TopN:
    """gtl::TopN<BeamEntry*, BeamComparer>: the ``limit`` largest pushed, in a vector that is unordered,
    then its smallest in front once asked for it, then a heap once more were pushed than fit."""

    _UNORDERED, _BOTTOM_KNOWN, _HEAP = 0, 1, 2

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.elements: list[_Entry] = []
        self.state = self._UNORDERED

    def push(self, entry: _Entry) -> None:
        v = self.elements
        if self.state != self._HEAP:
            v.append(entry)
            if len(v) == self.limit + 1:
                _make_heap(v, 0, len(v))
                _pop_heap(v, 0, len(v) - 1, len(v) - 1)
                v.pop()
                self.state = self._HEAP
            elif self.state == self._UNORDERED or _greater(v[-1], v[0]):
                pass
            else:
                v[0], v[-1] = v[-1], v[0]
        elif _greater(entry, v[0]):
            _pop_heap(v, 0, len(v) - 1, len(v) - 1)
            v[-1] = entry
            _push_heap(v, 0, len(v) - 1, 0, entry)

    def bottom(self) -> _Entry:
        v = self.elements
        if self.state == self._UNORDERED:
            low = 0
            for i in range(1, len(v)):
                if _greater(v[low], v[i]):
                    low = i
            if low:
                v[0], v[low] = v[low], v[0]
            self.state = self._BOTTOM_KNOWN
        return v[0]

    def extract(self) -> list[_Entry]:
        """The entries, largest first; the TopN is left empty."""
        out, self.elements = self.elements, []
        if self.state != self._HEAP:
            _sort(out)
        else:
            _sort_heap(out, 0, len(out))
        self.state = self._UNORDERED
        return out


class _BeamSearch:
    def __init__(self, classes: int, beam_width: int, double: bool) -> None:
        self.classes = classes
        self.blank = classes - 1
        self.beam_width = beam_width
        self.round: Callable[[float], float] = float if double else _f32
        self.exp, self.log = (math.exp, math.log) if double else (_EXPF, _LOGF)
        self.reset()

    def reset(self) -> None:
        self.leaves = _TopN(self.beam_width)
        root = _Entry(None, -1)
        root.newp.total = root.newp.blank = 0.0
        self.leaves.push(root)

    def log_sum_exp(self, a: float, b: float) -> float:
        if a == _NEG_INF:
            return b
        if b == _NEG_INF:
            return a
        big, small = (a, b) if a > b else (b, a)
        return self.round(big + _LOG1PF(_EXPF(small - big)))

    def step(self, row: Any) -> None:
        r = self.round
        x = row.tolist()
        top = max(x)
        total = 0.0
        exp = self.exp
        for v in x:
            total = r(total + exp(r(v - top)))
        norm = r(top + self.log(total))
        branches = self.leaves.extract()
        leaves = self.leaves
        for b in branches:
            b.oldp.copy_from(b.newp)
        for b in branches:
            p = b.newp
            if b.parent is not None:
                if b.parent.active():
                    parent = b.parent.oldp
                    previous = parent.blank if b.label == b.parent.label else parent.total
                    p.label = self.log_sum_exp(p.label, previous)
                p.label = r(p.label + r(x[b.label] - norm))
            p.blank = r(r(b.oldp.total + x[self.blank]) - norm)
            p.total = self.log_sum_exp(p.blank, p.label)
            leaves.push(b)

        def candidate(prob: _Probability) -> bool:
            return prob.total > _NEG_INF and (
                len(leaves.elements) < self.beam_width or prob.total > leaves.bottom().newp.total
            )

        # every label's probability after each branch, in the logits' precision (what the loop below would
        # compute one by one): only labels above the beam's bottom, or with an entry in the trie, can change
        # anything, and the bottom only rises while a branch's labels are tried
        shifted = row[: self.classes - 1] - row.dtype.type(norm)
        for b in branches:
            if not candidate(b.oldp):
                continue
            scores = shifted + row.dtype.type(b.oldp.total)
            if 0 <= b.label < self.classes - 1:
                scores[b.label] = shifted[b.label] + row.dtype.type(b.oldp.blank)
            floor = leaves.bottom().newp.total if len(leaves.elements) == self.beam_width else _NEG_INF
            labels = set(np.flatnonzero(scores > floor).tolist())
            for label in sorted(labels.union(b.children)):
                c = b.child(label)
                if c.active():
                    continue
                c.newp.blank = _NEG_INF
                c.newp.label = c.newp.total = float(scores[label])
                if candidate(c.newp):
                    if len(leaves.elements) == self.beam_width:
                        leaves.bottom().newp.reset()
                    leaves.push(c)
                else:
                    c.oldp.reset()
                    c.newp.reset()

    def top_paths(self, n: int, merge_repeated: bool) -> tuple[list[list[int]], list[float]]:
        if n > self.beam_width:
            raise InvalidArgumentError("requested more paths than the beam width.")
        if n > len(self.leaves.elements):
            raise InvalidArgumentError("Less leaves in the beam search than requested.")
        best = _TopN(n)
        for entry in self.leaves.elements:
            best.push(entry)
        chosen = best.extract()[:n]
        return [e.labels(merge_repeated) for e in chosen], [e.newp.total for e in chosen]


def _ctc_inputs(logits: Any, lengths: Any) -> tuple[int, int, int, list[int]]:
    """The checks CTC decoders share, in TensorFlow's order and words."""
    if logits.ndim != 3:
        raise InvalidArgumentError(f"inputs is not a 3-Tensor, got shape {_shape_str(logits.shape)}")
    frames, batch, classes = logits.shape
    if logits.size == 0:
        raise InvalidArgumentError("inputs must not be empty")
    if lengths.ndim != 1:
        raise InvalidArgumentError(f"sequence_length is not a vector, got shape {_shape_str(lengths.shape)}")
    if lengths.shape[0] != batch:
        raise FailedPreconditionError(
            f"len(sequence_length) != batch_size.  len(sequence_length):  {lengths.shape[0]} "
            f"batch_size: {batch}"
        )
    steps = [int(n) for n in lengths.tolist()]
    for b, n in enumerate(steps):
        if n > frames:
            raise FailedPreconditionError(f"sequence_length({b}) <= {frames}")
    return frames, batch, classes, steps


def _sparse(paths: list[list[int]], batch: int) -> tuple[Any, Any, Any]:
    """One batch's decoded label sequences as a SparseTensor's indices, values and dense shape."""
    total = sum(len(p) for p in paths)
    indices = np.zeros((total, 2), np.int64)
    values = np.zeros(total, np.int64)
    at = 0
    for b, path in enumerate(paths):
        indices[at : at + len(path), 0] = b
        indices[at : at + len(path), 1] = np.arange(len(path))
        values[at : at + len(path)] = path
        at += len(path)
    return indices, values, np.array([batch, max((len(p) for p in paths), default=0)], np.int64)


def _beam_outputs(node: Node) -> int:
    return 3 * node.attr_int("top_paths") + 1


@kernel("CTCBeamSearchDecoder", outputs=_beam_outputs, expensive=True)
def ctc_beam_search_decoder(node: Node) -> Compute:
    """``tf.nn.ctc_beam_search_decoder``: per batch entry, the ``top_paths`` most likely label sequences of
    a beam search over its first ``sequence_length`` frames (the blank is the last class), each path's
    sequences as one SparseTensor, and their log probabilities (ln of the softmax, summed over the
    alignments the beam kept)."""
    beam_width = node.attr_int("beam_width")
    top_paths = node.attr_int("top_paths")
    merge = node.attr_bool("merge_repeated", True)
    if beam_width < 1:
        raise _bad_attr(node, "beam_width", f"must be at least 1, got {beam_width}")
    if top_paths < 1:
        raise _bad_attr(node, "top_paths", f"must be at least 1, got {top_paths}")

    def compute(ctx: OpContext, inputs: list[Any]) -> list[Any]:
        logits, lengths = inputs
        _, batch, classes, steps = _ctc_inputs(logits, lengths)
        search = _BeamSearch(classes, beam_width, logits.dtype == np.float64)
        paths: list[list[list[int]]] = [[] for _ in range(top_paths)]
        log_prob = np.zeros((batch, top_paths), logits.dtype)
        for b, n in enumerate(steps):
            for t in range(n):
                search.step(logits[t, b])
            best, scores = search.top_paths(top_paths, merge)
            search.reset()
            for p in range(top_paths):
                paths[p].append(best[p])
            log_prob[b] = scores
        sparse = [_sparse(p, batch) for p in paths]
        return [s[0] for s in sparse] + [s[1] for s in sparse] + [s[2] for s in sparse] + [log_prob]

    return compute
