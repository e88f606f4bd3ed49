"""Generates more single-op fixtures under ``tests/fixtures/kernels/cases`` (dev only), in the format of
tools/make_op_case_fixtures.py (whose ``Group`` writes them), for ops that real serving graphs needed:

    /opt/tfenv/bin/python tools/make_serving_op_cases.py [group ...]

Groups: ``encode_png`` (EncodePng: uint8 and uint16, 1-4 channels, every compression level, batches, images
large enough for a full zlib window and several IDAT chunks, and refused inputs); ``draw_boxes``
(DrawBoundingBoxes and DrawBoundingBoxesV2: float and half images of 1, 3 and 4 channels, boxes partly or
wholly outside, inverted and degenerate, TensorFlow's colors and given ones, and refused inputs);
``approx_top_k`` (ApproxTopK: float and half rows of 7 to 1500 values, many ties, every k from 0 to the
row, the attrs of the approximation, and refused inputs); ``ctc_beam`` (CTCBeamSearchDecoder: 120 random
cases of up to 5 sequences, float and double, a third of them with rounded logits for equal probabilities,
beams of 1 to 40, several paths, and refused inputs). Tests: tests/test_kernels_<group>.py.
"""

from __future__ import annotations

from collections.abc import Callable

import make_op_case_fixtures
import numpy as np
from make_op_case_fixtures import Group

U8, U16, I32, F32 = np.uint8, np.uint16, np.int32, np.float32


