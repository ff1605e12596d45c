"""The `loom` executable's entry point (and `python -m loomcli`'s).

A `loom build` that has nothing to do is answered from stat data alone
(`loomcli.build.noop`), before click, the project parser or the engine are
imported: it is run again and again by make, CMake and editors, and its
cost is almost all start-up. Everything else goes to the command line in
`loomcli.cli`.
"""

from __future__ import annotations

import sys

TYPE_CHECKING = False  # typing and collections.abc would cost a no-op build more than its check
if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import Any


def main(argv: Sequence[str] | None = None) -> Any:
    args = list(sys.argv[1:] if argv is None else argv)
    if args[:1] == ["build"]:
        from loomcli.build.noop import check

        code = check(args[1:])
        if code is not None:
            sys.exit(code)
    from loomcli.cli import main as cli_main

    return cli_main(args)
