"""Regenerates the ``*_pb2.py`` modules (and their ``.pyi`` stubs) from the ``.proto`` sources here, and the
``*_pb2_grpc.py`` service modules of the sources that declare a gRPC service.

Run from anywhere: ``python -m poolserve.proto.generate``. Needs the ``grpcio-tools`` version pinned in the
``dev`` extra, so that regenerating an unchanged source gives byte-identical files
(``tests/test_proto.py`` checks that the committed modules are not stale).
"""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent
# The sources import each other as ``poolserve/proto/x.proto``, so the modules protoc writes import each
# other as ``poolserve.proto.x_pb2``: protoc runs on a tree where ``poolserve/proto`` is this folder.
PACKAGE = Path("poolserve", "proto")


_SERVICE = re.compile(r"^service \w+", re.MULTILINE)


def sources() -> list[Path]:
    return sorted(PROTO_DIR.glob("*.proto"))


def services() -> list[Path]:
    """The sources that declare a gRPC service: protoc writes a ``_pb2_grpc.py`` module for each of them."""
    return [p for p in sources() if _SERVICE.search(p.read_text(encoding="utf-8"))]


def generate(out_dir: Path) -> None:
    """Writes the generated modules for every source into ``out_dir`` (flat, as in this folder)."""
    from importlib import resources

    from grpc_tools import protoc  # dev-only dependency

    # google/protobuf/*.proto (wrappers, any), shipped with grpc_tools
    well_known = resources.files("grpc_tools").joinpath("_proto")

    with tempfile.TemporaryDirectory() as tmp:
        src, dst = Path(tmp, "src"), Path(tmp, "out")
        (src / PACKAGE).parent.mkdir(parents=True)
        (src / PACKAGE).symlink_to(PROTO_DIR, target_is_directory=True)
        dst.mkdir()
        args = [
            "protoc",
            f"-I{src}",
            f"-I{well_known}",
            f"--python_out={dst}",
            f"--pyi_out={dst}",
            f"--grpc_python_out={dst}",
            *(str(PACKAGE / p.name) for p in sources()),
        ]
        if protoc.main(args) != 0:
            raise SystemExit("protoc failed")
        out_dir.mkdir(parents=True, exist_ok=True)
        # protoc writes a (nearly empty) _pb2_grpc.py for every source: keep those of the services only
        grpc_modules = {f"{p.stem}_pb2_grpc.py" for p in services()}
        for f in (dst / PACKAGE).iterdir():
            if f.name.endswith("_pb2_grpc.py") and f.name not in grpc_modules:
                continue
            shutil.copyfile(f, out_dir / f.name)


if __name__ == "__main__":
    generate(PROTO_DIR)
    sys.exit(0)
