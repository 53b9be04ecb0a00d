"""``retold review``: list and resolve the activation review queue."""

from __future__ import annotations

import argparse
from typing import Any

from .._activation_review import ReviewItem, ReviewQueue
from ._common import add_db, add_json, add_tenant_scope, emit, open_store


def register(sub: Any) -> None:
    review = sub.add_parser("review", help="list and resolve activation review items")
    rsub = review.add_subparsers(dest="command", required=True, metavar="COMMAND")

    lst = rsub.add_parser("list", help="list review items, oldest first, with the backlog")
    add_db(lst)
    add_tenant_scope(lst, "review items")
    lst.add_argument(
        "--status",
        choices=["pending", "resolved", "all"],
        default="pending",
        help="which items (default pending)",
    )
    add_json(lst)
    lst.set_defaults(handler=_list)

    resolve = rsub.add_parser("resolve", help="resolve one item as a trusted reviewer")
    add_db(resolve)
    resolve.add_argument("id", help="review item id")
    add_tenant_scope(resolve, "review items (the item must belong to it)")
    resolve.add_argument("--decision", required=True, choices=["promote", "conditional", "reject"])
    resolve.add_argument("--reviewer", required=True, help="who is resolving it")
    resolve.add_argument("--note", help="free-text note kept with the item (redacted)")
    resolve.add_argument(
        "--category",
        choices=["accessibility", "answer_style", "response_language"],
        help="the category to promote with (default: the proposed one)",
    )
    add_json(resolve)
    resolve.set_defaults(handler=_resolve)


def _line(item: ReviewItem) -> str:
    ev = f"{item.evidence.session_id}#{item.evidence.turn_index}" if item.evidence else "-"
    conf = f"{item.confidence:.2f}" if item.confidence is not None else "-"
    head = (
        f"{item.id}  {item.created_at:%Y-%m-%d %H:%M}  {item.tenant}/{item.principal}  "
        f"record={item.record_id}  evidence={ev}  proposed={item.proposed_decision or '-'}"
        f"/{item.proposed_category or '-'}  reason={item.reason}  confidence={conf}  "
        f"policy={item.policy_version}"
    )
    if item.status == "resolved":
        head += f"  resolved={item.resolution} by {item.reviewer} applied={item.applied}"
    return head


def _list(args: argparse.Namespace) -> int:
    with open_store(args, must_exist=True) as store:
        queue = ReviewQueue(store, tenant=args.tenant)
        status = None if args.status == "all" else args.status
        items = queue.items(status=status)
        backlog = queue.backlog()
    if args.json:
        emit(
            {
                "items": [i.model_dump(mode="json") for i in items],
                "count": len(items),
                "backlog": backlog.model_dump(mode="json"),
            }
        )
        return 0
    for item in items:
        print(_line(item))
    age = (
        f", oldest {backlog.oldest_age_seconds:.0f}s old"
        if backlog.oldest_age_seconds is not None
        else ""
    )
    print(f"# backlog: {backlog.pending} pending{age}")
    return 0


def _resolve(args: argparse.Namespace) -> int:
    with open_store(args, must_exist=True) as store:
        item = ReviewQueue(store, tenant=args.tenant).resolve(
            args.id,
            args.decision,
            reviewer=args.reviewer,
            note=args.note,
            category=args.category,
        )
    if args.json:
        emit(item.model_dump(mode="json"))
    else:
        print(_line(item))
        if not item.applied:
            print(f"# not applied: {item.resolution_reason}")
    return 0 if item.applied else 1
