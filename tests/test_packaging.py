"""The distribution: one import root, ``poolserve``, and a wheel that lives beside proto-plus.

proto-plus (a dependency of every google-cloud client) installs a top-level package called ``proto``; the
wheel must not clash with it, nor with a user's own ``server`` or ``configs`` folders.
"""

from __future__ import annotations

import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

import poolserve

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(out), str(ROOT)],
        check=True,
        capture_output=True,
    )
    (found,) = out.glob("poolserve-*.whl")
    return found


def test_wheel_installs_one_top_level_package(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    tops = {n.split("/")[0] for n in names}
    assert tops == {"poolserve", f"{wheel.name.split('-py3')[0]}.dist-info"}
    for needed in (
        "poolserve/py.typed",
        "poolserve/proto/config_pb2.py",
        "poolserve/proto/config.proto",
        "poolserve/configs/default.toml",
        "poolserve/configs/models/mlp.pb",
        "poolserve/server/cli.py",
        "poolserve/loadtest/cli.py",
    ):
        assert needed in names, needed
    # developer benchmarks, their results and test helpers stay in the repository
    assert not [n for n in names if "bench_" in n or "/results/" in n or "evaluate" in n]


def test_public_api_is_one_import() -> None:
    for name in poolserve.__all__:
        assert getattr(poolserve, name) is not None, name
    assert poolserve.Session.__module__ == "poolserve.runtime.session"
    assert poolserve.RunOptions.DESCRIPTOR.full_name == "poolserve.tensorflow.RunOptions"
    assert poolserve.errors.DeadlineExceededError.__module__ == "poolserve.runtime.errors"


def test_wheel_beside_proto_plus(wheel: Path, tmp_path: Path) -> None:
    """Both installed into one fresh venv: each ``import`` finds its own package and both work."""
    env = tmp_path / "venv"
    venv.create(env, with_pip=True)
    python = env / "bin" / "python"
    install = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    done = subprocess.run([*install, str(wheel), "proto-plus"], capture_output=True, text=True, timeout=600)
    if done.returncode != 0 and "No matching distribution" in done.stderr:
        pytest.skip(f"the package index is not reachable: {done.stderr[-300:]}")
    assert done.returncode == 0, done.stderr
    code = """
import numpy as np
import proto
import poolserve
from poolserve import GraphBuilder, RunOptions, Session

class Point(proto.Message):  # proto-plus's own API
    x = proto.Field(proto.INT32, number=1)

assert Point(x=3).x == 3
b = GraphBuilder()
a = b.placeholder("a", "float32", [None])
b.op("Neg", [a], name="neg")
with Session(b.graph_def) as sess:
    out = sess.run("neg:0", {"a:0": np.array([1.0, 2.0], np.float32)}, options=RunOptions(timeout_in_ms=5000))
assert out.tolist() == [-1.0, -2.0], out
print("ok", proto.__file__, poolserve.__file__)
"""
    ran = subprocess.run([str(python), "-c", code], capture_output=True, text=True, cwd=tmp_path, timeout=120)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.startswith("ok"), ran.stdout
    assert "site-packages/proto/" in ran.stdout and "site-packages/poolserve/" in ran.stdout
