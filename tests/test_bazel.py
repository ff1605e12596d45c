"""Loom's Bazel rules, built with real Bazels as docs/bazel.md says: Debian's bazel-bootstrap 4.2.3
(the host's, WORKSPACE) and 7.7.1 (the chroot of scripts/setup-bazel.sh, bzlmod and WORKSPACE), offline.

One scenario, in order, over a copy of `bazel/` (tests/bazel_harness.py), on each Bazel: a fresh
build (kernel sets, a library, a release package and a command-program product, each product's
contents checked); a no-op rebuild that runs no action; a change to one kernel set's source that
reruns only that set's actions; a clean rebuild against a BuildGrid remote cache that gives the same
bytes; and a second clean rebuild served wholly from that cache. Then, on Bazel 7: the WORKSPACE form
gives the bytes of the bzlmod form, and so does a build with --incompatible_auto_exec_groups. What ran
is read from Bazel's execution log. Remote execution: tests/test_bazel_remote.py.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest
from bazel_harness import (
    DOWNLOAD_ALL,
    ROOT,
    Bazels,
    Workspace,
    action,
    loom_spawns,
    outputs,
    remote_cache,
    remote_cache_hit,
    wait_for_port,
)

# What a change to kernels/offset.loom reruns: the `scale` set and the release package that holds it.
SCALE_ACTIONS = {  # named by bazel_harness.action: mnemonic and first output
    "LoomLink kernels/_loom/scale/scale.loombc",
    "LoomCompile kernels/scale.amdgpu-gfx942.hsaco",
    "LoomCompile kernels/scale.spirv-vulkan1.3.launch.loombc",
    "LoomPackage release-0.1.0.loompkg.tar.gz",
}
# loom_command runs one `loom frontier` action per product folder: one per target, or one folder
# `<name>.frontier` without targets; with one source there is no link action. The kernel requests of
# a targeted product are compiled inside its action (-j 1), not as Bazel actions. So
# //commands:frontier (one target) and //commands:requests (none) are one action each.
COMMAND_PRODUCTS = ["frontier.spirv-vulkan1.3", "requests.frontier"]  # folders under bazel-bin/commands
# common, scale link, 2 x saxpy, 2 x scale, the package, the two command products
LOOM_ACTIONS = 9

# What both command products hold: run.trace is true, so the traced launch is live. One requirement
# per live kernel class (the two launches of @classified select different templates: two classes)
# plus the external entry, which has no request.
COMMAND_ENTRIES = [("local", 0), ("classified", 1), ("classified", 2), ("trace", 3), ("external", None)]
# The requirement of each dispatch of program-0.loomcmd, in order (`loom frontier --print`).
COMMAND_DISPATCHES = [0, 1, 2, 3, 0, 4]


def check_command_product(folder: Path, target: str | None, loom: Path) -> None:
    """The frontier outputs of a //commands product: command bytes, manifest, requests and, with a
    target, the compiled kernels."""
    requests = [n for _, n in COMMAND_ENTRIES if n is not None]
    suffixes = (".loombc", ".spv", ".launch.loombc", ".manifest.json") if target else (".loombc",)
    expected = {"frontier.commands.json", "program-0.loomcmd"} | {
        f"kernel-{n}{suffix}" for n in requests for suffix in suffixes}
    assert {p.name for p in folder.iterdir()} == expected
    manifest = json.loads((folder / "frontier.commands.json").read_text())
    assert (manifest["format"], manifest["target"]) == ("loom-command-set", target)
    [program] = manifest["programs"]
    command = (folder / "program-0.loomcmd").read_bytes()
    assert (program["symbol"], program["artifact"]) == ("run", "program-0.loomcmd")
    assert (program["byte_length"], program["sha256"]) == (len(command), hashlib.sha256(command).hexdigest())
    assert program["entry_requirements"] == list(range(len(COMMAND_ENTRIES)))
    for entry, (symbol, n) in zip(manifest["entries"], COMMAND_ENTRIES, strict=True):
        if n is None:
            assert entry == {"symbol": symbol}
        elif target is None:
            assert entry == {"symbol": symbol, "source_request": f"kernel-{n}.loombc"}
        else:
            assert entry == {"symbol": symbol, "export": symbol, "source_request": f"kernel-{n}.loombc",
                             "artifact": f"kernel-{n}.spv", "launch_config": f"kernel-{n}.launch.loombc"}
            binary = (folder / f"kernel-{n}.spv").read_bytes()
            kernel = json.loads((folder / f"kernel-{n}.manifest.json").read_text())
            assert kernel["artifact"]["sha256"] == hashlib.sha256(binary).hexdigest()
            assert [k["export"] for k in kernel["kernels"]] == [symbol]
    # The command bytes decode: one dispatch per launch that survived folding, bound to its requirement.
    printed = subprocess.run([str(loom), "frontier", "--print", str(folder / "program-0.loomcmd")],
                             capture_output=True, text=True, check=True).stdout
    header = "program @run launch(%buf)" + (f" target={target}" if target else "")
    assert printed.splitlines()[0] == header
    dispatches = [line.split("requirement=")[1].split()[0] for line in printed.splitlines() if "dispatch" in line]
    assert dispatches == [str(n) for n in COMMAND_DISPATCHES]
    if target and shutil.which("spirv-val"):
        for n in requests:
            subprocess.run(["spirv-val", "--target-env", "vulkan1.3", str(folder / f"kernel-{n}.spv")], check=True)



def check_examples(bin_dir: Path, loom: Path) -> dict[str, str]:
    """Every output of a build of the examples, real and consistent; returns their digests."""
    built = outputs(bin_dir)
    for name in ("saxpy.amdgpu-gfx1100", "saxpy.spirv-vulkan1.3", "scale.amdgpu-gfx942", "scale.spirv-vulkan1.3"):
        ext = "spv" if "spirv" in name else "hsaco"
        binary = (bin_dir / "kernels" / f"{name}.{ext}").read_bytes()
        manifest = json.loads((bin_dir / "kernels" / f"{name}.manifest.json").read_text())
        assert manifest["artifact"]["sha256"] == hashlib.sha256(binary).hexdigest()
        assert manifest["kernels"][0]["launch_config"] == f"{name}.launch.loombc"
        assert binary[:4] == (b"\x03\x02\x23\x07" if ext == "spv" else b"\x7fELF")
    # The config binding and the library reached the kernels: workgroup size 256, ceil_div(1000, 256) = 4.
    launch_config = bin_dir / "kernels" / "scale.spirv-vulkan1.3.launch.loombc"
    launch = subprocess.run([str(loom), "launch-eval", str(launch_config), "@scale", "1000"],
                            capture_output=True, text=True, check=True)
    assert "workgroups=4x1x1 workgroup_size=256x1x1" in launch.stdout
    # The release package: loom build --package of loom.toml, every artifact listed with its sha256.
    with tarfile.open(bin_dir / "release-0.1.0.loompkg.tar.gz") as package:
        index = json.load(package.extractfile("package.json"))
        assert (index["name"], index["version"]) == ("examples", "0.1.0")
        listed = {a["path"]: a["sha256"] for a in index["artifacts"]}
        assert listed["spirv-vulkan1.3/saxpy.spv"] == hashlib.sha256(
            package.extractfile("spirv-vulkan1.3/saxpy.spv").read()).hexdigest()
        # Bazel's own saxpy for that target is the same program: the same bytes.
        assert listed["spirv-vulkan1.3/saxpy.spv"] == built["kernels/saxpy.spirv-vulkan1.3.spv"]
    check_command_product(bin_dir / "commands" / "frontier.spirv-vulkan1.3", "spirv:vulkan1.3", loom)
    check_command_product(bin_dir / "commands" / "requests.frontier", None, loom)
    # The requests a target-independent product publishes are the ones the targeted one compiled.
    for n in (n for _, n in COMMAND_ENTRIES if n is not None):
        assert built[f"commands/requests.frontier/kernel-{n}.loombc"] == \
            built[f"commands/frontier.spirv-vulkan1.3/kernel-{n}.loombc"]
    return built


@pytest.mark.parametrize(("version", "form"), [("4.2.3", "workspace"), ("7.7.1", "bzlmod")])
def test_bazel_examples_build_incrementally_and_share_a_remote_cache(
        version: str, form: str, bazels: Bazels, loom_under_test: Path, tmp_path: Path) -> None:
    # The cache server starts while the first builds run (it takes seconds to come up).
    with Workspace(bazels[version], tmp_path, loom_under_test, form) as bazel, remote_cache(tmp_path) as cache:
        # A fresh build: every output of every rule, real and consistent.
        first = bazel.build(tmp_path / "fresh.json")
        assert len(loom_spawns(first)) == LOOM_ACTIONS
        # loom_command: one frontier action per product, with declared inputs only (the source and
        # the loom wrapper) and the product folder as its one output.
        frontier = {action(s): s for s in first if s["mnemonic"] == "LoomFrontier"}
        assert sorted(frontier) == [f"LoomFrontier commands/{folder}" for folder in COMMAND_PRODUCTS]
        for folder in COMMAND_PRODUCTS:
            spawn = frontier[f"LoomFrontier commands/{folder}"]
            [source, wrapper] = sorted(i["path"] for i in spawn["inputs"] if not i["path"].endswith(".params"))
            assert source == "commands/frontier.loom"
            assert re.fullmatch(r"external/[^/]*loom_host/loom", wrapper), wrapper
            assert [o.rpartition("/bin/")[2] for o in spawn["listedOutputs"]] == [f"commands/{folder}"]
        bin_dir = bazel.info("bazel-bin")
        built = check_examples(bin_dir, loom_under_test)

        # A no-op rebuild runs no action.
        assert bazel.build(tmp_path / "noop.json") == []

        # Changing one kernel set's source reruns that set's actions only.
        source = bazel.examples / "kernels" / "offset.loom"
        original = source.read_text()
        source.write_text(original.replace("index.constant 64", "index.constant 32"))
        changed = bazel.build(tmp_path / "changed.json")
        assert {action(s) for s in changed} == SCALE_ACTIONS
        assert len(changed) == len(SCALE_ACTIONS)
        source.write_text(original)

        # A clean rebuild against the remote cache gives the same bytes (and fills the cache).
        wait_for_port(int(cache.rsplit(":", 1)[1]), "BuildGrid", tmp_path / "bgd-cache.log")
        bazel.run("clean")
        filled = bazel.build(tmp_path / "fill.json", f"--remote_cache={cache}", DOWNLOAD_ALL)
        assert len(loom_spawns(filled)) == LOOM_ACTIONS
        assert outputs(bin_dir) == built

        # A second clean rebuild is served wholly from the remote cache.
        bazel.run("clean")
        served = loom_spawns(bazel.build(tmp_path / "served.json", f"--remote_cache={cache}", DOWNLOAD_ALL))
        assert len(served) == LOOM_ACTIONS
        assert all(remote_cache_hit(s) and s["runner"] == "remote cache hit" for s in served), served
        assert outputs(bin_dir) == built


def test_bazel7_workspace_and_auto_exec_groups_give_the_bzlmod_bytes(
        bazels: Bazels, loom_under_test: Path, tmp_path: Path) -> None:
    """The examples' WORKSPACE (Bazel 7.1's Starlark local_repository) builds on Bazel 7 as MODULE.bazel
    does, and the rules pass --incompatible_auto_exec_groups (their actions say they use no toolchain)."""
    bazel7 = bazels["7.7.1"]
    with Workspace(bazel7, tmp_path / "workspace", loom_under_test, "workspace") as bazel:
        spawns = bazel.build(tmp_path / "workspace.json")
        assert len(loom_spawns(spawns)) == LOOM_ACTIONS
        from_workspace = check_examples(bazel.info("bazel-bin"), loom_under_test)
    with Workspace(bazel7, tmp_path / "bzlmod", loom_under_test, "bzlmod") as bazel:
        spawns = bazel.build(tmp_path / "auto.json", "--incompatible_auto_exec_groups")
        assert len(loom_spawns(spawns)) == LOOM_ACTIONS
        assert outputs(bazel.info("bazel-bin")) == from_workspace


def test_docs_loom_package_example_is_the_one_the_examples_build() -> None:
    """docs/bazel.md's loom_package example is bazel/examples/BUILD, which the tests above build: its
    sources are labels of files the other packages export (a glob cannot reach into a folder that
    has a BUILD file of its own: it would match nothing there)."""
    docs = (ROOT / "docs" / "bazel.md").read_text()
    blocks = re.findall(r"```python\n(.*?)```", docs, re.S)
    [example] = [b for b in blocks if "loom_package(" in b]
    assert example == (ROOT / "bazel" / "examples" / "BUILD").read_text()
    assert "glob(" not in example
    for package in ("kernels", "lib"):
        assert 'exports_files(glob(["*.loom"]))' in (ROOT / "bazel" / "examples" / package / "BUILD").read_text()


@pytest.mark.parametrize(("version", "form"), [("4.2.3", "workspace"), ("7.7.1", "bzlmod")])
def test_loom_test_runs_check_cases_under_bazel_test(version: str, form: str, bazels: Bazels,
                                                     loom_under_test: Path, tmp_path: Path) -> None:
    """`bazel test //kernels:scale_test` (loom_test) runs scale.loom's check case with the library and
    the config binding of the `scale` set (without either the case cannot resolve), reports per
    sample in the test log, and fails when the case does."""
    with Workspace(bazels[version], tmp_path, loom_under_test, form) as bazel:
        passed = bazel.run("test", *bazel.flags, "--test_output=errors", "//kernels:scale_test")
        assert "//kernels:scale_test" in passed.stderr + passed.stdout
        log = bazel.info("bazel-testlogs") / "kernels" / "scale_test" / "test.log"
        text = log.read_text()
        for n in (1, 256, 1000):
            assert f"PASS @scale_case [n={n}]" in text, text
        assert "1 passed, 0 failed" in text, text

        source = bazel.examples / "kernels" / "scale.loom"
        wrong = source.read_text().replace("offset(0.0) step(1.5)", "offset(0.0) step(2.5)")
        assert wrong != source.read_text()
        source.write_text(wrong)
        failed = bazel.run("test", *bazel.flags, "--test_output=errors", "//kernels:scale_test", check=False)
        assert failed.returncode == 3, failed.stderr[-3000:]  # Bazel's "tests failed"
        text = log.read_text()
        assert "FAIL @scale_case" in text and "0 passed, 1 failed" in text, text
