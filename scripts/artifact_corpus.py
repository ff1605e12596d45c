#!/usr/bin/env python3
"""The bytes loom generates for a fixed corpus, as one sha256 per output.

Every sample, conformance kernel and valid corpus program is compiled for
four targets in every format loom writes (code objects, SPIR-V, PTX, LLVM IR,
assembly, compiled modules, launch configs, manifests), the frontier samples
are split into their requests, and the sample project is built. What each
command printed on failure is recorded too, so diagnostics are part of the
corpus. A refactor that must not change behaviour keeps the digest list
identical (`tests/test_artifact_corpus.py`).

    python3 scripts/artifact_corpus.py              # print the digests as JSON
    python3 scripts/artifact_corpus.py --write      # refresh tests/data/artifact_corpus.json

Every command runs in this process through the command line itself, so the
corpus holds whatever the command line produces, wherever the code behind
it lives. Bytes that come from LLVM depend on its version: the file records
the version it was made with, and a run under another LLVM compares only
the outputs LLVM does not make.
"""

from __future__ import annotations

import argparse
import contextlib
import hashlib
import io
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
GOLDEN = ROOT / "tests" / "data" / "artifact_corpus.json"
TARGETS = ("amdgpu:gfx1100", "amdgpu:gfx90a", "spirv:vulkan1.3", "nvptx:sm_90")


def inputs() -> list[Path]:
    """The kernel programs of the corpus, in a fixed order."""
    found = sorted((ROOT / "samples").glob("*.loom"))
    found += sorted((ROOT / "tests" / "conformance").glob("*.loom"))
    found += sorted((ROOT / "tests" / "corpus" / "valid").glob("*.loom"))
    return found


def run(argv: list[str], cwd: Path) -> tuple[int, str]:
    """`loom ARGV` in this process: its exit code and what it printed to stderr."""
    from loomcli.cli import main

    err = io.StringIO()
    here = os.getcwd()
    os.chdir(cwd)
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            try:
                main(argv)
                code = 0
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 1
    finally:
        os.chdir(here)
    return code, err.getvalue()


def commands(source: Path, out: Path) -> Iterator[list[str]]:
    """The compiles of one program: every target with launch configs and
    manifests, LLVM IR and assembly of the LLVM targets, the compiled module."""
    src = str(source)
    targets = [a for t in TARGETS for a in ("--target", t)]
    yield ["compile", src, "--out-dir", str(out / "native"), *targets,
           "--emit-launch-config", str(out / "launch"), "--manifest", str(out / "manifest"), "--no-cache", "-j1"]
    for target in ("amdgpu:gfx1100", "nvptx:sm_90"):
        family = target.replace(":", "-")
        yield ["compile", src, "--target", target, "-o", str(out / f"{family}.ll"), "--no-cache"]
        yield ["compile", src, "--target", target, "-o", str(out / f"{family}.s"), "--no-cache"]
    yield ["compile", src, "-o", str(out / "module.loombc"), "--no-cache"]
    yield ["compile", src, "--target", "amdgpu:gfx1100", "-o", str(out / "amdgpu.loombc"), "--no-cache"]


def digest_tree(folder: Path, prefix: str, into: dict[str, str]) -> None:
    """Every output file under `folder` (not the build's state file, which holds paths and times)."""
    for path in sorted(p for p in folder.rglob("*") if p.is_file() and p.name != ".loom-build.json"):
        into[f"{prefix}/{path.relative_to(folder).as_posix()}"] = hashlib.sha256(path.read_bytes()).hexdigest()


def program_digests(source: Path, work: Path) -> dict[str, str]:
    """The digests of one program's compiles."""
    digests: dict[str, str] = {}
    name = source.relative_to(ROOT).as_posix()
    out = work / name
    out.mkdir(parents=True)
    for i, argv in enumerate(commands(source, out)):
        code, err = run(argv, ROOT)
        if code:
            # Diagnostics name the input by its path as given; make it relative.
            text = err.replace(str(ROOT) + "/", "").replace(str(out), "OUT")
            digests[f"{name}/failed-{i}"] = f"exit {code}: " + hashlib.sha256(text.encode()).hexdigest()
    digest_tree(out, name, digests)
    return digests


def frontier_and_project_digests(work: Path) -> dict[str, str]:
    digests: dict[str, str] = {}
    for program in ("frontier.loom", "frontier_config.loom"):
        out = work / "frontier" / program
        for target in ("amdgpu:gfx1100", "spirv:vulkan1.3"):
            code, _ = run(["frontier", str(ROOT / "samples" / program), "--target", target,
                           "--out-dir", str(out / target.replace(":", "-"))], ROOT)
            digests[f"frontier/{program}/{target}/exit"] = str(code)
        digest_tree(out, f"frontier/{program}", digests)
    project = work / "project"
    shutil.copytree(ROOT / "samples" / "project", project, ignore=shutil.ignore_patterns("build", "dist"))
    code, _ = run(["build", str(project), "-j1", "--no-cache", "--package", "-q"], ROOT)
    digests["project/exit"] = str(code)
    digest_tree(project / "build" / "loom", "project/build", digests)
    digest_tree(project / "dist", "project/dist", digests)
    return digests


def corpus(jobs: int) -> dict[str, str]:
    """name -> sha256 of every output (or of the diagnostics of a failed command).
    Programs are compiled `jobs` at a time, each in a forked process."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    digests: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="loom-corpus-") as tmp:
        work = Path(tmp)
        with ProcessPoolExecutor(jobs, mp_context=multiprocessing.get_context("fork")) as pool:
            parts = [pool.submit(program_digests, source, work) for source in inputs()]
            parts.append(pool.submit(frontier_and_project_digests, work))
            for part in parts:
                digests.update(part.result())
    return digests


def llvm_version() -> str:
    import llvmlite.binding as llvm

    return ".".join(map(str, llvm.llvm_version_info))


def llvm_independent(name: str) -> bool:
    """Do this output's bytes stay the same under another LLVM? SPIR-V,
    compiled modules and launch configs are loom's own; code objects, PTX,
    LLVM IR, assembly, and the manifests and packages that hash them are not."""
    return name.endswith((".spv", ".loombc", "/exit")) or "/failed-" in name


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {GOLDEN.relative_to(ROOT)}")
    parser.add_argument("-j", "--jobs", type=int, default=len(os.sched_getaffinity(0)), help="programs at once")
    args = parser.parse_args()
    os.environ["SOURCE_DATE_EPOCH"] = "1700000000"
    doc = {"llvm": llvm_version(), "digests": corpus(args.jobs)}
    text = json.dumps(doc, indent=1, sort_keys=True) + "\n"
    if args.write:
        GOLDEN.write_text(text)
        print(f"{len(doc['digests'])} digests -> {GOLDEN.relative_to(ROOT)}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
