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
BESIDE = ""   # --manifest / --emit-launch-config without a PATH: beside the artifact
# Side files an -o names by its suffix (checked before the artifact suffixes: `.launch.loombc` ends in `.loombc`).
SIDE_SUFFIXES = {".launch.loombc": "launch-config", ".manifest.json": "manifest"}
STAGE = "stage:"   # an output that is one back-end stage's bytes (loomcli.service.compile.STAGE)


@dataclass(frozen=True)
class OutputRequest:
    """What `loom compile`'s command line asks to be written."""

    input: str                          # the input's path: output names take its stem
    outputs: Sequence[str] = ()         # every -o (STDOUT: standard output); side files by suffix
    out_dir: str | None = None          # --out-dir
    format: str | None = None           # --format
    targets: Sequence[str] = ()         # --target values (and --target-env's spirv: one)
    launch_config: str | None = None    # --emit-launch-config: a file, or with --out-dir a folder; BESIDE
    manifest: str | None = None         # --manifest: likewise
    depfile_beside: bool = False        # -MD
    depfile: str | None = None          # -MF
    depfile_target: str | None = None   # -MT
    stdout_is_terminal: bool = False    # refuse binary output to a terminal
    stop_at: str | None = None          # --stop-at: the output is this back-end stage's bytes
    dump_stages: str | None = None      # --dump-stages: a folder for every stage's output on the way


@dataclass(frozen=True)
class PlannedOutput:
    """One target's output and the side files that go with it."""

    profile: Profile | None             # None: a module format without --target
    format: str                         # an output name: a format, or `stage:NAME` (--stop-at)
    path: str
    launch_config: str | None = None
    manifest: str | None = None
    also: tuple[tuple[str, str], ...] = ()   # (output name, path): more -o formats, dumped stages


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
                        artifact_name=os.path.basename(_described(o)),
                        launch_config_name=os.path.basename(o.launch_config) if o.launch_config else "",
                        also=tuple(name for name, _ in o.also))
                for o in self.outputs]

    def writes(self, outcomes: Sequence[CompileOutcome], files_read: Sequence[str]) -> list[tuple[str, bytes]]:
        """Every file to publish: each output's artifact and side files, then the depfiles."""
        writes: list[tuple[str, bytes]] = []
        for output, outcome in zip(self.outputs, outcomes, strict=True):
            writes.append((output.path, outcome.artifact))
            writes += [(path, data) for (_, path), data in zip(output.also, outcome.also, strict=True)]
            if output.launch_config is not None:
                writes.append((output.launch_config, outcome.launch_config))
            if output.manifest is not None:
                writes.append((output.manifest, outcome.manifest))
        return writes + [(dep, depfile(target, files_read)) for dep, target in self.depfiles]


def _described(output: PlannedOutput) -> str:
    """The path of the artifact a manifest describes: the first target format's."""
    for name, path in ((output.format, output.path), *output.also):
        if name in ARTIFACT_FORMATS:
            return path
    return output.path


def plan_outputs(request: OutputRequest) -> OutputPlan:
    """Every output `request` asks for, or the UsageError that says why it cannot be (LoomError for a
    target that does not parse)."""
    profiles = [parse_target(t) for t in request.targets]
    _check_shape(request, len(profiles))
    stem = os.path.splitext(os.path.basename(request.input))[0]
    each: list[Profile | None] = [*profiles] or [None]  # no target: one module output
    outputs = tuple(_planned(request, profile, stem) for profile in each)
    depfiles: tuple[tuple[str, str], ...] = ()
    if request.depfile_beside or request.depfile:
        depfiles = tuple((request.depfile or os.path.splitext(o.path if o.path != STDOUT else "stdout")[0] + ".d",
                          request.depfile_target or o.path) for o in outputs)
    folders: set[str] = {request.dump_stages} if request.dump_stages else set()
    if request.out_dir is not None:
        paths = [p for o in outputs for p in (o.path, o.launch_config, o.manifest, *(p for _, p in o.also))
                 if p is not None]
        folders |= {os.path.dirname(p) for p in paths} - {""}
    return OutputPlan(outputs, depfiles, tuple(sorted(folders)))


