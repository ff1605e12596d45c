"""A `sitecustomize` that lets a test act inside loom's pool workers.

Every process loom starts runs a `sitecustomize` that PYTHONPATH reaches. In
a pool worker (or the fork server its workers are forked from) this one
wraps `loomcli.build.tasks.kernel_set_task` when that module is imported,
so a test can make a worker do something at a known point of a task (die,
probe the jobserver, wait) without a hook in loom itself.
"""

from __future__ import annotations

_INSTALL = '''

class _Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != "loomcli.build.tasks":
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            module.kernel_set_task = _wrap(module.kernel_set_task)

        spec.loader.exec_module = exec_module
        return spec


if {"loomcli.runtime.pool", "loomcli.runtime.forkserver"} & set(sys.orig_argv):
    sys.meta_path.insert(0, _Hook())
'''


def task_hook(wrapper: str) -> str:
    """The `sitecustomize` text: `wrapper` is Python source that defines
    `_wrap(task) -> task` (the kernel-set task as the worker should run it)."""
    return "import importlib.abc, importlib.util, sys\n" + wrapper + _INSTALL
