"""Loom's Bazel rules, built with the real Bazel (Debian's bazel-bootstrap 4.2.3, offline) as docs/bazel.md says.

One scenario, in order, over a copy of `bazel/` (the examples use it through
`local_repository(path = "..")` and `loom_register_toolchains()`): a fresh
build (kernel sets, a library, a release package and a command-program
product, each product's contents checked); a no-op rebuild that runs no
action; a change to one kernel set's source that reruns only that set's
actions; a clean rebuild against a BuildGrid remote cache that gives the same
bytes; and a second clean rebuild served wholly from that cache. What ran is
read from Bazel's execution log.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

pytestmark = pytest.mark.skipif(
    shutil.which("bazel") is None and not os.environ.get("CI"),
    reason="no bazel here (scripts/install-system-deps.sh installs Debian's bazel-bootstrap)",
)

# What a change to kernels/offset.loom reruns: the `scale` set and the release package that holds it.
SCALE_ACTIONS = {
    "Linking Loom sources of //kernels:scale",
    "Compiling //kernels:scale for amdgpu:gfx942",
    "Compiling //kernels:scale for spirv:vulkan1.3",
    "Packaging //:release",
}
# loom_command runs one `loom frontier` action per product folder: one per target, or one folder
# `<name>.frontier` without targets; with one source there is no link action. The kernel requests of
# a targeted product are compiled inside its action (-j 1), not as Bazel actions. So
# //commands:frontier (one target) and //commands:requests (none) are one action each.
COMMAND_PRODUCTS = {  # folder under bazel-bin/commands -> its action's progress message
    "frontier.spirv-vulkan1.3": "Building command product //commands:frontier for spirv:vulkan1.3",
    "requests.frontier": "Building command product //commands:requests",
}
# common, scale link, 2 x saxpy, 2 x scale, the package, the two command products
LOOM_ACTIONS = 9

# What both command products hold: run.trace is true, so the traced launch is live. One requirement
# per live kernel class (the two launches of @classified select different templates: two classes)
# plus the external entry, which has no request.
COMMAND_ENTRIES = [("local", 0), ("classified", 1), ("classified", 2), ("trace", 3), ("external", None)]
# The requirement of each dispatch of program-0.loomcmd, in order (`loom frontier --print`).
COMMAND_DISPATCHES = [0, 1, 2, 3, 0, 4]

BUILDGRID_CONFIG = """\
server:
  - !channel
    address: "127.0.0.1:{port}"
    insecure-mode: true
storages:
  - !lru-storage &cas
    size: 256MB
caches:
  - !lru-action-cache &ac
    storage: *cas
    max-cached-refs: 4096
    allow-updates: true
    cache-failed-actions: false
instances:
  - name: ""
    services:
      - !action-cache
        cache: *ac
      - !cas
        storage: *cas
      - !bytestream
        storage: *cas
"""


class Bazel:
    """`bazel` in one workspace with a private output root; the server is shut down at the end."""

    def __init__(self, workspace: Path, root: Path) -> None:
        self.workspace = workspace
        self.startup = ["bazel", "--nohome_rc", f"--output_user_root={root}", "--max_idle_secs=300"]
        # The documented way to hand loom's environment to the actions: --action_env (here a
        # development checkout's PYTHONPATH, when the loom under test needs it).
        self.flags = ["--symlink_prefix=/", "--color=no", "--curses=no"]
        if os.environ.get("PYTHONPATH"):
            self.flags.append("--action_env=PYTHONPATH")

    def __call__(self, *args: str) -> str:
        proc = subprocess.run(self.startup + list(args), cwd=self.workspace, capture_output=True, text=True,
                              timeout=600)
        assert proc.returncode == 0, f"bazel {' '.join(args)} failed:\n{proc.stderr[-6000:]}"
        return proc.stdout

    def build(self, log: Path, *extra: str) -> list[dict]:
        """Builds //... and returns the spawns Bazel ran or fetched (its execution log)."""
        self("build", *self.flags, f"--execution_log_json_file={log}", *extra, "//...")
        return read_execution_log(log)


def read_execution_log(path: Path) -> list[dict]:
    """Bazel 4 writes the log as concatenated JSON objects, one per spawn."""
    text, decoder, spawns, at = path.read_text(), json.JSONDecoder(), [], 0
    while True:
        while at < len(text) and text[at].isspace():
            at += 1
        if at == len(text):
            return spawns
        spawn, at = decoder.raw_decode(text, at)
        spawns.append(spawn)


def loom_spawns(spawns: list[dict]) -> list[dict]:
    return [s for s in spawns if s.get("mnemonic", "").startswith("Loom")]


