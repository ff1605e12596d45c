"""Every `loom frontier` output is the same bytes across runs, hash seeds, folders and input paths."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "frontier"


def _run(src: Path, out: Path, seed: str, cwd: Path, *extra: str) -> dict[str, bytes]:
    env = dict(os.environ, PYTHONPATH=str(ROOT), PYTHONHASHSEED=seed)
    r = subprocess.run([sys.executable, "-m", "loomcli", "frontier", str(src), "--target", "amdgpu:gfx1100",
                        "--out-dir", str(out), *extra], cwd=cwd, capture_output=True, env=env)
    assert r.returncode == 0, r.stderr.decode()
    return {p.name: p.read_bytes() for p in sorted(out.iterdir())}


def test_outputs_are_byte_identical(tmp_path: Path) -> None:
    for name, extra in (("shared.loom", ["--spec", "@second.steps=3"]), ("children.loom", ["--spec", "@main.n=2"])):
        first_dir, second_dir = tmp_path / name / "a" / "deep", tmp_path / name / "b"
        first_dir.mkdir(parents=True)
        second_dir.mkdir()
        shutil.copy(DATA / name, first_dir / name)
        shutil.copy(DATA / name, second_dir / name)
        runs = [
            _run(first_dir / name, tmp_path / f"o1-{name}", "0", tmp_path, *extra),
            _run(Path(name), tmp_path / f"o2-{name}", "12345", second_dir, *extra),
            _run(first_dir / name, tmp_path / f"o3-{name}", "random", first_dir, *extra),
        ]
        assert len(runs[0]) >= 3
        assert runs[0] == runs[1] == runs[2]
