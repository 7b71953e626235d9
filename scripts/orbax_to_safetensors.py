#!/usr/bin/env python3
# chessbench: GPL-3.0-or-later.
"""Turns a searchless_chess checkpoint (Orbax) into safetensors files that
`chessbench checkpoint import` reads.

    python3 scripts/orbax_to_safetensors.py 9M.zip --out av_9m.safetensors \
        --ema-out av_9m_ema.safetensors

CHECKPOINT is what their `checkpoints/download.sh` fetches (a zip such as
9M.zip, or its unzipped directory `9M/`), a directory of step directories
written by their `training_utils.get_checkpoint_manager`, one step directory
(`9M/6400000`), or one tree (`9M/6400000/params`). The step is --step, or the
largest there. `params` goes to --out; `params_ema` to --ema-out when asked
(their engines play `params`; chessbench's `--weights ema` plays the EMA).

Each tensor is written as float32 under haiku's path, `module/name`
(`embed/embeddings`, `linear_6/w`, ...), which is what chessbench maps onto
its model (the table is in the README). Shapes are not checked here: the
import checks every tensor against the preset, policy and buckets it is given.

Needs orbax-checkpoint and jax (CPU is enough); `make jax-deps` builds a venv
with the versions this was tested with (orbax-checkpoint 0.12.8, jax 0.10.2).
"""

import argparse
import json
import struct
import sys
import tempfile
import zipfile
from pathlib import Path

TREES = ("params", "params_ema")


def write_safetensors(path: Path, tensors: dict, metadata: dict) -> None:
    """The safetensors format: an 8-byte header length, a JSON header, data.
    Written beside `path` and renamed, so a failure leaves no partial file."""
    import numpy as np

    header = {"__metadata__": {k: str(v) for k, v in metadata.items()}}
    blobs = []
    offset = 0
    for name, array in tensors.items():
        array = np.ascontiguousarray(array)
        dtype = {"float32": "F32", "int32": "I32"}[str(array.dtype)]
        blob = array.tobytes()
        header[name] = {
            "dtype": dtype,
            "shape": list(array.shape),
            "data_offsets": [offset, offset + len(blob)],
        }
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header).encode()
    text += b" " * (-len(text) % 8)
    partial = path.with_name(f".{path.name}.partial")
    with open(partial, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    partial.replace(path)


def flatten(tree: dict) -> dict:
    """haiku's {module: {name: array}} as {"module/name": float32 array}."""
    import numpy as np

    flat = {}
    for module, leaves in tree.items():
        if not isinstance(leaves, dict):
            raise ValueError(f"{module}: expected a haiku module (a dict of arrays)")
        for name, value in leaves.items():
            flat[f"{module}/{name}"] = np.asarray(value, dtype=np.float32)
    return flat


def step_dir(root: Path, step: int | None) -> Path:
    """The step directory holding `params` under `root` (see the module doc)."""
    if (root / "params").is_dir():
        return root
    if root.name in TREES:
        return root.parent
    # A model directory, possibly one level down (a zip of `9M/`).
    candidates = [root] + sorted(p for p in root.iterdir() if p.is_dir())
    for model in candidates:
        steps = {int(p.name): p for p in model.iterdir() if p.is_dir() and p.name.isdigit()}
        if not steps:
            continue
        if step is None:
            return steps[max(steps)]
        if step in steps:
            return steps[step]
        raise SystemExit(
            f"{model}: no step {step} (steps there: {', '.join(map(str, sorted(steps)))})"
        )
    raise SystemExit(
        f"{root}: expected an Orbax checkpoint (a step directory with params/, "
        "or a directory of numbered step directories)"
    )


def restore(tree: Path) -> dict:
    """Restores one Orbax PyTree as numpy arrays (no sharding, any device)."""
    import numpy as np
    import orbax.checkpoint as ocp

    checkpointer = ocp.Checkpointer(ocp.PyTreeCheckpointHandler())
    try:
        metadata = checkpointer.metadata(tree)
        metadata = getattr(metadata, "item_metadata", None) or getattr(metadata, "tree", metadata)
        import jax

        restore_args = jax.tree_util.tree_map(
            lambda _: ocp.RestoreArgs(restore_type=np.ndarray), dict(metadata)
        )
        return checkpointer.restore(tree, restore_args=restore_args)
    except Exception as e:  # noqa: BLE001 - say which file and why
        raise SystemExit(f"{tree}: cannot restore an Orbax tree: {type(e).__name__}: {e}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("checkpoint", type=Path, help="a zip or directory (see above)")
    ap.add_argument("--out", type=Path, required=True, help="safetensors of `params`")
    ap.add_argument("--ema-out", type=Path, help="safetensors of `params_ema`")
    ap.add_argument("--step", type=int, help="the step to convert [default: the largest]")
    args = ap.parse_args()

    source = args.checkpoint
    if not source.exists():
        raise SystemExit(f"{source}: no such file or directory")
    with tempfile.TemporaryDirectory(prefix="orbax-") as tmp:
        if source.is_file():
            try:
                with zipfile.ZipFile(source) as z:
                    bad = z.testzip()
                    if bad is not None:
                        raise SystemExit(f"{source}: corrupt member {bad}")
                    z.extractall(tmp)
            except zipfile.BadZipFile as e:
                raise SystemExit(f"{source}: not a zip file ({e}); truncated download?")
            source = Path(tmp)
        step = step_dir(source, args.step)
        outputs = [("params", args.out)] + ([("params_ema", args.ema_out)] if args.ema_out else [])
        written = {}
        for name, out in outputs:
            tree = step / name
            if not tree.is_dir():
                raise SystemExit(f"{step}: no {name}/ tree")
            flat = flatten(restore(tree))
            write_safetensors(
                out, flat, {"source": str(args.checkpoint), "step": step.name, "tree": name}
            )
            written[name] = {"path": str(out), "tensors": len(flat)}
    print(json.dumps({"step": int(step.name) if step.name.isdigit() else None, **written}))


if __name__ == "__main__":
    sys.exit(main())
