"""The recall tests rank as a plain install does: fused with the model the
package installs with, on both stores."""

from __future__ import annotations

from pathlib import Path

import pytest

from gateway.core.config import Config


@pytest.fixture
def config(database_url: str, checkmap_dir: Path) -> Config:
    return Config.from_env(
        {}, database_url=database_url, checkmaps=str(checkmap_dir), allow_insecure_issuers=True, sweep_interval=0.0
    )
