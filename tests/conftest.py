from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SAMPLES = ROOT / "samples"


@pytest.fixture
def samples_dir() -> Path:
    return SAMPLES


@pytest.fixture(autouse=True, scope="session")
def _private_cache(tmp_path_factory: pytest.TempPathFactory) -> None:
    """Tests never touch the user's compile cache; they share one private folder."""
    import os

    os.environ.setdefault("LOOM_CACHE_DIR", str(tmp_path_factory.mktemp("loom-cache")))
