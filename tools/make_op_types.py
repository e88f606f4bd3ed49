"""Rewrites the table of ``runtime/op_types.py``: the dtypes of every kernel's outputs, as TensorFlow's OpDefs
declare them (dev only).

    python tools/make_op_types.py --tf-python /opt/tfenv/bin/python

Reads the ops poolserve has kernels for, asks TensorFlow (a subprocess: it is never imported here) for their
OpDefs' output args, and rewrites the block between the markers of ``runtime/op_types.py``. Ops TensorFlow
does not register (poolserve's own fused ops) are listed by hand outside that block. Re-running with the
same TensorFlow rewrites the same text.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import textwrap
from pathlib import Path

from poolserve.runtime import kernels  # noqa: F401  (registers every kernel)
from poolserve.runtime.kernels.registry import KERNELS

TARGET = Path(__file__).resolve().parent.parent / "runtime" / "op_types.py"
BEGIN = "# --- begin: written by tools/make_op_types.py from TensorFlow's OpDefs; do not edit ---\n"
END = "# --- end: written by tools/make_op_types.py ---\n"

# Run in TensorFlow's interpreter: every op's output args as "DT_X" / "attr" / "[list_attr]", with
# "=DT_X" for a type attr's default and "*number_attr" for an arg repeated N times.
_DUMP = """
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import tensorflow as tf
from tensorflow.core.framework import types_pb2
from tensorflow.python.framework import op_def_registry
out = {}
for op in json.load(sys.stdin):
    op_def = op_def_registry.get(op)
    if op_def is None:
        continue
    args = []
    for a in op_def.output_arg:
        if a.type:
            spec = types_pb2.DataType.Name(a.type)
        elif a.type_attr:
            spec = a.type_attr
            default = [d.default_value for d in op_def.attr if d.name == a.type_attr][0]
            if default.HasField("type"):  # the attr may be left out of a node: older graphs lack it
                spec += "=" + types_pb2.DataType.Name(default.type)
        else:
            spec = "[" + a.type_list_attr + "]"
        args.append(spec + ("*" + a.number_attr if a.number_attr else ""))
    out[op] = ",".join(args)
json.dump({"version": tf.__version__, "ops": out}, sys.stdout)
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tf-python", required=True, help="a Python interpreter with TensorFlow")
    args = parser.parse_args()
    ops = sorted(KERNELS)
    done = subprocess.run(
        [args.tf_python, "-c", _DUMP], input=json.dumps(ops), capture_output=True, text=True, check=True
    )
    dumped = json.loads(done.stdout)
    by_spec: dict[str, list[str]] = {}
    for op, spec in sorted(dumped["ops"].items()):
        by_spec.setdefault(spec, []).append(op)
    lines = [f"# TensorFlow {dumped['version']}: output args -> the ops that have them\n", "_BY_SPEC = {\n"]
    for spec, names in sorted(by_spec.items(), key=lambda item: (-len(item[1]), item[0])):
        text = " ".join(names)
        key = f'"{spec}"'
        if len(spec) > 96:  # ParseExampleV2's six args: the key as two strings, one after the other
            cut = spec.rindex(",", 0, 96) + 1
            key = f'(\n        "{spec[:cut]}"\n        "{spec[cut:]}"\n    )'
        if len(f'{key.splitlines()[-1]}: "{text}",') <= 106:
            lines.append(f'    {key}: "{text}",\n')
            continue
        lines.append(f"    {key}: (\n")
        wrapped = textwrap.wrap(text, 96, break_on_hyphens=False, break_long_words=False)
        for i, part in enumerate(wrapped):
            lines.append(f'        "{part}{" " if i < len(wrapped) - 1 else ""}"\n')
        lines.append("    ),\n")
    lines.append("}\n")
    source = TARGET.read_text()
    head, rest = source.split(BEGIN)
    _, tail = rest.split(END)
    TARGET.write_text(head + BEGIN + "".join(lines) + END + tail)
    missing = sorted(set(ops) - set(dumped["ops"]))
    print(f"wrote {len(dumped['ops'])} ops in {len(by_spec)} groups to {TARGET}")
    print(f"not in TensorFlow (listed by hand in _OWN): {missing}")


if __name__ == "__main__":
    main()
