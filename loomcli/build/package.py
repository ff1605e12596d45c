"""Release packages: `dist/<name>-<version>.loompkg.tar.gz` (TOOLCHAIN.md section 9).

The archive holds every artifact of the build under its out-dir-relative
path (`<family>-<selector>/<name>.<ext>`, launch configs, manifests) and a
top-level `package.json`. It is reproducible: entries sorted by path, one
fixed mtime (`SOURCE_DATE_EPOCH` when set, else 0), uid/gid 0 with no
user or group names, fixed modes, and a gzip header without a name or time;
the same outputs give the same package bytes.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import tarfile
from collections.abc import Mapping, Sequence

from loomcli import settings
from loomcli.errors import atomic_write
from loomcli.files import read_file

PACKAGE_SCHEMA = 1
_FORMATS = {".hsaco": "amdgpu-hsaco", ".spv": "spirv-binary", ".ptx": "nvptx-ptx", ".cubin": "nvptx-cubin",
            ".loomcmd": "loom-command"}


def _format(name: str) -> str:
    if name.endswith(".launch.loombc"):
        return "loom-launch-config"
    if name.endswith(".manifest.json"):
        return "loom-artifact-manifest"
    if name.endswith(".commands.json"):
        return "loom-command-set"
    if name.endswith(".loombc"):
        return "loom-bytecode"
    return _FORMATS.get(os.path.splitext(name)[1], "data")


def _exports(name: str, files: Mapping[str, bytes]) -> list[str]:
    """An artifact's exports, from the manifest beside it."""
    stem, ext = os.path.splitext(name)
    if ext not in (".hsaco", ".spv", ".ptx", ".cubin"):
        return []
    manifest = files.get(stem + ".manifest.json")
    if manifest is None:
        return []
    try:
        return [k["export"] for k in json.loads(manifest).get("kernels", []) if "export" in k]
    except (ValueError, KeyError, TypeError, AttributeError):
        return []


def package_bytes(name: str, version: str, loom_version: str, targets: Sequence[str],
                  files: Mapping[str, bytes], mtime: int | None = None) -> bytes:
    """The package of `files` (out-dir-relative `/` paths -> bytes); every
    entry's mtime is `mtime`, else `SOURCE_DATE_EPOCH` (`loomcli.settings`)."""
    if mtime is None:
        mtime = settings.source_date_epoch()
    artifacts = []
    for path in sorted(files):
        data = files[path]
        folder = path.split("/")[0]
        target = folder.replace("-", ":", 1) if "/" in path else None
        artifacts.append({"path": path, "format": _format(path), "target": target,
                          "sha256": hashlib.sha256(data).hexdigest(), "byte_length": len(data),
                          "exports": _exports(path, files)})
    doc = {"schema_version": PACKAGE_SCHEMA, "format": "loom-package", "name": name, "version": version,
           "loom_version": loom_version, "targets": list(targets), "artifacts": artifacts}
    entries = dict(files)
    entries["package.json"] = (json.dumps(doc, indent=2) + "\n").encode()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for path in sorted(entries):
            info = tarfile.TarInfo(path)
            info.size = len(entries[path])
            info.mtime = mtime
            info.mode = 0o644
            info.uid = info.gid = 0
            info.uname = info.gname = ""
            tar.addfile(info, io.BytesIO(entries[path]))
    out = io.BytesIO()
    with gzip.GzipFile(filename="", mode="wb", fileobj=out, mtime=mtime, compresslevel=9) as gz:
        gz.write(raw.getvalue())
    return out.getvalue()


def write_package(dist: str, name: str, version: str, loom_version: str, targets: Sequence[str],
                  out_dir: str, outputs: Sequence[str], mtime: int | None = None) -> str:
    """Package `outputs` (paths relative to `out_dir`) into `dist/`; returns the package path."""
    files = {}
    for rel in outputs:
        files[rel] = read_file(os.path.join(out_dir, *rel.split("/")), OUTPUT_LIMIT)
    os.makedirs(dist, exist_ok=True)
    path = os.path.join(dist, f"{name}-{version}.loompkg.tar.gz")
    atomic_write(path, package_bytes(name, version, loom_version, targets, files, mtime))
    return path


# Outputs are read back to be packaged: regular files only, each bounded
# like a cache entry (`loomcli.cache.MAX_ENTRY_BYTES`).
OUTPUT_LIMIT = 256 << 20