def _check_shape(request: OutputRequest, targets: int) -> None:
    """-o / --out-dir against the number of targets."""
    if request.outputs and request.out_dir is not None:
        raise UsageError("-o and --out-dir exclude each other")
    if not request.outputs and request.out_dir is None:
        raise UsageError("missing -o OUT or --out-dir DIR")
    if targets > 1 and request.out_dir is None:
        raise UsageError("several --target values need --out-dir")
    if request.out_dir is not None and not targets:
        raise UsageError("--out-dir needs at least one --target")
    if request.depfile and targets > 1:
        raise UsageError("-MF names one depfile; with several targets use -MD")
    if (request.stop_at is not None or request.dump_stages is not None) and not targets:
        raise UsageError(f"{'--stop-at' if request.stop_at is not None else '--dump-stages'} needs --target")
    if request.stop_at is not None and (request.launch_config is not None or request.manifest is not None):
        raise UsageError("--stop-at writes one stage's output; --manifest and --emit-launch-config "
                         "describe an artifact")


def _suffix_output(path: str) -> str | None:
    """The output an -o path names by its suffix: a side file's, an artifact's or a module's."""
    for suffix, name in SIDE_SUFFIXES.items():
        if path.endswith(suffix) and len(path) > len(suffix):
            return name
    suffix = os.path.splitext(path)[1]
    return SUFFIX_FORMATS.get(suffix) or MODULE_SUFFIXES.get(suffix)


def _o_outputs(request: OutputRequest, profile: Profile | None) -> tuple[list[tuple[str, str]], dict[str, str]]:
    """Every -o as (format, path), the first the primary one, and the side files they name
    ({"launch-config" | "manifest": path})."""
    formats: list[tuple[str, str]] = []
    sides: dict[str, str] = {}
    if request.stop_at is not None:  # the one -o is the stage's bytes, whatever its suffix
        if len(request.outputs) > 1:
            raise UsageError("--stop-at writes one output; pass one -o")
        return [(STAGE + request.stop_at, request.outputs[0])], sides
    for path in request.outputs:
        named = _suffix_output(path) if path != STDOUT else None
        if named is not None and named in SIDE_SUFFIXES.values() and not (request.format and len(request.outputs) == 1):
            if named in sides:
                raise UsageError(f"-o {sides[named]} and -o {path} both name the {named}")
            sides[named] = path
            continue
        if not (request.format or named) and path == STDOUT and profile is not None:
            from loomcli.emit import backend_for

            named = backend_for(profile).native_format  # `-o -` with a target (TOOLCHAIN.md section 14)
        formats.append((request.format or named or "", path))
    if not formats:
        raise UsageError("-o names only side files; add -o for the artifact (or the module)")
    if request.format and len(formats) > 1:
        raise UsageError("--format names the format of one -o; several take theirs from their suffixes")
    seen: dict[str, str] = {}
    for fmt, path in formats:
        if not fmt:
            raise UsageError(f"-o {path}: cannot tell the format from the suffix; pass --format")
        if fmt not in MODULE_SUFFIXES.values() and profile is None:
            raise UsageError(f"emitting {fmt} needs --target")
        if path == STDOUT and fmt in BINARY and request.stdout_is_terminal:
            raise UsageError("refusing to write binary output to a terminal; use -o FILE")
        if fmt in seen:
            raise UsageError(f"-o {seen[fmt]} and -o {path} both write {fmt}")
        seen[fmt] = path
    paths = [p for _, p in formats] + list(sides.values())
    for p in paths:
        if paths.count(p) > 1:
            raise UsageError(f"-o {p} is named twice")
    for name, option in (("launch-config", request.launch_config), ("manifest", request.manifest)):
        if name in sides and option is not None:
            flag = "--emit-launch-config" if name == "launch-config" else "--manifest"
            raise UsageError(f"-o {sides[name]} and {flag} both name the {name}")
    return formats, sides


