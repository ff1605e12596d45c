"""Where a compile's outputs go: `loom compile`'s plan of every output, and depfiles.

`plan_outputs` turns what the command line asks for (`OutputRequest`) into
an `OutputPlan` before any work: the format and path of every target's
output (from `-o`'s suffix or `--format`, or `--out-dir`'s naming), the
side files (launch config, manifest) and depfiles, and every usage error.
The plan then makes one `CompileRequest` per output for the compile entry
point, and turns their outcomes into the files to publish, all or nothing.
It is plain data: the command and the tests use it alike, without click.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass

from loomcli.emit import FORMATS as ARTIFACT_FORMATS
from loomcli.emit import SUFFIX_FORMATS
from loomcli.errors import UsageError
from loomcli.service.request import CompileOutcome, CompileRequest
from loomcli.targets.profiles import Profile, parse_target

MODULE_SUFFIXES = {".loombc": "loom-bytecode", ".loom": "loom-text"}
EXTENSIONS = {"loom-bytecode": ".loombc", "loom-text": ".loom", **ARTIFACT_FORMATS}
ALL_FORMATS = tuple(EXTENSIONS)
BINARY = frozenset({"loom-bytecode", "amdgpu-hsaco", "spirv-binary", "nvptx-cubin"})
STDOUT = "-"


@dataclass(frozen=True)
class OutputRequest:
    """What `loom compile`'s command line asks to be written."""

    input: str                          # the input's path: output names take its stem
    output: str | None = None           # -o (STDOUT: standard output)
    out_dir: str | None = None          # --out-dir
    format: str | None = None           # --format
    targets: Sequence[str] = ()         # --target values (and --target-env's spirv: one)
    launch_config: str | None = None    # --emit-launch-config: a file, or with --out-dir a folder
    manifest: str | None = None         # --manifest: likewise
    depfile_beside: bool = False        # -MD
    depfile: str | None = None          # -MF
    depfile_target: str | None = None   # -MT
    stdout_is_terminal: bool = False    # refuse binary output to a terminal


@dataclass(frozen=True)
class PlannedOutput:
    """One target's output and the side files that go with it."""

    profile: Profile | None             # None: a module format without --target
    format: str
    path: str
    launch_config: str | None = None
    manifest: str | None = None


@dataclass(frozen=True)
class OutputPlan:
    outputs: tuple[PlannedOutput, ...]
    depfiles: tuple[tuple[str, str], ...] = ()   # (depfile path, the target it names)
    folders: tuple[str, ...] = ()                # created before publishing (--out-dir and its side folders)

    @property
    def profiles(self) -> list[Profile]:
        return [o.profile for o in self.outputs if o.profile is not None]

    def requests(self, template: CompileRequest) -> list[CompileRequest]:
        """One request per output: `template` (module, roots, pipeline, ...) with its target and outputs."""
        from dataclasses import replace

        return [replace(template, target=o.profile.name if o.profile is not None else "", format=o.format,
                        launch_config=o.launch_config is not None, manifest=o.manifest is not None,
                        artifact_name=os.path.basename(o.path),
                        launch_config_name=os.path.basename(o.launch_config) if o.launch_config else "")
                for o in self.outputs]

    def writes(self, outcomes: Sequence[CompileOutcome], files_read: Sequence[str]) -> list[tuple[str, bytes]]:
        """Every file to publish: each output's artifact and side files, then the depfiles."""
        writes: list[tuple[str, bytes]] = []
        for output, outcome in zip(self.outputs, outcomes, strict=True):
            writes.append((output.path, outcome.artifact))
            if output.launch_config is not None:
                writes.append((output.launch_config, outcome.launch_config))
            if output.manifest is not None:
                writes.append((output.manifest, outcome.manifest))
        return writes + [(dep, depfile(target, files_read)) for dep, target in self.depfiles]


