from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from loomcli.check.vulkan import VulkanRunner
    from loomcli.diagnostics import Diagnostic

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"

# The Bazel tests' fixtures (bazels, loom_under_test, grid), loaded here so that their asserts are rewritten.
pytest_plugins = ["bazel_harness"]


def _hypothesis_profiles() -> None:
    """The suite's property tests are derandomized: every run tries the same
    examples, so a red run is reproducible and CI never turns red because a
    new random draw found an old bug. `HYPOTHESIS_PROFILE=explore` searches
    afresh (and longer) when hunting for bugs by hand."""
    import os

    from hypothesis import settings

    settings.register_profile("suite", derandomize=True, database=None)
    settings.register_profile("explore", max_examples=2000)
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "suite"))


_hypothesis_profiles()


@pytest.fixture
def samples_dir() -> Path:
    return SAMPLES


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Tests never touch the user's compile cache; they share one private folder."""
    import os

    os.environ.setdefault("LOOM_CACHE_DIR", str(tmp_path_factory.mktemp("loom-cache")))


@pytest.fixture(autouse=True, scope="session")
def _no_resident_server():
    """Tests run loom in their own process unless they ask for a server
    (LOOM_SERVER=off), and any server one of them starts (the CMake package
    starts one: LOOM_SERVER=auto) lives in a private folder, never the
    user's, and is stopped at the end."""
    import os
    import shutil
    import subprocess
    import sys
    import tempfile

    runtime = tempfile.mkdtemp(prefix="loom-rt-", dir="/tmp")  # short: a socket path has 108 bytes
    os.environ["XDG_RUNTIME_DIR"] = runtime
    os.environ["LOOM_SERVER"] = "off"
    yield
    env = dict(os.environ, PYTHONPATH=str(ROOT) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    subprocess.run([sys.executable, "-m", "loomcli", "server", "stop", "--all"], env=env, capture_output=True,
                   timeout=120)
    shutil.rmtree(runtime, ignore_errors=True)


class Collect:
    """A `loomcli.check.session.Reporter` that keeps what a test session reports."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.diags: list[Diagnostic] = []

    def line(self, text: str) -> None:
        self.lines.append(text)

    def diagnostics(self, diags: list[Diagnostic]) -> None:
        self.diags.extend(diags)


@pytest.fixture(scope="module")
def vulkan_runner() -> Iterator[VulkanRunner]:
    """One Vulkan device for a test module; skips, with the reason, where none opens."""
    from loomcli.check.vulkan import VulkanRunner, unavailable_reason

    reason = unavailable_reason()
    if reason is not None:
        pytest.skip(f"no Vulkan device: {reason}")
    r = VulkanRunner()
    yield r
    r.close()
