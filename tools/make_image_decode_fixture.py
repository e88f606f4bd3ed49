"""Writes ``tests/fixtures/images/tf_decoded.npz`` (dev only): what TensorFlow decodes from each image there.

Run with the TensorFlow environment::

    /opt/tfenv/bin/python tools/make_image_decode_fixture.py

The images (15 small files, 16x12) were made once, JPEGs and PNGs by TensorFlow's encoders (4:2:0 and 4:4:4
chroma, gray, progressive; 8- and 16-bit, gray, gray+alpha, RGBA), BMPs, GIFs and a palette PNG by Pillow.
Each key is ``<file>|<op>|<attrs>``; a decode TensorFlow refuses is stored as ``<key>!error`` with its
message. ``tests/test_kernels_image_decode.py`` decodes the same files with the same attrs.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import numpy as np
import tensorflow as tf

FOLDER = Path(__file__).resolve().parent.parent / "tests" / "fixtures" / "images"


def main() -> None:
    cases: dict[str, Any] = {}

    def run(key: str, fn: Any, *args: Any, **kwargs: Any) -> None:
        try:
            cases[key] = fn(*args, **kwargs).numpy()
        except tf.errors.OpError as e:
            cases[key + "!error"] = np.array(e.message.split("\n")[0][-200:])

    for path in sorted(FOLDER.iterdir()):
        data = path.read_bytes()
        name = path.name
        if name.endswith(".jpg"):
            for ch in (0, 1, 3):
                for ratio in (1, 2, 8):
                    run(
                        f"{name}|DecodeJpeg|channels={ch},ratio={ratio}",
                        tf.io.decode_jpeg,
                        data,
                        channels=ch,
                        ratio=ratio,
                    )
            run(f"{name}|DecodeJpeg|fancy_upscaling=0", tf.io.decode_jpeg, data, fancy_upscaling=False)
            run(
                f"{name}|DecodeJpeg|dct_method=INTEGER_ACCURATE",
                tf.io.decode_jpeg,
                data,
                dct_method="INTEGER_ACCURATE",
            )
        elif name.endswith(".png"):
            for ch in (0, 1, 3, 4):
                for dt in ("uint8", "uint16"):
                    run(
                        f"{name}|DecodePng|channels={ch},dtype={dt}",
                        tf.io.decode_png,
                        data,
                        channels=ch,
                        dtype=dt,
                    )
        elif name.endswith(".gif"):
            run(f"{name}|DecodeGif|", tf.io.decode_gif, data)
        elif name.endswith(".bmp"):
            for ch in (0, 3, 4):
                run(f"{name}|DecodeBmp|channels={ch}", tf.io.decode_bmp, data, channels=ch)
        else:
            continue
        for ch in (0, 3):
            for dt in ("uint8", "uint16", "float32"):
                run(
                    f"{name}|DecodeImage|channels={ch},dtype={dt},expand_animations=0",
                    tf.io.decode_image,
                    data,
                    channels=ch,
                    dtype=dt,
                    expand_animations=False,
                )
        run(f"{name}|DecodeImage|channels=0,dtype=uint8,expand_animations=1", tf.io.decode_image, data)
    run(
        "garbage|DecodeImage|channels=0,dtype=uint8,expand_animations=1",
        tf.io.decode_image,
        b"not an image",
    )
    np.savez_compressed(FOLDER / "tf_decoded.npz", **cases)
    print(len(cases), "cases")


if __name__ == "__main__":
    main()
