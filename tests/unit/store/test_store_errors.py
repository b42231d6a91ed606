"""Which PostgreSQL errors are the server's trouble (503, retry) and which
are bugs that must stay loud."""

from __future__ import annotations

import pytest

from gateway.store.postgres import _server_trouble


class _Err(Exception):
    def __init__(self, sqlstate: str) -> None:
        super().__init__(sqlstate)
        self.sqlstate = sqlstate


@pytest.mark.parametrize("sqlstate", ["53300", "53200", "57P01", "57014", "58030", "08006"])
def test_server_trouble_is_retryable(sqlstate: str) -> None:
    assert _server_trouble(_Err(sqlstate))


@pytest.mark.parametrize("sqlstate", ["25006", "42601", "23505", "40001", "22P02", ""])
def test_bugs_and_conflicts_are_not_server_trouble(sqlstate: str) -> None:
    assert not _server_trouble(_Err(sqlstate))
