"""Launch configurations: the `X.launch.loombc` artifact and its evaluation.

    from loomcli.launch import evaluate
    launch = evaluate(data, "workload_grid", ["1009"])  # data: the artifact's bytes
    launch.text()   # 'workload=1009 workgroups=16x1x1 workgroup_size=64x1x1 ...'

Building the artifact is emission's job (`loomcli.emit.launch_config`);
this package only reads and evaluates it, so `loom launch-eval` imports
neither passes, emitters, LLVM nor rich. Names load lazily.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "Launch": "loomcli.launch.program",
    "LaunchFunction": "loomcli.launch.program",
    "LaunchProgram": "loomcli.launch.program",
    "evaluate": "loomcli.launch.program",
    "is_launch_artifact": "loomcli.launch.program",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'loomcli.launch' has no attribute {name!r}")
    import importlib

    return getattr(importlib.import_module(module), name)
