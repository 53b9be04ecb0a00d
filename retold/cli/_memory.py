"""``retold memory``: add, list, search and delete records, erase a principal, and vacuum
the store."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from .._copy import copy_store
from .._erasure import erase_principal
from .._errors import InvalidInputError, UsageError
from .._export import export_principal
from .._files import write_private
from .._records import Activation, LifecycleState, Principal, Record, RecordKind, scope_id
from .._retention import prune_transcript
from .._store import draft_from
from ._common import (
    add_cutoff,
    add_db,
    add_json,
    add_scope,
    add_tenant_scope,
    confirmed_cutoff,
    emit,
    emit_counts,
    open_store,
    scope_of,
)


def register(sub: Any) -> None:
    memory = sub.add_parser("memory", help="store, list and delete memory records")
    msub = memory.add_subparsers(dest="command", required=True, metavar="COMMAND")

    add = msub.add_parser("add", help="store one record (secrets are redacted first)")
    add_db(add)
    add_scope(add)
    add.add_argument(
        "--kind", default="fact", help=f"one of {', '.join(k.value for k in RecordKind)}"
    )
    add.add_argument("--speaker", help="who said it")
    add.add_argument("--event-time", help="ISO 8601 time of the event (UTC if no offset)")
    add.add_argument("--session", help="session id the record came from")
    add.add_argument("--tag", action="append", default=[], help="a tag (repeatable)")
    add.add_argument(
        "--idempotency-key",
        help="a key for this write: adding again with the same key stores nothing and "
        "returns the first record (safe retries)",
    )
    add_json(add)
    add.add_argument("text", help="the record text, or - to read it from stdin (UTF-8)")
    add.set_defaults(handler=_add)

    lst = msub.add_parser("list", help="list live records, newest first")
    add_db(lst)
    add_scope(lst)
    lst.add_argument("--all", action="store_true", help="include every lifecycle state")
    lst.add_argument("--limit", type=int)
    add_json(lst)
    lst.set_defaults(handler=_list)

    delete = msub.add_parser("delete", help="delete a record (its text is erased)")
    add_db(delete)
    add_scope(delete)
    add_json(delete)
    delete.add_argument("id", help="record id")
    delete.set_defaults(handler=_delete)

    erase = msub.add_parser(
        "erase",
        help="erase every stored copy of one principal's words: records, transcript text, "
        "profile snapshots, search and gap queries (then run vacuum)",
    )
    add_db(erase)
    add_scope(erase)
    erase.add_argument("--yes", action="store_true", help="confirm: the erasure cannot be undone")
    add_json(erase)
    erase.set_defaults(handler=_erase)

    export = msub.add_parser(
        "export",
        help="print everything stored about one principal as JSON: records, transcript, "
        "profile snapshots, reviews, audit and events (an access or portability request)",
    )
    add_db(export)
    add_scope(export)
    export.add_argument(
        "--out",
        help="write the JSON to this file instead (created with mode 0600, replaced whole)",
    )
    export.set_defaults(handler=_export)

    prune = msub.add_parser(
        "prune-transcript",
        help="blank the words of turns older than the cutoff in conversations that memory "
        "does not rely on (then run vacuum)",
    )
    add_db(prune)
    add_tenant_scope(prune, "sessions")
    add_cutoff(prune, "turns logged")
    add_json(prune)
    prune.set_defaults(handler=_prune_transcript)

    copy = msub.add_parser(
        "copy",
        help="copy the store's memory into another store that holds none yet (e.g. from "
        "the SQLite file to PostgreSQL): records, transcript, events, reviews, profiles, "
        "audit, vectors and fitness results, in one transaction",
    )
    add_db(copy)
    copy.add_argument(
        "--to",
        required=True,
        help="the destination: a SQLite file (created) or a postgresql:// URL",
    )
    add_tenant_scope(copy, "rows (fitness results only with --all-tenants)")
    add_json(copy)
    copy.set_defaults(handler=_copy)

    index = msub.add_parser(
        "index",
        help="bring every principal's derived indexes up to date ahead of traffic (names; "
        "vectors with the bundle's embedder): after a copy or an embedder change",
    )
    add_db(index)
    add_tenant_scope(index, "principals")
    index.add_argument(
        "--bundle",
        help="build the retriever this bundle serves with (local: its MiniLM vectors too); "
        "default: the name index only",
    )
    add_json(index)
    index.set_defaults(handler=_index)

    vacuum = msub.add_parser(
        "vacuum",
        help="remove the copies of deleted records' text the database files still hold "
        "(rewrites the lexical index on SQLite, VACUUM FULL on PostgreSQL: run it off peak)",
    )
    add_db(vacuum)
    add_json(vacuum)
    vacuum.set_defaults(handler=_vacuum)

    _register_search(msub)


def _line(record: Record) -> str:
    """One record: id, time, ``[kind, activation]`` (plus the lifecycle unless active, and
    what superseded it), text."""
    when = (record.event_time or record.created_at).strftime("%Y-%m-%d %H:%M")
    speaker = f"{record.speaker}: " if record.speaker else ""
    state = f"{record.kind.value}, {record.activation.value}"
    if record.lifecycle is not LifecycleState.ACTIVE:
        state += f", {record.lifecycle.value}"
    if record.superseded_by:
        state += f" by {record.superseded_by}"
    return f"{record.id}  [{when}] [{state}] {speaker}{record.text}"


def _read_text(arg: str) -> str:
    """The record text: the argument itself, or stdin when it is ``-``.

    Trailing newlines are dropped (as the shell's ``$(...)`` does), so ``echo`` and
    ``printf`` store the same text.
    """
    if arg != "-":
        return arg
    data = sys.stdin.buffer.read()
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InvalidInputError(
            "text", f"standard input is not valid UTF-8 (byte {exc.start})"
        ) from None
    return text.removeprefix("\ufeff").rstrip("\r\n")


def _add(args: argparse.Namespace) -> int:
    scope = scope_of(args)
    payload: dict[str, Any] = {
        "text": _read_text(args.text),
        "kind": args.kind,
        "tags": args.tag,
    }
    for field, value in (
        ("speaker", args.speaker),
        ("event_time", args.event_time),
        ("session_id", args.session),
        ("idempotency_key", args.idempotency_key),
    ):
        if value is not None:
            payload[field] = value
    if args.idempotency_key is not None and not args.idempotency_key.strip():
        raise InvalidInputError("idempotency_key", "must not be empty")
    draft = draft_from(payload)  # validated before the database is opened: bad input writes nothing
    with open_store(args) as store:
        # The principal's records before the write: to tell a retried key from a new record,
        # and to say when the same text is already stored.
        before = store.list_records(scope, lifecycle=None, include_expired=True)
        record = store.add(scope, draft, actor="cli")
        now = store.clock()
    created = all(r.id != record.id for r in before)
    same_text = [
        r.id for r in before if r.id != record.id and r.text == record.text and r.is_live(now)
    ]
    if args.json:
        emit({**record.model_dump(mode="json"), "created": created, "same_text_as": same_text})
    else:
        print(_line(record))
    if not created:
        print(
            f"retold: note: idempotency key already used; nothing written, {record.id} is the "
            "record it stored",
            file=sys.stderr,
        )
    elif same_text:
        print(
            f"retold: note: the same text is already stored as {', '.join(same_text)}; this is "
            "a second record (pass --idempotency-key to make a retried add store nothing)",
            file=sys.stderr,
        )
    if (
        created
        and record.kind is RecordKind.PREFERENCE
        and record.activation is Activation.CONDITIONAL
    ):
        print(
            "retold: note: stored as conditional memory (retrieved and admitted turn by turn); "
            "a preference joins the ambient profile only from the user's own chat turn, "
            "through activation or review (README: how a preference becomes ambient)",
            file=sys.stderr,
        )
    return 0


def _list(args: argparse.Namespace) -> int:
    scope = scope_of(args)
    if args.limit is not None and args.limit < 0:
        raise InvalidInputError("limit", "must be >= 0")
    with open_store(args, must_exist=True) as store:
        if args.all:
            records = store.list_records(
                scope, lifecycle=None, include_expired=True, limit=args.limit
            )
        else:
            records = store.list_records(scope, limit=args.limit)
    if args.json:
        emit({"records": [r.model_dump(mode="json") for r in records], "count": len(records)})
    else:
        for record in records:
            print(_line(record))
    return 0


def _delete(args: argparse.Namespace) -> int:
    scope = scope_of(args)
    with open_store(args, must_exist=True) as store:
        record = store.delete(scope, args.id, actor="cli")
    if args.json:
        emit(record.model_dump(mode="json"))
    else:
        print(f"deleted {record.id}")
    return 0


def _erase(args: argparse.Namespace) -> int:
    scope = scope_of(args)
    if not args.yes:
        raise UsageError(
            f"erasing {scope.tenant}/{scope.principal} cannot be undone: pass --yes to confirm"
        )
    with open_store(args, must_exist=True) as store:
        erasure = erase_principal(store, scope, actor="cli")
    emit_counts(args, erasure, f"erased {scope.tenant}/{scope.principal}")
    return 0


def _export(args: argparse.Namespace) -> int:
    scope = scope_of(args)
    with open_store(args, must_exist=True) as store:
        exported = export_principal(store, scope)
    text = exported.to_json() + "\n"
    if args.out is None:
        sys.stdout.write(text)
        return 0
    _write_private(Path(args.out), text)
    sizes = ", ".join(
        f"{name} {len(rows)}"
        for name, rows in exported.model_dump().items()
        if isinstance(rows, list)
    )
    print(f"exported {scope.tenant}/{scope.principal} to {args.out}: {sizes}")
    return 0


def _write_private(path: Path, text: str) -> None:
    """:func:`write_private` for ``--out``: a missing directory, a directory or a failed
    write is an error naming ``out``."""
    if not path.parent.is_dir():
        raise InvalidInputError("out", f"no directory {str(path.parent)!r}")
    if path.is_dir():
        raise InvalidInputError("out", f"{str(path)!r} is a directory")
    try:
        write_private(path, text)
    except OSError as exc:
        raise InvalidInputError("out", f"cannot write {str(path)!r}: {exc.strerror}") from None


def _prune_transcript(args: argparse.Namespace) -> int:
    before = confirmed_cutoff(args, "blanking the sessions last used")
    with open_store(args, must_exist=True) as store:
        pruned = prune_transcript(store, before, tenant=args.tenant)
    emit_counts(args, pruned, f"pruned the sessions last used before {before.isoformat()}")
    return 0


def _copy(args: argparse.Namespace) -> int:
    with open_store(args, must_exist=True) as source, open_store(args, field="to") as dest:
        copied = copy_store(source, dest, tenant=args.tenant)
    if args.json:
        emit(copied.model_dump(mode="json"))
        return 0
    print(f"copied to {args.to}: " + ", ".join(f"{t} {n}" for t, n in copied.counts.items()))
    print(
        "the destination builds its name index on each principal's first search "
        "(or now: retold memory index)"
    )
    return 0


def _index(args: argparse.Namespace) -> int:
    import anyio

    from .._retrieval import HybridRetriever

    tenant = None if args.tenant is None else scope_id("tenant", args.tenant)
    bundle = None
    if args.bundle is not None:
        from ..policy.reference import get_bundle

        bundle = get_bundle(args.bundle)
    with open_store(args, must_exist=True) as store:
        retriever = bundle.retriever(store) if bundle is not None else HybridRetriever(store)
        where, params = ("", []) if tenant is None else (" WHERE tenant = ?", [tenant])
        scopes = [
            Principal(tenant=r["tenant"], principal=r["principal"])
            for r in store.query(
                f"SELECT DISTINCT tenant, principal FROM records{where} ORDER BY tenant, principal",
                params,
            )
        ]
        read = embedded = 0
        for scope in scopes:
            names, vectors = anyio.run(retriever.prepare, scope)
            read, embedded = read + names, embedded + vectors
    model = retriever.embedder.model_id if retriever.embedder is not None else None
    if args.json:
        emit(
            {
                "principals": len(scopes),
                "names_read": read,
                "embedded": embedded,
                "embedder": model,
            }
        )
    else:
        print(
            f"indexed {len(scopes)} principals: name index read {read} records, "
            + (f"{embedded} records embedded ({model})" if model else "no embedder")
        )
    return 0


def _vacuum(args: argparse.Namespace) -> int:
    with open_store(args, must_exist=True) as store:
        store.vacuum()
        dialect = store.dialect
    if args.json:
        emit({"vacuumed": True, "dialect": dialect})
    else:
        print(
            "vacuumed: tables rewritten (VACUUM FULL); WAL segments keep deleted text until "
            "the server recycles them"
            if dialect == "postgresql"
            else "vacuumed: lexical index merged and WAL emptied; no copy of deleted text is "
            "left in the database files"
        )
    return 0


def _register_search(msub: Any) -> None:
    search = msub.add_parser(
        "search", help="retrieve and pack records for a query within a token budget"
    )
    add_db(search)
    add_scope(search)
    search.add_argument("--query", required=True, help="the search query")
    search.add_argument("--budget", type=int, required=True, help="token budget of the context")
    search.add_argument("--format", choices=["reader", "auditable"], default="reader")
    search.add_argument("--unit", default="cl100k_base", help="token counter unit")
    add_json(search)
    search.set_defaults(handler=_search)


def _search(args: argparse.Namespace) -> int:
    import anyio

    from .._packing import PackingConfig, pack
    from .._retrieval import HybridRetriever
    from .._tokens import token_counter

    scope = scope_of(args)
    if not args.query.strip():
        raise InvalidInputError("query", "must not be empty")
    if args.budget <= 0:
        raise InvalidInputError("budget", f"must be a positive number of tokens, not {args.budget}")
    counter = token_counter(args.unit)
    with open_store(args, must_exist=True) as store:
        retriever = HybridRetriever(store)
        result = anyio.run(lambda: retriever.search(scope, args.query))
        bundle = pack(
            result.candidates,
            budget=args.budget,
            counter=counter,
            config=PackingConfig(format=args.format),
        )
    if args.json:
        emit(
            {
                "context": bundle.text,
                **bundle.metadata(),
                "retrieval": retriever.config.model_dump(mode="json"),
            }
        )
    else:
        print(bundle.text)
        m = bundle.metrics
        flags = f" flags={','.join(bundle.flags)}" if bundle.flags else ""
        print(
            f"-- {m.records_included} records, {bundle.tokens_used}/{bundle.budget} "
            f"{bundle.unit} tokens ({m.utilization:.1%}), {m.records_excluded} excluded{flags}",
            file=sys.stderr,
        )
    return 0
