"""``retold review list|resolve`` and ``retold profile show``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from retold import (
    ActivationPolicy,
    OfflineActivationClassifier,
    Principal,
    ProfileAssembler,
    RecordDraft,
    RecordKind,
    ReviewQueue,
    Role,
    SQLiteStore,
    TranscriptTurn,
    WriteOrigin,
)
from retold.cli import main

ALICE = Principal(tenant="acme", principal="alice")
SCOPE = ["--tenant", "acme", "--principal", "alice"]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def seed(db: Path, said: str, text: str) -> str:
    """Store one user turn and a matching record, evaluate it offline; returns the record id."""
    with SQLiteStore(db) as store:
        index = store.next_turn_index(ALICE, "s1")
        turn = TranscriptTurn(
            session_id="s1", turn_index=index, role=Role.USER, text=said, time=store.clock()
        )
        store.add_turn(ALICE, turn)
        draft = RecordDraft(text=text, kind=RecordKind.PREFERENCE, session_id="s1")
        rec = store.add(ALICE, draft, origin=WriteOrigin.EXTRACTION)
        ActivationPolicy(store, OfflineActivationClassifier()).evaluate_sync(ALICE, rec.id)
        return rec.id


def listed(capsys: pytest.CaptureFixture[str], db: Path, *extra: str) -> dict[str, Any]:
    if "--tenant" not in extra and "--all-tenants" not in extra:
        extra = ("--tenant", "acme", *extra)
    code, out, _ = run(capsys, "review", "list", "--db", str(db), "--json", *extra)
    assert code == 0
    data: dict[str, Any] = json.loads(out)
    return data


def test_list_shows_pending_items_and_backlog(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A hedged preference is queued; list prints it with the §2.1 fields and the backlog."""
    db = tmp_path / "r.db"
    rid = seed(db, "Maybe shorter answers would be nice sometimes.", "Shorter answers nice")
    data = listed(capsys, db, "--tenant", "acme")
    assert data["count"] == 1 and data["backlog"]["pending"] == 1
    item = data["items"][0]
    assert item["record_id"] == rid and item["status"] == "pending"
    assert item["evidence"] == {"session_id": "s1", "turn_index": 0}
    for field in ("proposed_decision", "reason", "policy_version", "prompt_version"):
        assert field in item
    assert item["confidence"] == 0.5 and item["created_at"]
    assert listed(capsys, db, "--tenant", "other")["count"] == 0
    code, out, _ = run(capsys, "review", "list", "--db", str(db), "--all-tenants")
    assert code == 0 and item["id"] in out and "backlog: 1 pending" in out


