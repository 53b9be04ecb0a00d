"""Components on PostgresStore: a lean selection of the chat, profile and activation suites,
re-run with ``store`` bound to a PostgresStore.

The components use only the Store protocol; this pins that they keep working on the shared
store (profile assembly, activation review items).
Collected only when ``RETOLD_TEST_POSTGRES_URL`` names a test cluster (see conftest).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from retold import PostgresStore

from .conftest import POSTGRES_URL, FixedClock, counter_ids, fresh_pg_schema
from .test_activation import test_failed_or_unsure_classifier_creates_a_review_item
from .test_chat import test_fact_from_session_one_is_used_in_session_three
from .test_profile import (
    test_profile_excludes_expired_superseded_and_conflicting_records,
    test_review_resolution_mid_session_waits_for_the_next_session,
)

pytestmark = pytest.mark.skipif(POSTGRES_URL is None, reason="RETOLD_TEST_POSTGRES_URL is not set")

__all__ = [
    "test_fact_from_session_one_is_used_in_session_three",
    "test_failed_or_unsure_classifier_creates_a_review_item",
    "test_profile_excludes_expired_superseded_and_conflicting_records",
    "test_review_resolution_mid_session_waits_for_the_next_session",
]


@pytest.fixture
def store(clock: FixedClock) -> Iterator[PostgresStore]:
    """A PostgresStore in a fresh schema, with the suites' fixed clock and ids."""
    assert POSTGRES_URL is not None
    with fresh_pg_schema() as schema:
        s = PostgresStore(POSTGRES_URL, schema=schema, clock=clock, id_factory=counter_ids())
        yield s
        s.close()
