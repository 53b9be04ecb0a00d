"""open_store(url): the store is picked by URL, and bad URLs are named errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from retold import InvalidInputError, Principal, RecordDraft, SQLiteStore, open_store
from retold._open import is_postgres_url
from retold.cli import main


@pytest.mark.parametrize("form", ["plain", "sqlite-url"], ids=["path", "sqlite:///path"])
def test_sqlite_paths_and_urls_open_the_same_file(tmp_path: Path, form: str) -> None:
    """A file path and a sqlite:/// URL open a SQLiteStore on that file."""
    path = tmp_path / "m.db"
    url = str(path) if form == "plain" else f"sqlite://{path}"
    alice = Principal(tenant="acme", principal="alice")
    with open_store(url) as store:
        assert isinstance(store, SQLiteStore)
        store.add(alice, RecordDraft(text="tea"))
    with SQLiteStore(path) as again:
        assert [r.text for r in again.list_records(alice)] == ["tea"]


def test_sqlite_memory_url() -> None:
    """sqlite:///:memory: opens a throwaway in-memory store."""
    with open_store("sqlite:///:memory:") as store:
        assert isinstance(store, SQLiteStore) and store.path == ":memory:"


@pytest.mark.parametrize(
    ("url", "message"),
    [
        ("", "empty"),
        ("mysql://host/db", "unknown store URL scheme"),
        ("/no/such/dir/m.db", "does not exist"),
    ],
    ids=["empty", "unknown-scheme", "missing-dir"],
)
def test_bad_store_urls_name_the_db_field(url: str, message: str) -> None:
    """An empty URL, an unknown scheme or a missing directory is an error naming `db`."""
    with pytest.raises(InvalidInputError, match=message) as err:
        open_store(url)
    assert err.value.field == "db"


def test_must_exist_refuses_a_new_file(tmp_path: Path) -> None:
    """must_exist=True does not create a SQLite file."""
    with pytest.raises(InvalidInputError, match="no database"):
        open_store(tmp_path / "new.db", must_exist=True)
    assert not (tmp_path / "new.db").exists()


def test_postgres_urls_are_recognised() -> None:
    """postgresql:// and postgres:// name PostgreSQL; paths and sqlite:// do not."""
    assert is_postgres_url("postgresql://u@h/db") and is_postgres_url("postgres://h/db")
    assert not is_postgres_url("sqlite:///x.db") and not is_postgres_url("x.db")


def test_cli_names_db_for_an_unknown_scheme(capsys: pytest.CaptureFixture[str]) -> None:
    """`retold memory add --db mysql://...` exits 2 naming --db and writes nothing."""
    code = main(["memory", "add", "--db", "mysql://h/d", "--tenant", "a", "--principal", "b", "x"])
    assert code == 2 and "db" in capsys.readouterr().err
