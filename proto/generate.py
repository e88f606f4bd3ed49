"""Regenerates the ``*_pb2.py`` modules (and their ``.pyi`` stubs) from the ``.proto`` sources here.

Run from anywhere: ``python -m poolserve.proto.generate``. Needs the ``grpcio-tools`` version pinned in the
``dev`` extra, so that regenerating an unchanged source gives byte-identical files
(``tests/test_proto.py`` checks that the committed modules are not stale).
"""

from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent
# The sources import each other as ``poolserve/proto/x.proto``, so the modules protoc writes import each
# other as ``poolserve.proto.x_pb2``: protoc runs on a tree where ``poolserve/proto`` is this folder.
PACKAGE = Path("poolserve", "proto")


def sources() -> list[Path]:
    return sorted(PROTO_DIR.glob("*.proto"))


def generate(out_dir: Path) -> None:
    """Writes the generated modules for every source into ``out_dir`` (flat, as in this folder)."""
    from grpc_tools import protoc  # dev-only dependency

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp, "src"), Path(tmp, "out")
        (src / PACKAGE).parent.mkdir(parents=True)
        (src / PACKAGE).symlink_to(PROTO_DIR, target_is_directory=True)
        dst.mkdir()
        args = [
            "protoc",
            f"-I{src}",
            f"--python_out={dst}",
            f"--pyi_out={dst}",
            *(str(PACKAGE / p.name) for p in sources()),
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        out_dir.mkdir(parents=True, exist_ok=True)
        for f in (dst / PACKAGE).iterdir():
            shutil.copyfile(f, out_dir / f.name)


if __name__ == "__main__":
    generate(PROTO_DIR)
    sys.exit(0)