def plan_outputs(request: OutputRequest) -> OutputPlan:
    """Every output `request` asks for, or the UsageError that says why it cannot be (LoomError for a
    target that does not parse)."""
    profiles = [parse_target(t) for t in request.targets]
    _check_shape(request, len(profiles))
    module_format = _output_format(request, profiles) if request.output is not None else None
    stem = os.path.splitext(os.path.basename(request.input))[0]
    each: list[Profile | None] = [*profiles] or [None]  # no target: one module output
    outputs = tuple(_planned(request, profile, stem, module_format) for profile in each)
    depfiles: tuple[tuple[str, str], ...] = ()
    if request.depfile_beside or request.depfile:
        depfiles = tuple((request.depfile or os.path.splitext(o.path if o.path != STDOUT else "stdout")[0] + ".d",
                          request.depfile_target or o.path) for o in outputs)
    folders: tuple[str, ...] = ()
    if request.out_dir is not None:
        paths = [p for o in outputs for p in (o.path, o.launch_config, o.manifest) if p is not None]
        folders = tuple(sorted({os.path.dirname(p) for p in paths} - {""}))
    return OutputPlan(outputs, depfiles, folders)


def _check_shape(request: OutputRequest, targets: int) -> None:
    """-o / --out-dir against the number of targets."""
    if request.output is not None and request.out_dir is not None:
        raise UsageError("-o and --out-dir exclude each other")
    if request.output is None and request.out_dir is None:
        raise UsageError("missing -o OUT or --out-dir DIR")
    if targets > 1 and request.out_dir is None:
        raise UsageError("several --target values need --out-dir")
    if request.out_dir is not None and not targets:
        raise UsageError("--out-dir needs at least one --target")
    if request.depfile and targets > 1:
        raise UsageError("-MF names one depfile; with several targets use -MD")


def _output_format(request: OutputRequest, profiles: list[Profile]) -> str:
    """-o's format: --format, else from its suffix; `-o -` with a target
    writes the target's native format (TOOLCHAIN.md section 14)."""
    assert request.output is not None
    suffix = os.path.splitext(request.output)[1]
    fmt = request.format or SUFFIX_FORMATS.get(suffix) or MODULE_SUFFIXES.get(suffix)
    if fmt is None and request.output == STDOUT and len(profiles) == 1:
        from loomcli.emit import backend_for

        fmt = backend_for(profiles[0]).native_format
    if fmt is None:
        raise UsageError(f"-o {request.output}: cannot tell the format from the suffix; pass --format")
    if fmt not in MODULE_SUFFIXES.values() and not profiles:
        raise UsageError(f"emitting {fmt} needs --target")
    if request.output == STDOUT and fmt in BINARY and request.stdout_is_terminal:
        raise UsageError("refusing to write binary output to a terminal; use -o FILE")
    return fmt


def _planned(request: OutputRequest, profile: Profile | None, stem: str, output_format: str | None) -> PlannedOutput:
    """One target's output: -o's path and format, or --out-dir's `<stem>.<family>-<selector><ext>`."""
    tag = f"{profile.family}-{profile.selector}" if profile is not None else ""
    if request.out_dir is not None:
        from loomcli.emit import backend_for

        assert profile is not None
        fmt = request.format or backend_for(profile).native_format
        path = os.path.join(request.out_dir, f"{stem}.{tag}{EXTENSIONS[fmt]}")
    else:
        assert request.output is not None and output_format is not None
        fmt, path = output_format, request.output
    launch_config = _side_path(request.launch_config, request.out_dir, stem, tag, ".launch.loombc")
    manifest = _side_path(request.manifest, request.out_dir, stem, tag, ".manifest.json")
    if launch_config is not None and profile is None:
        raise UsageError("--emit-launch-config needs --target")
    if manifest is not None and fmt in MODULE_SUFFIXES.values():
        raise UsageError("--manifest describes a target artifact (.hsaco, .spv, .ptx, .cubin, .ll, .s)")
    return PlannedOutput(profile, fmt, path, launch_config, manifest)


def _side_path(option: str | None, out_dir: str | None, stem: str, tag: str, suffix: str) -> str | None:
    """--emit-launch-config / --manifest: a file, or with --out-dir a folder of per-target files."""
    if option is None:
        return None
    if out_dir is not None:
        return os.path.join(option, f"{stem}.{tag}{suffix}")
    return option


def depfile(target: str, deps: Sequence[str]) -> bytes:
    """A gcc-compatible depfile: the first target is the output, then every file read."""

    def esc(p: str) -> str:
        return p.replace("\\", "\\\\").replace(" ", "\\ ").replace("#", "\\#").replace("$", "$$")

    seen: dict[str, None] = {}
    for d in deps:
        seen.setdefault(d, None)
    lines = [f"{esc(target)}:"] + [f" {esc(d)}" for d in seen]
    return (" \\\n".join(lines) + "\n").encode()
