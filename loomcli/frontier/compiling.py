"""Compiling published requests and binding them to the command (seed 000).

`RequestCompiler` is a `RequestSink`: each request, as it is published,
becomes one `CompileRequest` of the one compile entry point
(`loomcli.service.compile`), submitted to its `CompileService`, which checks
the cache first (a hit creates no task) and sends misses to its task sink
(the standard worker pool, or an inline executor). Compilation therefore
overlaps the rest of command construction.

Completion belongs to the product, not to the pool: `finish` waits for the
futures of exactly the requests this product published, keeps an
infrastructure failure (status: a worker that died) apart from compile
diagnostics (result), checks every product against its request (the
request's route, one export per root in root order, one artifact, the
launch-config artifact and manifest present) and only then binds
requirement -> (artifact, export). `discard` is the path for a parent that
failed after publishing: it waits for the children (so successful ones are
cached, their keys never naming the parent) and binds nothing.
"""

from __future__ import annotations

import json
from concurrent.futures import Future
from dataclasses import dataclass, field

from loomcli.diagnostics import CompileError, Diagnostic
from loomcli.emit import BACKENDS
from loomcli.errors import EXIT_ENV, LoomError
from loomcli.frontier.product import COMPILED_MODULE_ROUTE, CommandProduct, Request
from loomcli.service.dispatch import CompileService
from loomcli.service.request import CompileOutcome, CompileRequest
from loomcli.targets.profiles import Profile

UNNUMBERED = "kernel"


@dataclass
class CompiledProduct:
    """What `finish` returns: the files to write and the committed bindings."""

    files: dict[str, bytes] = field(default_factory=dict)
    bindings: dict[int, dict[str, str]] = field(default_factory=dict)   # requirement -> manifest fields
    warnings: list[Diagnostic] = field(default_factory=list)


class RequestCompiler:
    """A `RequestSink` that compiles every request it is given for one profile."""

    def __init__(self, service: CompileService, profile: Profile, pipeline: str = "default") -> None:
        backend = BACKENDS.get(profile.family)
        if backend is None:
            raise LoomError(f"--compile has no executable format for {profile.name}", 2)
        self.service = service
        self.profile = profile
        self.pipeline = pipeline
        self.format, self.suffix = backend.native_format, backend.suffix  # the family's native artifact
        self.pending: list[tuple[Request, Future[CompileOutcome]]] = []

    def publish(self, request: Request) -> None:
        if request.route != COMPILED_MODULE_ROUTE:
            raise LoomError(f"no compiler route for {request.name} ({request.route})", EXIT_ENV)
        compile_request = CompileRequest(
            module=request.data, target=self.profile.name, format=self.format, roots=request.roots, linked=True,
            pipeline=self.pipeline, launch_config=True, manifest=True,
            # File names that do not depend on the parent's numbering keep the cache key the
            # request's content; `finish` names the files after the requirement.
            artifact_name=UNNUMBERED + self.suffix, launch_config_name=UNNUMBERED + ".launch.loombc",
            path=f"{request.name}.loombc")
        future = self.service.submit(compile_request, f"{request.name} {self.profile.name}")
        self.pending.append((request, future))

    def discard(self) -> None:
        """The parent failed: let every child finish (and be cached), bind nothing."""
        for _, future in self.pending:
            future.result()
        self.pending = []

    def finish(self, product: CommandProduct) -> CompiledProduct:
        """Wait for this product's requests, check them, commit the bindings.
        Raises LoomError (infrastructure) or CompileError (diagnostics of every
        request that failed to compile)."""
        out = CompiledProduct()
        failed: list[Diagnostic] = []
        errors: list[LoomError] = []
        for request, future in self.pending:
            outcome = future.result()
            if outcome.status == "error":
                errors.append(LoomError(f"{request.name}: {outcome.message}", outcome.exit_code or EXIT_ENV))
                continue
            if outcome.status == "failed":
                failed.extend(outcome.diagnostics)
                continue
            out.warnings.extend(outcome.diagnostics)
            exports = self._check(request, outcome)
            out.files[request.name + self.suffix] = outcome.artifact
            out.files[f"{request.name}.launch.loombc"] = outcome.launch_config
            out.files[f"{request.name}.manifest.json"] = _renamed(outcome.manifest, request.name + self.suffix,
                                                                  f"{request.name}.launch.loombc")
            for b in request.bindings:
                if b.requirement in out.bindings or not 0 <= b.root < len(exports) \
                        or b.requirement >= len(product.requirements):
                    raise LoomError(f"internal: {request.name} carries an invalid binding "
                                    f"{b.requirement} -> {b.root}", EXIT_ENV)
                out.bindings[b.requirement] = {"artifact": request.name + self.suffix, "export": exports[b.root],
                                               "launch_config": f"{request.name}.launch.loombc"}
        self.pending = []
        if errors:
            raise errors[0]
        if failed:
            raise CompileError(failed)
        unbound = [r.ordinal for r in product.requirements if r.kind == "source" and r.ordinal not in out.bindings]
        if unbound:
            raise LoomError(f"internal: requirements {unbound} have no compiled product", EXIT_ENV)
        return out

    def _check(self, request: Request, outcome: CompileOutcome) -> list[str]:
        """A product satisfies its request: one export per root, in root order, named as the
        request says; one artifact with its launch config and manifest; nothing left to require."""
        exports = list(outcome.extra.get("exports", []))
        problem = None
        if not outcome.artifact or not outcome.launch_config or not outcome.manifest:
            problem = "an artifact, launch config or manifest is missing"
        elif exports != [request.export] or len(exports) != len(request.roots):
            problem = f"exports {exports}, expected [{request.export!r}]"
        else:
            kernels = json.loads(outcome.manifest).get("kernels", [])
            if [k.get("export") for k in kernels] != exports:
                problem = "its manifest names other kernels"
        if problem is not None:
            raise LoomError(f"internal: {request.name} returned a bad product: {problem}", EXIT_ENV)
        return exports


def _renamed(manifest: bytes, artifact: str, launch_config: str) -> bytes:
    """The artifact manifest with the file names of this product (same layout as `emit.artifacts.manifest`)."""
    doc = json.loads(manifest)
    doc["artifact"]["name"] = artifact
    for kernel in doc.get("kernels", []):
        kernel["launch_config"] = launch_config
    return (json.dumps(doc, indent=2, sort_keys=False) + "\n").encode()
