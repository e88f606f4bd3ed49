"""Regenerates the ``*_pb2.py`` modules (and their ``.pyi`` stubs) from the ``.proto`` sources here.

Run from anywhere: ``python -m proto.generate``. Needs the ``grpcio-tools`` version pinned in the
``dev`` extra, so that regenerating an unchanged source gives byte-identical files
(``tests/test_proto.py`` checks that the committed modules are not stale).
"""

from __future__ import annotations

import sys
from pathlib import Path

PROTO_DIR = Path(__file__).resolve().parent
ROOT = PROTO_DIR.parent


def sources() -> list[Path]:
    return sorted(PROTO_DIR.glob("*.proto"))


def generate(out_dir: Path) -> None:
    """Writes the generated modules for every source into ``out_dir/proto``."""
    from grpc_tools import protoc  # dev-only dependency

    (out_dir / "proto").mkdir(parents=True, exist_ok=True)
    args = [
        "protoc",
        f"-I{ROOT}",
        f"--python_out={out_dir}",
        f"--pyi_out={out_dir}",
        *(str(p.relative_to(ROOT)) for p in sources()),
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")


if __name__ == "__main__":
    generate(ROOT)
    sys.exit(0)
