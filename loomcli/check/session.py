"""A `loom test` session: load files, compile and emit the kernels their
`check.case`s launch, run every case sample by sample on a Vulkan device,
the cpu device or the reference interpreter (LANGUAGE.md 13 and 17.32),
and time benchmarks.

The session writes through a `Reporter` (result lines to stdout,
diagnostics to stderr), so it is callable without the command line;
`loomcli.commands.test` is the shell around it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from loomcli.errors import EXIT_ENV, LoomError, UsageError
from loomcli.ir.ops import CHECK_BENCHMARK, CHECK_CASE, KERNEL_LAUNCH

if TYPE_CHECKING:
    from loomcli.check.cases import SampleResult
    from loomcli.check.cpu import CpuLauncher, CpuRunner
    from loomcli.check.interpreter import InterpreterLauncher
    from loomcli.check.launch import Program, Timing, VulkanLauncher
    from loomcli.check.vulkan import VulkanRunner
    from loomcli.diagnostics import Diagnostic
    from loomcli.ir.core import Module, Operation
    from loomcli.passes.instrument import KernelProbe
    from loomcli.targets.profiles import Profile


class Reporter(Protocol):
    def line(self, text: str) -> None:
        """One result line (PASS/FAIL/BENCH/SKIP), for stdout."""

    def diagnostics(self, diags: list[Diagnostic]) -> None:
        """Diagnostics, for stderr, after the lines written so far."""


def open_device(device: str, target: str | None = None) -> VulkanRunner | CpuRunner | None:
    """The Vulkan runner, or the cpu device's for `cpu`; None (the
    interpreter) when `auto` finds no usable Vulkan device."""
    from loomcli.check.vulkan import VulkanRunner, VulkanUnavailable

    if device == "cpu":
        from loomcli.check.cpu import CpuRunner

        runner = CpuRunner(cpu_profile(target))
        runner.start()   # the worker warms up while the files compile
        return runner
    try:
        return VulkanRunner()
    except VulkanUnavailable:
        if device == "auto":
            return None
        raise


def interpreter_profile(target: str | None) -> Profile:
    """17.32: the reference profile unless `--target` names one."""
    from loomcli.targets.profiles import REFERENCE, parse_target

    return REFERENCE if target is None else parse_target(target)


def cpu_profile(target: str | None) -> Profile:
    from loomcli.targets.profiles import CPU_HOSTS, parse_target

    profile = parse_target(target or f"cpu:{CPU_HOSTS[0]}")
    if profile.family != "cpu":
        raise UsageError(f"loom test --device cpu runs cpu targets; --target {target} is not a cpu:HOST target")
    return profile


def vulkan_profile(target: str | None, runner: VulkanRunner) -> Profile:
    from loomcli.targets.profiles import VULKAN_ENVS, parse_target

    profile = parse_target(target or f"spirv:{runner.info.vulkan_env}")
    if profile.spirv_version is None:
        raise UsageError(f"loom test runs SPIR-V on Vulkan; --target {target} is not a spirv:vulkan1.x target")
    if VULKAN_ENVS.index(profile.selector) > VULKAN_ENVS.index(runner.info.vulkan_env):
        raise LoomError(f"--target {profile.name} needs Vulkan {profile.selector[len('vulkan'):]}; "
                        f"{runner.info.describe()} runs {runner.info.vulkan_env}", EXIT_ENV)
    return profile


@dataclass(frozen=True)
class Linking:
    """What every tested file is linked and bound with (TOOLCHAIN.md 13):
    its declarations resolve to `libraries`; `config` and `config_files`
    bind its keys. Diagnostics point into the files themselves."""

    libraries: tuple[str, ...] = ()
    config: tuple[str, ...] = ()
    config_files: tuple[str, ...] = ()
    project_config: dict[str, Any] | None = None   # a [[test]] set's config over the project's [config]
    project_file: str = "loom.toml"                # where it is written, as shown
    project_lines: dict[str, int] | None = None    # the line of each of its keys there


@dataclass
class FileCases:
    path: str
    module: Module
    cases: list[Operation]
    failed_cases: set[str] = field(default_factory=set)
    program: Program | None = None      # None: the cases launch no kernel; else instrumented (17.37)
    interpreter: InterpreterLauncher | None = None     # --device interpreter: the compiled kernels
    benchmarked: bool = False           # some selected benchmark times this file's kernels
    plain: Module | None = None         # the compiled kernels before instrumentation, for benchmarks
    bench_program: Program | None = None    # `plain`, emitted when the first benchmark runs


class Session:
    """One `loom test` run: compiles, runs and reports every file's cases."""

    def __init__(self, runner: VulkanRunner | CpuRunner | None, profile: Profile, reporter: Reporter, quiet: bool,
                 max_steps: int | None = None, linking: Linking | None = None) -> None:
        self.linking = linking or Linking()
        self.runner = runner
        self.max_steps = max_steps  # the interpreter's step budget per launch (None: its default)
        self.profile = profile
        self.reporter = reporter
        self.quiet = quiet
        self.loaded: list[FileCases] = []   # the files of the last run, for inspection
        self.passed = 0
        self.failed = 0
        self.errors = 0

    def run(self, paths: tuple[str, ...], case_names: list[str], bench: str | None) -> None:
        from loomcli.diagnostics import CompileError
        from loomcli.frontend import display_path, load_module

        self.loaded = loaded = []
        for path in paths:
            try:
                module = load_module(path)
            except CompileError as e:
                self.reporter.diagnostics(e.diagnostics)
                self.errors += 1
                continue
            cases = [op for op in module.ops if op.opdef is CHECK_CASE
                     and (not case_names or op.attr("sym") in case_names)]
            loaded.append(FileCases(display_path(path), module, cases))
        found = {op.attr("sym") for f in loaded for op in f.cases}
        missing = [c for c in case_names if c not in found]
        if missing and not self.errors:
            raise UsageError(f"no check.case @{missing[0]} in {', '.join(paths)}")
        benches = self._benchmarks(loaded, bench)
        for f, _ in benches:
            f.benchmarked = True
        for f in loaded:
            self._run_file(f)
        for f, mark in benches:
            self._bench(f, mark)

    def _run_file(self, f: FileCases) -> None:
        from loomcli.check.cases import CaseRunner
        from loomcli.diagnostics import CompileError

        try:
            f.program = self._program(f)
        except CompileError as e:
            self.reporter.diagnostics(e.diagnostics)
            for case in f.cases:
                self._report(case.attr("sym"), "", False)
                f.failed_cases.add(case.attr("sym"))
            self.failed += len(f.cases)
            return
        runner = CaseRunner(f.module, self._launcher(f), path=f.path)
        for case in f.cases:
            ok = True
            for result in runner.run_case(case):
                ok &= result.passed
                self._report_sample(result)
            if ok:
                self.passed += 1
            else:
                self.failed += 1
                f.failed_cases.add(case.attr("sym"))

    def _launcher(self, f: FileCases, timings: list[Timing] | None = None
                  ) -> VulkanLauncher | CpuLauncher | InterpreterLauncher | None:
        from loomcli.check.launch import VulkanLauncher
        from loomcli.check.vulkan import VulkanRunner

        if self.runner is None:
            return f.interpreter
        program = f.program
        if timings is not None and f.plain is not None:
            # 17.38: benchmarks time the kernels as built, not instrumented.
            if f.bench_program is None:
                f.bench_program = self._emit(f.plain, {})
            program = f.bench_program
        if program is None:
            return None
        if isinstance(self.runner, VulkanRunner):
            return VulkanLauncher(self.runner, program, f.path, timings)
        from loomcli.check.cpu import CpuLauncher

        return CpuLauncher(self.runner, program, f.path, timings)

    def _program(self, f: FileCases) -> Program | None:
        """Compile and emit the kernels `f`'s cases launch (None if they launch none)."""
        from loomcli.service.front import CompileOptions, compile_module

        roots = sorted({"@" + op.attr("callee") for case in f.cases for op in case.regions[0].walk_ops()
                        if op.opdef is KERNEL_LAUNCH})
        if not roots:
            return None
        compiled = compile_module(CompileOptions(
            input=f.path, libraries=self.linking.libraries, config=self.linking.config,
            config_files=self.linking.config_files,
            project_config=self.linking.project_config, project_path=self.linking.project_file,
            project_lines=self.linking.project_lines, profile=self.profile, roots=roots, for_execution=True))
        self.reporter.diagnostics(compiled.warnings)
        if self.runner is None:
            from loomcli.check.interpreter import DEFAULT_MAX_STEPS, InterpreterLauncher

            f.interpreter = InterpreterLauncher(compiled.module, self.profile, f.path,
                                                self.max_steps or DEFAULT_MAX_STEPS)
            return None
        from loomcli.ir.clone import clone_module
        from loomcli.passes.instrument import instrument

        if f.benchmarked:
            f.plain = clone_module(compiled.module)
        probes = instrument(compiled.module, self.profile)   # a test build only (17.37)
        return self._emit(compiled.module, probes)

    def _emit(self, module: Module, probes: dict[str, KernelProbe]) -> Program:
        from loomcli.check.launch import Program
        from loomcli.emit import backend_for
        from loomcli.emit.artifacts import emit

        # The gateway: TARGET checks run here. SPIR-V words for Vulkan, an object for the cpu device.
        artifact = emit(module, self.profile, backend_for(self.profile).native_format)
        return Program.build(module, self.profile, artifact.data, artifact.kernels, target_checked=True,
                             probes=probes)

    def _report_sample(self, result: SampleResult) -> None:
        self._report(result.case, result.sample.label(), result.passed, result.diagnostics)

    def _report(self, case: str, label: str, passed: bool, diagnostics: list[Diagnostic] | None = None) -> None:
        line = f"{'PASS' if passed else 'FAIL'} @{case}" + (f" {label}" if label else "")
        if not passed or not self.quiet:
            self.reporter.line(line)
        if diagnostics:
            self.reporter.diagnostics(diagnostics)

    # -------------------------------------------------------------- benchmarks

    def _benchmarks(self, loaded: list[FileCases], bench: str | None) -> list[tuple[FileCases, Operation]]:
        if bench is None:
            return []
        out = []
        for f in loaded:
            selected = {op.attr("sym") for op in f.cases}
            for op in f.module.ops:
                if op.opdef is CHECK_BENCHMARK and (not bench or op.attr("sym") == bench) \
                        and op.attr("case") in selected:
                    out.append((f, op))
        if bench and not out and not self.errors:
            raise UsageError(f"no check.benchmark @{bench} for the cases run")
        return out

    def _bench(self, f: FileCases, mark: Operation) -> None:
        from loomcli.check.cases import CaseRunner, samples

        name, case_name = mark.attr("sym"), mark.attr("case")
        if case_name in f.failed_cases:
            self.reporter.line(f"SKIP @{name} (@{case_name} failed)")
            return
        if f.program is None and f.interpreter is None:
            self.reporter.line(f"SKIP @{name} (@{case_name} launches no kernel)")
            return
        if self.runner is None:
            self.reporter.line(f"SKIP @{name} (the interpreter does not time benchmarks)")
            return
        case = f.module.symbols()[case_name]
        selection = dict(mark.attr("dict", None) or {})
        for sample in [s for s in samples(case) if s.matches(selection)]:
            timings: list[Timing] = []
            CaseRunner(f.module, self._launcher(f, timings), path=f.path).run_sample(case, sample)
            label = f" {sample.label()}" if sample.params else ""
            for t in timings:
                self.reporter.line(f"BENCH @{name}{label} @{t.callee}: median {_time(t.median_ns)} "
                           f"(min {_time(min(t.times))}, {len(t.times)} runs)")


def _time(ns: float) -> str:
    if ns >= 1e6:
        return f"{ns / 1e6:.3g} ms"
    if ns >= 1e3:
        return f"{ns / 1e3:.3g} us"
    return f"{ns:.3g} ns"