def outputs(bin_dir: Path) -> dict[str, str]:
    files = [p for folder in ("kernels", "lib", "commands") for p in (bin_dir / folder).rglob("*") if p.is_file()]
    files.append(bin_dir / "release-0.1.0.loompkg.tar.gz")
    return {str(p.relative_to(bin_dir)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(files)}


def check_command_product(folder: Path, target: str | None) -> None:
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
    printed = subprocess.run(["loom", "frontier", "--print", str(folder / "program-0.loomcmd")],
                             capture_output=True, text=True, check=True).stdout
    header = "program @run launch(%buf)" + (f" target={target}" if target else "")
    assert printed.splitlines()[0] == header
    dispatches = [line.split("requirement=")[1].split()[0] for line in printed.splitlines() if "dispatch" in line]
    assert dispatches == [str(n) for n in COMMAND_DISPATCHES]
    if target and shutil.which("spirv-val"):
        for n in requests:
            subprocess.run(["spirv-val", "--target-env", "vulkan1.3", str(folder / f"kernel-{n}.spv")], check=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def buildgrid(folder: Path) -> Iterator[str]:
    """`bgd server start` on 127.0.0.1 with an in-memory CAS, ActionCache and ByteStream."""
    port = free_port()
    config = folder / "bgd.yml"
    config.write_text(BUILDGRID_CONFIG.format(port=port))
    bgd = shutil.which("bgd") or str(Path(sys.executable).with_name("bgd"))
    with open(folder / "bgd.log", "wb") as log:
        server = subprocess.Popen([bgd, "server", "start", str(config)], stdout=log, stderr=subprocess.STDOUT)
    try:
        yield f"grpc://127.0.0.1:{port}"
    finally:
        server.terminate()
        try:
            server.wait(timeout=30)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def wait_for_port(url: str, log: Path, seconds: float = 120) -> None:
    port = int(url.rsplit(":", 1)[1])
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            return
        time.sleep(0.2)
    pytest.fail(f"BuildGrid did not listen on {url}:\n{log.read_text()[-3000:]}")


def test_bazel_examples_build_incrementally_and_share_a_remote_cache(tmp_path: Path) -> None:
    shutil.copytree(ROOT / "bazel", tmp_path / "bazel", ignore=shutil.ignore_patterns("bazel-*"))
    examples = tmp_path / "bazel" / "examples"
    bazel = Bazel(examples, tmp_path / "bazel-root")
    # The server starts while the first builds run (it takes seconds to come up).
    with buildgrid(tmp_path) as cache:
        try:
            # A fresh build: every output of every rule, real and consistent.
            first = bazel.build(tmp_path / "fresh.json")
            assert len(loom_spawns(first)) == LOOM_ACTIONS
            # loom_command: one frontier action per product, with declared inputs only (the source and
            # the loom wrapper) and the product folder as its one output.
            frontier = {s["progressMessage"]: s for s in first if s["mnemonic"] == "LoomFrontier"}
            assert sorted(frontier) == sorted(COMMAND_PRODUCTS.values())
            for folder, message in COMMAND_PRODUCTS.items():
                spawn = frontier[message]
                assert {i["path"] for i in spawn["inputs"]} == {"commands/frontier.loom", "external/loom_host/loom"}
                assert [o.rpartition("/bin/")[2] for o in spawn["listedOutputs"]] == [f"commands/{folder}"]
            bin_dir = Path(bazel("info", *bazel.flags, "bazel-bin").strip())
            built = outputs(bin_dir)
            for name in ("saxpy.amdgpu-gfx1100", "saxpy.spirv-vulkan1.3", "scale.amdgpu-gfx942",
                         "scale.spirv-vulkan1.3"):
                ext = "spv" if "spirv" in name else "hsaco"
                binary = (bin_dir / "kernels" / f"{name}.{ext}").read_bytes()
                manifest = json.loads((bin_dir / "kernels" / f"{name}.manifest.json").read_text())
                assert manifest["artifact"]["sha256"] == hashlib.sha256(binary).hexdigest()
                assert manifest["kernels"][0]["launch_config"] == f"{name}.launch.loombc"
                assert binary[:4] == (b"\x03\x02\x23\x07" if ext == "spv" else b"\x7fELF")
            # The config binding and the library reached the kernels: workgroup size 256, ceil_div(1000, 256) = 4.
            launch_config = bin_dir / "kernels" / "scale.spirv-vulkan1.3.launch.loombc"
            launch = subprocess.run(["loom", "launch-eval", str(launch_config), "@scale", "1000"],
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

            check_command_product(bin_dir / "commands" / "frontier.spirv-vulkan1.3", "spirv:vulkan1.3")
            check_command_product(bin_dir / "commands" / "requests.frontier", None)
            # The requests a target-independent product publishes are the ones the targeted one compiled.
            for n in (n for _, n in COMMAND_ENTRIES if n is not None):
                assert built[f"commands/requests.frontier/kernel-{n}.loombc"] == \
                    built[f"commands/frontier.spirv-vulkan1.3/kernel-{n}.loombc"]

            # A no-op rebuild runs no action.
            assert bazel.build(tmp_path / "noop.json") == []

            # Changing one kernel set's source reruns that set's actions only.
            source = examples / "kernels" / "offset.loom"
            original = source.read_text()
            source.write_text(original.replace("index.constant 64", "index.constant 32"))
            changed = bazel.build(tmp_path / "changed.json")
            assert {s["progressMessage"] for s in changed} == SCALE_ACTIONS
            assert len(changed) == len(SCALE_ACTIONS)
            source.write_text(original)

            # A clean rebuild against the remote cache gives the same bytes (and fills the cache).
            wait_for_port(cache, tmp_path / "bgd.log")
            bazel("clean")
            filled = bazel.build(tmp_path / "fill.json", f"--remote_cache={cache}")
            assert len(loom_spawns(filled)) == LOOM_ACTIONS
            assert outputs(bin_dir) == built

            # A second clean rebuild is served wholly from the remote cache.
            bazel("clean")
            served = loom_spawns(bazel.build(tmp_path / "served.json", f"--remote_cache={cache}"))
            assert len(served) == LOOM_ACTIONS
            assert all(s["remoteCacheHit"] and s["runner"] == "remote cache hit" for s in served), served
            assert outputs(bin_dir) == built
        finally:
            subprocess.run(bazel.startup + ["shutdown"], cwd=examples, capture_output=True, timeout=120)