def _planned(request: OutputRequest, profile: Profile | None, stem: str) -> PlannedOutput:
    """One target's output: -o's paths and formats, or --out-dir's `<stem>.<family>-<selector><ext>`."""
    tag = f"{profile.family}-{profile.selector}" if profile is not None else ""
    sides: dict[str, str] = {}
    if request.out_dir is not None:
        from loomcli.emit import backend_for

        assert profile is not None
        fmt = request.format or backend_for(profile).native_format
        formats = [(fmt, os.path.join(request.out_dir, f"{stem}.{tag}{EXTENSIONS[fmt]}"))]
    else:
        formats, sides = _o_outputs(request, profile)
    (fmt, path), more = formats[0], formats[1:]
    primary = os.path.splitext(path)[0] if path != STDOUT else None
    launch_config = sides.get("launch-config") or _side_path(request.launch_config, request.out_dir, stem, tag,
                                                            ".launch.loombc", primary)
    manifest = sides.get("manifest") or _side_path(request.manifest, request.out_dir, stem, tag, ".manifest.json",
                                                   primary)
    if launch_config is not None and profile is None:
        raise UsageError("--emit-launch-config needs --target")
    if manifest is not None and not any(f in ARTIFACT_FORMATS for f, _ in formats):
        raise UsageError("--manifest describes a target artifact (.hsaco, .spv, .ptx, .cubin, .ll, .s)")
    if request.stop_at is not None:
        assert profile is not None
        fmt = STAGE + _stage(profile, request.stop_at)
    also = [(f, p) for f, p in more] + _dumped_stages(request, profile, stem, tag, [fmt] + [f for f, _ in more])
    return PlannedOutput(profile, fmt, path, launch_config, manifest, tuple(also))


def _dumped_stages(request: OutputRequest, profile: Profile | None, stem: str, tag: str,
                   names: list[str]) -> list[tuple[str, str]]:
    """--dump-stages DIR: DIR/<stem>[.<family>-<selector>].<stage> for each stage on the way to the outputs."""
    if request.dump_stages is None or profile is None:
        return []
    from loomcli.emit import backend_for

    stages = backend_for(profile).stages
    wanted: set[str] = set()
    for name in names:
        stop = name[len(STAGE):] if name.startswith(STAGE) else stages.stops.get(name)
        if stop is not None:
            wanted.update(s.name for s in stages.path(_stage(profile, stop)))
    label = f"{stem}.{tag}" if request.out_dir is not None else stem
    return [(STAGE + s.name, os.path.join(request.dump_stages, f"{label}.{s.name}"))
            for s in stages.stages if s.name in wanted]


def _stage(profile: Profile, name: str) -> str:
    """`name` if it is a stage of `profile`'s back end (`loomcli.emit.BACKENDS`), else the UsageError listing them."""
    from loomcli.emit import backend_for

    stages = backend_for(profile).stages
    if name not in [s.name for s in stages.stages]:
        raise UsageError(f"{profile.family} has no stage {name}; its stages: {stages.describe()}")
    return name


def _side_path(option: str | None, out_dir: str | None, stem: str, tag: str, suffix: str,
               primary: str | None) -> str | None:
    """--emit-launch-config / --manifest: a file, or with --out-dir a folder of per-target files;
    without a PATH, beside the artifact (`primary`: -o's path without its suffix)."""
    if option is None:
        return None
    if option == BESIDE:
        if out_dir is not None:
            return os.path.join(out_dir, f"{stem}.{tag}{suffix}")
        if primary is None:
            raise UsageError(f"{'--manifest' if 'manifest' in suffix else '--emit-launch-config'} "
                             f"beside -o - needs a PATH")
        return primary + suffix
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
