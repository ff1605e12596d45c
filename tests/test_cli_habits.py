"""Command-line habits that carry over from clang and glslc (TOOLCHAIN.md
section 14): `-D`, `-Werror` and `-w`, `--version` with LLVM's version,
`-o -` in the target's format, shell completion. (A missing input's exit 1
is tested in test_cli.py.)"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent

CONFIGURED = """config.decl @g.size : %v: index where [pow2(%v)]

kernel.def export("k") @k(%n: index) {
  %one = index.constant 1 : index
  %size = config.get @g.size : index
  kernel.launch.config workgroups(%n, %one, %one) workgroup_size(%size, %one, %one) : index
} launch(%n: index) {
  kernel.return
}
"""

# Final template selection takes @any while @big stays unknown: warning LINK/008.
WARNS = """template.decl @pick(%n: index) -> (index)

template.def<@pick> priority(10) @big(%n: index) -> (index) where [ge(%n, 128)] {
  template.return %n : index
}

template.def<@pick> priority(1) @any(%n: index) -> (index) {
  template.return %n : index
}

kernel.def export("k") @k(%n: index) {
  %one = index.constant 1 : index
  kernel.launch.config workgroups(%one, %one, %one) workgroup_size(%one, %one, %one) : index
} launch(%n: index) where [range(%n, 64, 4096)] {
  %t = template.apply<@pick>(%n) : (index) -> (index)
  kernel.return
}
"""

WARNING = "k.loom:15:8: warning [LINK/008]: `@pick`: chose `@any`; `@big` stayed unknown"


def loom(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[bytes]:
    base = dict(os.environ, PYTHONPATH=str(ROOT), LOOM_SERVER="off")
    base.pop("LOOM_DEBUG", None)
    return subprocess.run([sys.executable, "-m", "loomcli", *args], cwd=cwd, capture_output=True,
                          env={**base, **(env or {})})


@pytest.mark.parametrize("argv", [
    ["compile", "k.loom", "--target", "spirv:vulkan1.3", "-o", "-"],
    ["compile", "k.loom", "-o", "-", "--format", "loom-text"],
    ["link", "k.loom", "-o", "-"],
    ["launch-eval", "k.loom", "@k", "100", "--target", "spirv:vulkan1.3"],
])
def test_dash_d_is_config(tmp_path: Path, argv: list[str]) -> None:
    (tmp_path / "k.loom").write_text(CONFIGURED)
    spelled = [loom(*argv, *flag, cwd=tmp_path) for flag in (["--config", "g.size=64"], ["-D", "g.size=64"],
                                                              ["-Dg.size=64"])]
    assert spelled[0].returncode == 0, spelled[0].stderr.decode()
    assert all((r.returncode, r.stdout) == (0, spelled[0].stdout) for r in spelled)
    bad = loom(*argv, "-D", "g.size=63", cwd=tmp_path)
    assert bad.returncode == 1
    assert b"error [CONFIG/002]: `@g.size` = 63 violates pow2(@g.size)" in bad.stderr


@pytest.mark.parametrize(("flags", "code", "written", "stderr"), [
    ([], 0, True, WARNING),
    (["-Werror"], 1, False, WARNING.replace("warning [", "error [")),
    (["-w"], 0, True, ""),
])
def test_werror_and_w(tmp_path: Path, flags: list[str], code: int, written: bool, stderr: str) -> None:
    (tmp_path / "k.loom").write_text(WARNS)
    r = loom("compile", "k.loom", "--target", "amdgpu:gfx1100", "-o", "k.hsaco", "-MD", *flags, cwd=tmp_path)
    assert r.returncode == code
    assert (r.stderr.decode().splitlines() or [""])[0] == stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == (["k.d", "k.hsaco", "k.loom"] if written else ["k.loom"])


# One project built again and again with one cache: (flags, exit code, the first line of stderr,
# how the set's item ended, whether its code object is there after).
BUILDS = [
    (["-Werror"], 1, WARNING.replace("warning [", "error ["), "1 failed", False),  # compiled; the outcome cached
    ([], 0, WARNING, "1 cached", True),              # a cache hit says what the compile said
    ([], 0, "", "1 up to date", True),               # as make: an up-to-date item says nothing again
    (["-Werror"], 1, WARNING.replace("warning [", "error ["), "1 failed", True),  # its warnings are errors now
    (["--no-cache"], 0, WARNING, "1 compiled", True),
    (["-w", "--out-dir", "other"], 0, "", "1 cached", True),  # a fresh out-dir, from the cache, quietly
]


def test_build_says_each_items_warnings_and_werror_fails_it_whatever_the_cache_holds(tmp_path: Path) -> None:
    """`loom build` reports an item's warnings whether it compiled or came from the cache (as `loom
    compile` does), and -Werror fails an item with warnings, counted as failed, even one an earlier
    build left up to date."""
    (tmp_path / "k").mkdir()
    (tmp_path / "k" / "k.loom").write_text(WARNS)
    (tmp_path / "loom.toml").write_text('[project]\nname = "w"\nversion = "1.0"\n\n[build]\ntargets = '
                                        '["spirv:vulkan1.3"]\n\n[[kernels]]\nname = "s"\nsrcs = ["k/*.loom"]\n')
    env = {"LOOM_CACHE_DIR": str(tmp_path / "cache")}
    for flags, code, first, ended, written in BUILDS:
        r = loom("build", *flags, ".", cwd=tmp_path, env=env)
        stderr = r.stderr.decode()
        assert r.returncode == code, (flags, stderr)
        assert (stderr.splitlines() or [""])[0].replace("k/k.loom", "k.loom") == first, (flags, stderr)
        summary = r.stdout.decode().splitlines()[-1]  # `...: 0 compiled, 1 cached, 0 up to date, 0 failed in 0.01s`
        counts = {name: n for n, name in (part.split(" ", 1) for part in
                                          summary.split(" target: ")[1].split(" in ")[0].split(", "))}
        assert {name: n for name, n in counts.items() if n != "0"} == dict([ended.split(" ", 1)[::-1]]), summary
        out = tmp_path / "other" if "other" in flags else tmp_path / "build" / "loom"
        assert (out / "spirv-vulkan1.3" / "s.spv").exists() == written, flags


def test_version_names_llvm_without_loading_it(tmp_path: Path) -> None:
    import llvmlite
    import llvmlite.binding

    llvm = ".".join(map(str, llvmlite.binding.llvm_version_info))
    env = {"LOOM_CACHE_DIR": str(tmp_path / "cache")}
    first = loom("--version", cwd=tmp_path, env=env)
    assert first.stdout.decode() == f"loom 0.1.0 (LLVM {llvm}, llvmlite {llvmlite.__version__})\n"
    # Recorded: the next runs read it (a wrong record is believed, which shows they do not ask again).
    record = tmp_path / "cache" / "llvm-version.json"
    data = json.loads(record.read_text())
    record.write_text(json.dumps({**data, "llvm": "1.2.3"}))
    obj = json.loads(loom("--version", "--json", cwd=tmp_path, env=env).stdout)
    assert (obj["name"], obj["llvm"], obj["llvmlite"]) == ("loom", "1.2.3", llvmlite.__version__)
    # A record of another llvmlite, or a damaged one, is asked again.
    for text in (json.dumps({"digest": "other", "llvm": "1.2.3"}), "{"):
        record.write_text(text)
        assert f"(LLVM {llvm}," in loom("--version", cwd=tmp_path, env=env).stdout.decode()
    # The cache off: nothing written.
    off = loom("--version", cwd=tmp_path, env={"LOOM_CACHE_DIR": str(tmp_path / "off"), "LOOM_CACHE": "0"})
    assert f"(LLVM {llvm}," in off.stdout.decode() and not (tmp_path / "off").exists()


def test_dash_o_dash_writes_the_targets_native_format(tmp_path: Path) -> None:
    (tmp_path / "k.loom").write_text(CONFIGURED)
    spv = loom("compile", "k.loom", "-D", "g.size=64", "--target", "spirv:vulkan1.3", "-o", "-", cwd=tmp_path)
    assert spv.returncode == 0 and spv.stdout[:4] == bytes.fromhex("03022307")  # the SPIR-V magic, little-endian
    hsaco = loom("compile", "k.loom", "-D", "g.size=64", "--target", "amdgpu:gfx1100", "-o", "-", cwd=tmp_path)
    assert hsaco.returncode == 0 and hsaco.stdout[:4] == b"\x7fELF"
    # `loom emit` too, its target recorded in the module or named with --target; the same bytes.
    assert loom("compile", "k.loom", "-D", "g.size=64", "--target", "spirv:vulkan1.3", "-o", "k.loombc",
                cwd=tmp_path).returncode == 0
    emitted = loom("emit", "k.loombc", "-o", "-", cwd=tmp_path)
    assert (emitted.returncode, emitted.stdout) == (0, spv.stdout)
    assert loom("compile", "k.loom", "-D", "g.size=64", "-o", "any.loombc", cwd=tmp_path).returncode == 0
    emitted = loom("emit", "any.loombc", "--target", "amdgpu:gfx1100", "-o", "-", cwd=tmp_path)
    assert (emitted.returncode, emitted.stdout[:4]) == (0, b"\x7fELF")
    unnamed = loom("emit", "any.loombc", "-o", "-", cwd=tmp_path)
    assert (unnamed.returncode, unnamed.stdout) == (2, b"")
    assert b"target-independent; name one with --target" in unnamed.stderr


@pytest.mark.parametrize(("shell", "head"), [
    ("bash", "_loom_completion() {"), ("zsh", "#compdef loom"), ("fish", "function _loom_completion;"),
])
def test_shell_completion_scripts(tmp_path: Path, shell: str, head: str) -> None:
    r = loom(cwd=tmp_path, env={"_LOOM_COMPLETE": f"{shell}_source"})
    assert r.returncode == 0 and r.stdout.decode().splitlines()[0] == head


@pytest.mark.parametrize(("words", "cword", "want"), [
    ("loom comp", "1", "plain,compile"),
    ("loom compile k.loom --tar", "3", "plain,--target"),
    ("loom test k.loom -", "3", "plain,-D"),
])
def test_completion_answers(tmp_path: Path, words: str, cword: str, want: str) -> None:
    r = loom(cwd=tmp_path, env={"_LOOM_COMPLETE": "bash_complete", "COMP_WORDS": words, "COMP_CWORD": cword})
    assert r.returncode == 0 and want in r.stdout.decode().splitlines()