def encode_png(g: Group) -> None:
    rng = np.random.default_rng(21)

    def smooth(h: int, w: int, c: int, dtype: type) -> np.ndarray:
        top = np.iinfo(dtype).max
        y, x = np.mgrid[0:h, 0:w]
        planes = [(x * (k + 1) * 7 + y * 3 * (c - k)) % (top + 1) for k in range(c)]
        return np.stack(planes, axis=-1).astype(dtype)

    for dtype, dname in ((U8, "u8"), (U16, "u16")):
        top = int(np.iinfo(dtype).max)
        for c in (1, 2, 3, 4):
            for h, w in ((1, 1), (1, 9), (7, 1), (5, 6), (23, 17)):
                noise = rng.integers(0, top + 1, (h, w, c)).astype(dtype)
                g.case(f"noise_{dname}_c{c}_{h}x{w}", "EncodePng", {"image": noise})
            g.case(f"smooth_{dname}_c{c}", "EncodePng", {"image": smooth(19, 26, c, dtype)})
            g.case(f"flat_{dname}_c{c}", "EncodePng", {"image": np.full((9, 11, c), top // 3, dtype)})
        for level in range(-1, 10):
            for kind, img in (
                ("noise", rng.integers(0, top + 1, (12, 10, 3))),
                ("smooth", smooth(30, 20, 3, dtype)),
            ):
                g.case(
                    f"level{level + 1}_{kind}_{dname}",
                    "EncodePng",
                    {"image": img.astype(dtype)},
                    compression=level,
                )
    # past libpng's 16 KiB narrowed window and its 8 KiB IDAT chunks
    g.case("big_noise_u8", "EncodePng", {"image": rng.integers(0, 256, (70, 60, 3)).astype(U8)})
    g.case("big_smooth_u16", "EncodePng", {"image": smooth(70, 60, 2, U16)})
    g.case(
        "big_mixed_u8",
        "EncodePng",
        {"image": (smooth(120, 50, 3, U8) // 4 * 4 + rng.integers(0, 3, (120, 50, 3))).astype(U8)},
    )
    g.case("batch", "EncodePng", {"image": rng.integers(0, 256, (2, 3, 4, 5, 3)).astype(U8)})
    g.case("batch_empty", "EncodePng", {"image": np.zeros((0, 4, 5, 3), U8)})
    g.case("batch_empty_of_empty", "EncodePng", {"image": np.zeros((0, 7, 0, 3), U16)})
    # refused
    g.case("bad_channels", "EncodePng", {"image": np.zeros((2, 3, 5), U8)})
    g.case("bad_rank", "EncodePng", {"image": np.zeros((2, 3), U8)})
    g.case("bad_empty", "EncodePng", {"image": np.zeros((0, 3, 3), U8)})
    g.case("bad_empty_batch", "EncodePng", {"image": np.zeros((2, 3, 0, 3), U8)})


def draw_boxes(g: Group) -> None:
    rng = np.random.default_rng(22)
    for depth in (1, 3, 4):
        for dtype, dname in ((F32, "f32"), (np.float16, "f16")):
            images = (rng.integers(0, 8, (2, 9, 13, depth)) / 8).astype(dtype)  # small fixtures
            boxes = rng.uniform(-0.3, 1.3, (2, 14, 4)).astype(F32)
            boxes[:, :6, 2:] = boxes[:, :6, :2] + rng.uniform(0, 0.7, (2, 6, 2))  # mostly upright
            boxes[0, 6] = [-0.05, -0.09, 0.5, 0.5]  # corners truncated toward zero: drawn at row and column 0
            boxes[0, 7] = [0.4, 0.4, 0.4, 0.4]  # one pixel
            boxes[0, 8] = [0.0, 0.0, 1.0, 1.0]
            boxes[1, 6] = [1.2, 0.1, 1.5, 0.9]  # below the image
            boxes[1, 7] = [0.8, 0.2, 0.3, 0.9]  # inverted
            ins = {"images": images, "boxes": boxes}
            g.case(f"v1_d{depth}_{dname}", "DrawBoundingBoxes", ins)
            g.case(
                f"v2_default_d{depth}_{dname}",
                "DrawBoundingBoxesV2",
                {**ins, "colors": np.zeros((0, 4), F32)},
            )
            for ncolors, width in ((3, depth), (20, 4), (1, 5)):
                colors = rng.uniform(-2, 3, (ncolors, width)).astype(F32)
                g.case(
                    f"v2_c{ncolors}x{width}_d{depth}_{dname}",
                    "DrawBoundingBoxesV2",
                    {**ins, "colors": colors},
                )
    img = rng.random((1, 1, 6, 3)).astype(F32)
    g.case("one_row", "DrawBoundingBoxes", {"images": img, "boxes": np.array([[[0, 0.2, 1, 0.7]]], F32)})
    g.case("no_boxes", "DrawBoundingBoxes", {"images": img, "boxes": np.zeros((1, 0, 4), F32)})
    g.case(
        "empty_batch",
        "DrawBoundingBoxes",
        {"images": np.zeros((0, 3, 3, 3), F32), "boxes": np.zeros((0, 2, 4), F32)},
    )
    box = np.array([[[0.1, 0.1, 0.9, 0.9]]], F32)
    img = rng.random((1, 5, 5, 3)).astype(F32)
    g.case("bad_image_rank", "DrawBoundingBoxes", {"images": img[0], "boxes": box})
    g.case("bad_boxes_rank", "DrawBoundingBoxes", {"images": img, "boxes": box[0]})
    g.case("bad_batch", "DrawBoundingBoxes", {"images": img, "boxes": np.concatenate([box, box])})
    g.case("bad_box_size", "DrawBoundingBoxes", {"images": img, "boxes": box[:, :, :3]})
    g.case("bad_depth", "DrawBoundingBoxes", {"images": img[..., :2], "boxes": box})
    g.case("bad_colors_rank", "DrawBoundingBoxesV2", {"images": img, "boxes": box, "colors": np.ones(4, F32)})
    g.case(
        "bad_colors_width",
        "DrawBoundingBoxesV2",
        {"images": img, "boxes": box, "colors": np.ones((2, 2), F32)},
    )
    g.case(
        "bad_colors_empty",
        "DrawBoundingBoxesV2",
        {"images": img, "boxes": box, "colors": np.ones((0, 0), F32)},
    )
    # an image of no rows or no columns: boxes reaching into it are refused
    upright = np.array([[[1.2, 0.1, 0.3, 0.9]]], F32)
    g.case("bad_no_rows", "DrawBoundingBoxes", {"images": np.zeros((1, 0, 3, 3), F32), "boxes": upright})
    sideways = upright[..., [1, 0, 3, 2]]
    g.case("bad_no_cols", "DrawBoundingBoxes", {"images": np.zeros((1, 3, 0, 3), F32), "boxes": sideways})


def approx_top_k(g: Group) -> None:
    rng = np.random.default_rng(23)
    g.shapes_known = True  # its shape function needs them (and refuses a k past the row: no such case)
    for i in range(60):
        dtype = (F32, np.float16)[i % 2]
        shape = [(7,), (3, 9), (2, 3, 16), (4, 50), (1, 700), (1, 1500)][i % 6]
        levels = int(rng.choice([3, 20, 1000]))  # few levels: ties everywhere
        x = (rng.integers(-levels, levels, shape) / levels * 10).astype(dtype)
        n = shape[-1]
        k = int(rng.choice([0, 1, 2, n // 3, n - 1, n]))
        attrs = {"k": k}
        if i % 5 == 0:
            attrs |= {
                "recall_target": 0.5,
                "aggregate_to_topk": False,
                "reduction_input_size_override": 4 * n,
            }
        g.case(f"case{i}", "ApproxTopK", {"input": x}, **attrs)
    g.case("empty_rows", "ApproxTopK", {"input": np.zeros((0, 3), F32)}, k=2)


def ctc_beam(g: Group) -> None:
    rng = np.random.default_rng(24)
    for i in range(120):  # about 360 sequences decoded: a batch of up to 5 each
        frames, batch, classes = int(rng.integers(1, 10)), int(rng.integers(1, 6)), int(rng.integers(2, 8))
        dtype = (F32, np.float64)[i % 2]
        x = rng.normal(size=(frames, batch, classes)) * rng.choice([0.5, 2.0, 5.0])
        if i % 3 == 0:
            x = np.round(x)  # equal probabilities
        beam = int(rng.choice([1, 2, 3, 5, 8, 16, 20, 40]))
        paths = int(rng.integers(1, min(beam, 3) + 1))
        lengths = rng.integers(0 if paths == 1 else 1, frames + 1, batch).astype(I32)
        g.case(
            f"case{i:03d}",
            "CTCBeamSearchDecoder",
            {"inputs": x.astype(dtype), "sequence_length": lengths},
            beam_width=beam,
            top_paths=paths,
            merge_repeated=bool(i % 4),
        )
    x = rng.normal(size=(4, 2, 5)).astype(F32)
    beam = {"beam_width": 3, "top_paths": 2}
    g.case(
        "bad_rank", "CTCBeamSearchDecoder", {"inputs": x[0], "sequence_length": np.array([1, 1], I32)}, **beam
    )
    g.case("bad_batch", "CTCBeamSearchDecoder", {"inputs": x, "sequence_length": np.array([1], I32)}, **beam)
    g.case(
        "bad_length", "CTCBeamSearchDecoder", {"inputs": x, "sequence_length": np.array([1, 5], I32)}, **beam
    )
    g.case(
        "no_frames",
        "CTCBeamSearchDecoder",
        {"inputs": x[:0], "sequence_length": np.array([0, 0], I32)},
        **beam,
    )
    g.case(
        "no_classes",
        "CTCBeamSearchDecoder",
        {"inputs": x[..., :0], "sequence_length": np.array([1, 1], I32)},
        **beam,
    )
    g.case(
        "few_leaves", "CTCBeamSearchDecoder", {"inputs": x, "sequence_length": np.array([0, 2], I32)}, **beam
    )
    g.case(
        "paths_past_beam",
        "CTCBeamSearchDecoder",
        {"inputs": x, "sequence_length": np.array([3, 2], I32)},
        beam_width=2,
        top_paths=3,
    )


GROUPS: dict[str, Callable[[Group], None]] = {
    "encode_png": encode_png,
    "draw_boxes": draw_boxes,
    "approx_top_k": approx_top_k,
    "ctc_beam": ctc_beam,
}


if __name__ == "__main__":
    make_op_case_fixtures.main(GROUPS)
