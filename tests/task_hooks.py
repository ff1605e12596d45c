"""A `sitecustomize` that lets a test act inside loom's pool workers and Bazel workers.

Every process loom starts runs a `sitecustomize` that PYTHONPATH reaches. In
a pool worker (or the fork server its workers are forked from) `task_hook`'s
wraps `loomcli.build.tasks.kernel_set_task` when that module is imported; in
a persistent worker (`loom worker --persistent_worker`) `worker_compile_hook`'s
wraps `loomcli.service.compile.compile_request`. So a test can make a worker
do something at a known point of a task (die, probe the jobserver, wait)
without a hook in loom itself.
"""

from __future__ import annotations

_INSTALL = '''

class _Hook(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name != MODULE:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        run = spec.loader.exec_module

        def exec_module(module):
            run(module)
            setattr(module, FUNCTION, _wrap(getattr(module, FUNCTION)))

        spec.loader.exec_module = exec_module
        return spec


if PROCESSES & set(sys.orig_argv):
    sys.meta_path.insert(0, _Hook())
'''


def _hook(wrapper: str, module: str, function: str, processes: set[str]) -> str:
    where = f"MODULE, FUNCTION, PROCESSES = {module!r}, {function!r}, {processes!r}\n"
    return "import importlib.abc, importlib.util, sys\n" + where + wrapper + _INSTALL


def task_hook(wrapper: str, module: str = "loomcli.build.tasks", function: str = "kernel_set_task",
              workers: tuple[str, ...] = ("loomcli.runtime.pool", "loomcli.runtime.forkserver")) -> str:
    """The `sitecustomize` text: `wrapper` is Python source that defines
    `_wrap(task) -> task` (`module.function` as processes started with
    `python -m W` for W in `workers` should run it; by default the
    kernel-set task in pool workers)."""
    return _hook(wrapper, module, function, set(workers))


def worker_compile_hook(wrapper: str) -> str:
    """The `sitecustomize` text for a persistent worker: `wrapper` defines
    `_wrap(compile_request) -> compile_request` (as each request's child should run it)."""
    return _hook(wrapper, "loomcli.service.compile", "compile_request", {"--persistent_worker"})