def test_resolve_promote_then_profile_show(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Resolving with promote makes the record ambient; profile show then includes it."""
    db = tmp_path / "r.db"
    rid = seed(db, "Maybe shorter answers would be nice sometimes.", "Shorter answers nice")
    review_id = listed(capsys, db)["items"][0]["id"]
    code, out, _ = run(
        capsys,
        "review",
        "resolve",
        "--db",
        str(db),
        "--tenant",
        "acme",
        review_id,
        "--decision",
        "promote",
        "--reviewer",
        "ops",
        "--note",
        "confirmed with user",
        "--json",
    )
    assert code == 0
    item = json.loads(out)
    assert item["resolution"] == "promote" and item["applied"] is True
    assert item["category"] == "answer_style" and item["reviewer"] == "ops"
    assert listed(capsys, db)["backlog"]["pending"] == 0
    code, out, _ = run(capsys, "profile", "show", "--db", str(db), *SCOPE, "--json")
    profile = json.loads(out)
    assert code == 0 and profile["record_ids"] == [rid] and profile["snapshot"] is False
    code, out, _ = run(capsys, "profile", "show", "--db", str(db), *SCOPE)
    assert code == 0 and "Shorter answers nice" in out and "1/8 records" in out


def test_resolve_errors_are_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Unknown ids, a second resolution and a promotion without a category exit 2 with a message."""
    db = tmp_path / "r.db"
    seed(db, "Maybe shorter answers would be nice sometimes.", "Shorter answers nice")
    review_id = listed(capsys, db)["items"][0]["id"]
    base = ["review", "resolve", "--db", str(db), "--tenant", "acme"]
    code, _, err = run(capsys, *base, "nope", "--decision", "reject", "--reviewer", "ops")
    assert code == 2 and err.startswith("retold: error:") and err.count("\n") == 1
    code, out, _ = run(capsys, *base, review_id, "--decision", "reject", "--reviewer", "ops")
    assert code == 0 and "resolved=reject" in out
    code, _, err = run(capsys, *base, review_id, "--decision", "promote", "--reviewer", "ops")
    assert code == 2 and "already resolved" in err
    with pytest.raises(SystemExit):
        main([*base, review_id, "--decision", "ambient", "--reviewer", "ops"])
    with pytest.raises(SystemExit):
        main([*base, review_id, "--decision", "promote", "--reviewer", "ops", "--category", "x"])
    capsys.readouterr()


def test_resolve_not_applied_exits_1(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Promoting a record deleted meanwhile is recorded but not applied, and says so."""
    db = tmp_path / "r.db"
    rid = seed(db, "Maybe shorter answers would be nice sometimes.", "Shorter answers nice")
    with SQLiteStore(db) as store:
        store.delete(ALICE, rid)
    review_id = listed(capsys, db)["items"][0]["id"]
    code, out, _ = run(
        capsys,
        "review",
        "resolve",
        "--db",
        str(db),
        "--tenant",
        "acme",
        review_id,
        "--decision",
        "promote",
        "--reviewer",
        "ops",
    )
    assert code == 1 and "not applied: not_active" in out


def test_profile_show_session_reads_the_snapshot(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --session it prints the stored snapshot, and never starts a session itself."""
    db = tmp_path / "p.db"
    seed(db, "Always answer me concisely.", "Prefers concise answers")
    args = ["profile", "show", "--db", str(db), *SCOPE, "--session", "sess-9", "--json"]
    code, out, _ = run(capsys, *args)
    assert code == 0 and json.loads(out)["snapshot"] is False
    with SQLiteStore(db) as store:
        assert ProfileAssembler(store).snapshot(ALICE, "sess-9") is None
        expected = ProfileAssembler(store).for_session(ALICE, "sess-9")
    code, out, _ = run(capsys, *args)
    shown = json.loads(out)
    assert shown["snapshot"] is True and shown["text"] == expected.text
    assert shown["session_id"] == "sess-9"
    code, _, err = run(capsys, "profile", "show", "--db", str(tmp_path / "none.db"), *SCOPE)
    assert code == 2 and "no database" in err


@pytest.mark.parametrize("argv", [["review", "list"], ["decisions", "report"]])
def test_operator_views_need_tenant_or_all_tenants(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], argv: list[str]
) -> None:
    """`review list` and `decisions report` without --tenant or --all-tenants exit 2."""
    db = tmp_path / "r.db"
    seed(db, "Maybe shorter answers would be nice sometimes.", "Shorter answers nice")
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--db", str(db)])
    assert exc.value.code == 2
    assert "--all-tenants" in capsys.readouterr().err
    assert main([*argv, "--db", str(db), "--all-tenants", "--json"]) == 0
    capsys.readouterr()


def test_resolve_of_another_tenants_item_fails(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`review resolve` scoped to one tenant cannot see or promote another tenant's item."""
    db = tmp_path / "r.db"
    rid = seed(db, "Maybe shorter answers would be nice sometimes.", "Shorter answers nice")
    review_id = listed(capsys, db)["items"][0]["id"]
    base = ["review", "resolve", "--db", str(db), review_id, "--decision", "promote"]
    code, _, err = run(capsys, *base, "--reviewer", "ops", "--tenant", "evil")
    assert code == 2 and "no review item" in err
    with SQLiteStore(db) as store:
        assert ReviewQueue(store, tenant="evil").get(review_id) is None
        assert ReviewQueue(store, tenant="acme").get(review_id) is not None
        assert store.get(ALICE, rid).activation.value == "conditional"  # type: ignore[union-attr]
        assert ReviewQueue(store, tenant="evil").backlog().pending == 0
        assert ReviewQueue(store, tenant="evil").items() == []
