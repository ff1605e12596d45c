"""Building the command-program product (TOOLCHAIN.md section 7, seed 000).

`build_command_product` links the closure of the command roots, binds
configuration and specialization arguments, prepares each root (fold,
unroll, drop dead branches, evaluate launch contracts), classifies every
live launch and returns the product: portable command bytes per root, the
product-wide executable-entry requirements and one kernel request per
source-backed requirement.

Requests are published to an optional `RequestSink` the moment their class
is first met, before the product returns, so a caller can compile them
while the rest is being built. Publication is provisional: when building
fails afterwards (a `CompileError`), the caller discards the requests'
bindings; it may keep what it compiled, since a request's content key never
includes its parent binding. Without a sink the product is the same.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from loomcli.diagnostics import CompileError, Diagnostic
from loomcli.errors import UsageError
from loomcli.frontier.loomcmd import CommandFile, SpecArgument, write_command
from loomcli.frontier.prepare import Argument, BufferRef, Group, LaunchSite, dispatches
from loomcli.ir.core import Module, Operation
from loomcli.ir.ops import COMMAND_PROGRAM_DEF
from loomcli.targets.profiles import Profile

# The product descriptor of every request: it asks for a compiled module
# (and, with a target, the executable emitted from it).
COMPILED_MODULE_ROUTE = "loom.compiled-module"
MANIFEST_FORMAT = "loom-command-set"
COMMAND_LINE = "<command-line>"


# ---------------------------------------------------------------- requests


@dataclass(frozen=True)
class RequestBinding:
    """Provisional: requirement `requirement` of the parent product is root `root` of the request."""

    requirement: int
    root: int


@dataclass(frozen=True)
class Request:
    """One independent kernel request: an ordinary `.loombc` module plus its exact roots."""

    data: bytes                              # .loombc, no comments, locations or paths
    roots: tuple[str, ...]                   # ("@kernel",): export order of the compiled product
    bindings: tuple[RequestBinding, ...]
    route: str                               # product descriptor, the compile route's dispatch key
    key: str                                 # content key: never includes the bindings
    name: str                                # "kernel-N" (N: the requirement it was made for)
    export: str                              # entry name of root 0


def request_key(data: bytes, roots: Sequence[str], route: str) -> str:
    """What identifies a request's product: its bytes, roots and route. A cache
    adds target, pipeline and compiler version; the parent binding never counts."""
    h = hashlib.sha256(b"loom-request\0")
    for part in (route, "\0".join(roots)):
        h.update(part.encode() + b"\0")
    h.update(data)
    return h.hexdigest()


class RequestSink(Protocol):
    def publish(self, request: Request) -> None:
        """Called once per request, as soon as it exists; may start compiling it.
        An exception aborts building the product (an infrastructure status)."""
        ...


# ---------------------------------------------------------------- the product


@dataclass(frozen=True)
class Requirement:
    ordinal: int
    symbol: str                  # the kernel or entry symbol
    kind: str                    # "source" | "external"
    request: str | None = None   # "kernel-N.loombc" for a source-backed requirement


@dataclass(frozen=True)
class CommandProgram:
    symbol: str
    file: CommandFile
    data: bytes                  # program-N.loomcmd
    requirements: tuple[int, ...]  # the distinct requirements it dispatches, ascending


@dataclass(frozen=True)
class CommandProduct:
    name: str
    target: str | None
    programs: tuple[CommandProgram, ...]
    requirements: tuple[Requirement, ...]
    requests: tuple[Request, ...]
    warnings: tuple[Diagnostic, ...] = ()
    files_read: tuple[str, ...] = ()

    def summary(self, program: CommandProgram) -> str:
        """`command=run requirements=4 compiled=3 external=1`."""
        kinds = [self.requirements[r].kind for r in program.requirements]
        return (f"command={program.symbol} requirements={len(kinds)} compiled={kinds.count('source')} "
                f"external={kinds.count('external')}")

    def manifest(self, bindings: Mapping[int, Mapping[str, str]] | None = None) -> bytes:
        """`<name>.commands.json`; `bindings` (requirement -> `artifact`, `export`,
        `launch_config`) are added to the entries once compiled products are bound."""
        entries = []
        for r in self.requirements:
            entry: dict[str, Any] = {"symbol": r.symbol}
            if r.request is not None:
                entry["source_request"] = r.request
            entry.update((bindings or {}).get(r.ordinal, {}))
            entries.append(entry)
        doc = {"schema_version": 1, "format": MANIFEST_FORMAT, "name": self.name, "target": self.target,
               "programs": [{"symbol": p.symbol, "artifact": f"program-{i}.loomcmd", "byte_length": len(p.data),
                             "sha256": hashlib.sha256(p.data).hexdigest(),
                             "entry_requirements": list(p.requirements)}
                            for i, p in enumerate(self.programs)],
               "entries": entries}
        return (json.dumps(doc, indent=2) + "\n").encode()


@dataclass(frozen=True)
class FrontierOptions:
    input: str
    libraries: Sequence[str] = ()
    roots: Sequence[str] = ()
    config: Sequence[str] = ()
    config_files: Sequence[str] = ()
    spec: Sequence[str] = ()             # "@program.argument=VALUE"
    profile: Profile | None = None
    project_config: Mapping[str, Any] | None = None
    name: str | None = None              # default: the stem of `input`


def build_command_product(options: FrontierOptions, sink: RequestSink | None = None,
                          inputs: Any = None) -> CommandProduct:
    """Build the product of the command roots of `options.input`; publish each
    kernel request to `sink` as it becomes available. Raises CompileError
    (the input's fault) or UsageError. `inputs` (a `loomcli.service.front.Inputs`,
    sources held in memory) replaces reading `options.input` and its libraries."""
    from loomcli.ir.gcpause import gc_paused

    with gc_paused():
        return _build(options, sink, inputs)


def _build(options: FrontierOptions, sink: RequestSink | None, given: Any) -> CommandProduct:
    from loomcli.frontier.prepare import Preparer
    from loomcli.passes.pipeline import Pipeline
    from loomcli.pipeline import ConfigSources
    from loomcli.service.front import Files, FrontEndOptions, link_and_bind

    inputs = given if given is not None else Files((options.input,), options.libraries)
    index = inputs.read()
    roots = _roots(index, options.roots)
    config = ConfigSources(options.config, options.config_files, options.project_config)
    front = link_and_bind(inputs, index, FrontEndOptions(roots, config), Pipeline(()))
    module, warnings = front.module, front.warnings
    symbols = module.symbols()
    programs = [symbols[r.lstrip("@")] for r in roots]
    for r, op in zip(roots, programs):
        if op.opdef is not COMMAND_PROGRAM_DEF:
            raise UsageError(f"root {r} is a {op.name}, not a command.program.def")
    specs = _bind_specs(options.spec, programs)
    builder = _Builder(module, options.profile, sink)
    preparer = Preparer(module, options.profile, builder, front.origins)
    products = []
    for op, spec in zip(programs, specs):
        tree = preparer.prepare(op, spec)
        products.append(_program(op, spec, tree, options.profile))
    name = options.name or os.path.splitext(os.path.basename(options.input))[0]
    files = tuple(front.files_read)
    return CommandProduct(name, options.profile.name if options.profile else None, tuple(products),
                          tuple(builder.requirements), tuple(builder.requests),
                          tuple(warnings) + tuple(builder.warnings.values()), files)


def _roots(index: Any, named: Sequence[str]) -> list[str]:
    """Named roots in the order given, else every public command program of the inputs in source order."""
    if named:
        seen: dict[str, None] = {}
        for r in named:
            seen.setdefault("@" + r.lstrip("@"), None)
        return list(seen)
    roots = ["@" + s.symbol for item in index.inputs if not item.library for s in item.symbols
             if s.op_name == COMMAND_PROGRAM_DEF.name and s.public]
    if not roots:
        paths = ", ".join(item.path for item in index.inputs if not item.library)
        raise UsageError(f"{paths} has no public command.program.def; name the roots with --root")
    return roots


def _program(op: Operation, spec: list[Any], tree: Group, profile: Profile | None) -> CommandProgram:
    region = op.regions[0]
    sig = op.attr("sig").args
    spec_args = tuple(SpecArgument(a.name, Argument(a.type.name, v)) for a, v in zip(sig, spec))
    buffers = tuple(a.name for a in region.args[len(sig):])
    file = CommandFile(op.attr("sym"), profile.name if profile else "", spec_args, buffers, tree)
    used = sorted({d.requirement for d in dispatches(tree)})
    return CommandProgram(op.attr("sym"), file, write_command(file), tuple(used))


def _bind_specs(texts: Sequence[str], programs: list[Operation]) -> list[list[Any]]:
    """`--spec @prog.arg=V` values per root, in signature order, typed and checked
    (their `where` predicates are checked when the program is entered)."""
    from loomcli.launch.program import BadValue, parse_value

    by_symbol = {op.attr("sym"): op for op in programs}
    given: dict[tuple[str, str], str] = {}
    for text in texts:
        lhs, eq, value = text.partition("=")
        program, dot, arg = lhs.lstrip("@").rpartition(".")
        if not eq or not lhs.startswith("@") or not dot or not program or not arg:
            raise UsageError(f"--spec {text}: expected @program.argument=VALUE")
        op = by_symbol.get(program)
        if op is None:
            raise UsageError(f"--spec {text}: @{program} is not a root command program "
                             f"(roots: {', '.join('@' + s for s in by_symbol)})")
        names = [a.name for a in op.attr("sig").args]
        if arg not in names:
            listed = ", ".join("%" + n for n in names) or "none"
            raise UsageError(f"--spec {text}: @{program} has no specialization argument %{arg} "
                             f"(it has: {listed})")
        if (program, arg) in given:
            raise UsageError(f"--spec binds @{program}.{arg} twice")
        given[(program, arg)] = value
    out = []
    diags: list[Diagnostic] = []
    for op in programs:
        sym = op.attr("sym")
        values = []
        for i, a in enumerate(op.attr("sig").args):
            bound = given.get((sym, a.name))
            if bound is None:
                diags.append(Diagnostic.make("LAUNCH_CONFIG/004", COMMAND_LINE, (0, 0),
                                             detail=f"specialization argument {i} (%{a.name}: {a.type}) of "
                                                    f"@{sym} is unbound; give --spec @{sym}.{a.name}=VALUE"))
                continue
            try:
                values.append(parse_value(bound, a.type))
            except BadValue as e:
                diags.append(Diagnostic.make("LAUNCH_CONFIG/004", COMMAND_LINE, (0, 0),
                                             detail=f"--spec @{sym}.{a.name}: {e}"))
        out.append(values)
    if diags:
        raise CompileError(diags)
    return out


@dataclass
class _Builder:
    """Numbers requirements by first occurrence and publishes one request per source-backed class."""

    module: Module
    profile: Profile | None
    sink: RequestSink | None
    requirements: list[Requirement] = field(default_factory=list)
    requests: list[Request] = field(default_factory=list)
    warnings: dict[tuple[Any, ...], Diagnostic] = field(default_factory=dict)
    _classes: dict[Any, int] = field(default_factory=dict)
    _sites: dict[Any, int] = field(default_factory=dict)
    _entries: dict[str, int] = field(default_factory=dict)
    _requests: Any = None

    def launch(self, site: LaunchSite) -> int:
        from loomcli.frontier.classify import RequestBuilder

        kernel = site.kernel
        memo = (kernel.attr("sym"), tuple(None if isinstance(c, BufferRef) else (type(c).__name__, repr(c))
                                           for c in site.device))
        ordinal = self._sites.get(memo)
        if ordinal is None:
            if self._requests is None:
                self._requests = RequestBuilder(self.module, self.profile)
            key, warnings = self._requests.classify(kernel, site.device, site.profile)
            for d in warnings:
                self.warnings.setdefault((d.file, d.line, d.column, d.code, d.message), d)
            ordinal = self._classes.get(key)
            if ordinal is None:
                module = self._requests.request(kernel, site.device, site.profile)
                ordinal = self._new(kernel.attr("sym"), "source")
                self._classes[key] = ordinal
                self._publish(ordinal, kernel, module)
            self._sites[memo] = ordinal
        return ordinal

    def external(self, entry: Operation) -> int:
        sym = entry.attr("sym")
        ordinal = self._entries.get(sym)
        if ordinal is None:
            ordinal = self._entries[sym] = self._new(sym, "external")
        return ordinal

    def _new(self, symbol: str, kind: str) -> int:
        ordinal = len(self.requirements)
        request = f"kernel-{ordinal}.loombc" if kind == "source" else None
        self.requirements.append(Requirement(ordinal, symbol, kind, request))
        return ordinal

    def _publish(self, ordinal: int, kernel: Operation, module: Module) -> None:
        from loomcli.bytecode import write_module
        from loomcli.targets.abi import export_name

        data = write_module(module, keep_debug=False)
        roots = ("@" + kernel.attr("sym"),)
        request = Request(data, roots, (RequestBinding(ordinal, 0),), COMPILED_MODULE_ROUTE,
                          request_key(data, roots, COMPILED_MODULE_ROUTE), f"kernel-{ordinal}", export_name(kernel))
        self.requests.append(request)
        if self.sink is not None:
            self.sink.publish(request)
