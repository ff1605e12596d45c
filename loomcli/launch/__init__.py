"""Launch configurations: the `X.launch.loombc` artifact and its evaluation.

    from loomcli.launch import build_launch_config, evaluate
    data = build_launch_config(compiled_module, profile)
    launch = evaluate(data, "workload_grid", ["1009"])
    launch.text()   # 'workload=1009 workgroups=16x1x1 workgroup_size=64x1x1 ...'

Names load lazily: evaluating an artifact never imports the builder (which
needs the ABI and the target checks), and neither imports LLVM or rich.
"""

from __future__ import annotations

from typing import Any

_EXPORTS = {
    "build_launch_config": "loomcli.launch.build",
    "launch_module": "loomcli.launch.build",
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
