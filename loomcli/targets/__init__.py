"""Target profiles, records, the device ABI and the TARGET checks.

`loom.targets()` (docs/api.md) names this package once it is imported (the
import system sets the package attribute), so the package itself is
callable and answers as `loomcli.api.targets` does.
"""

from __future__ import annotations

import importlib
import sys
import types
from typing import Any


class _CallablePackage(types.ModuleType):
    def __call__(self) -> Any:
        # By name: the API is a layer above this one, reached only when called.
        return importlib.import_module("loomcli.api").targets()


sys.modules[__name__].__class__ = _CallablePackage
