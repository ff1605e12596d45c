"""The files of a product in `--out-dir`, staged and then renamed into place.

Every file is computed in memory first; then each is written to a temporary
name in the folder and, once all are written, renamed to its final name. A
failure before the renames leaves nothing behind (TOOLCHAIN.md section 4).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping

from loomcli.frontier.product import CommandProduct


def product_files(product: CommandProduct, requests: bool = True,
                  compiled: Mapping[str, bytes] | None = None,
                  bindings: Mapping[int, Mapping[str, str]] | None = None) -> dict[str, bytes]:
    """File name -> bytes: the manifest, `program-N.loomcmd`, the requests
    (unless `requests` is false) and `compiled` files (kernel artifacts,
    launch configs, manifests) with the bindings they satisfy."""
    files: dict[str, bytes] = {f"{product.name}.commands.json": product.manifest(bindings)}
    for i, program in enumerate(product.programs):
        files[f"program-{i}.loomcmd"] = program.data
    if requests:
        for request in product.requests:
            files[f"{request.name}.loombc"] = request.data
    files.update(compiled or {})
    return files


def publish(out_dir: str, files: Mapping[str, bytes]) -> None:
    """Write `files` into `out_dir` (created as needed): staged, then renamed."""
    os.makedirs(out_dir, exist_ok=True)
    staged: list[tuple[str, str]] = []
    try:
        for name, data in files.items():
            fd, tmp = tempfile.mkstemp(prefix=".loom-", suffix=".tmp", dir=out_dir)
            staged.append((tmp, os.path.join(out_dir, name)))
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            umask = os.umask(0)
            os.umask(umask)
            os.chmod(tmp, 0o666 & ~umask)
    except BaseException:
        for tmp, _ in staged:
            try:
                os.unlink(tmp)
            except OSError:
                pass
        raise
    for tmp, final in staged:
        os.replace(tmp, final)
