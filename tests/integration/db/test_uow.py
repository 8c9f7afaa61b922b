"""Unit of work, repositories and constraints, on SQLite and PostgreSQL."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime

import pytest

from service.db.errors import IntegrityConflictError
from service.db.models import ApiKey, AuditEvent, Site
from service.db.uow import UnitOfWorkFactory
from service.domain.access.auth import authenticate, ensure_admin_key
from service.domain.access.keys import generate_key
from service.domain.access.principal import Principal
from service.domain.access.sites import create_site, deactivate_site, rotate_site_key
from service.domain.audit import SYSTEM
from service.domain.errors import AuthenticationError, ConflictError

ADMIN = Principal(role="admin")


@pytest.fixture
def db_url(any_db_url: str) -> str:
    return any_db_url


def test_nothing_persists_without_commit(uow_factory: UnitOfWorkFactory) -> None:
    with uow_factory() as uow:
        uow.sites.add(Site(name="uncommitted"))
    with uow_factory() as uow:
        assert uow.sites.get_by_name("uncommitted") is None


def test_exception_rolls_back(uow_factory: UnitOfWorkFactory) -> None:
    def fail_midway() -> None:
        with uow_factory() as uow:
            uow.sites.add(Site(name="doomed"))
            raise RuntimeError

    with pytest.raises(RuntimeError):
        fail_midway()
    with uow_factory() as uow:
        assert uow.sites.get_by_name("doomed") is None


def test_commit_persists_and_objects_stay_readable(uow_factory: UnitOfWorkFactory) -> None:
    with uow_factory() as uow:
        site = uow.sites.add(Site(name="kept"))
        uow.commit()
    assert site.name == "kept"  # readable after the unit of work is closed
    with uow_factory() as uow:
        loaded = uow.sites.get(site.id)
    assert loaded is not None
    assert loaded.created_at.tzinfo is UTC


def test_unit_of_work_is_reusable_but_not_reentrant(uow_factory: UnitOfWorkFactory) -> None:
    uow = uow_factory()
    with uow:
        uow.sites.add(Site(name="first"))
        uow.commit()
        with pytest.raises(RuntimeError), uow:
            pass
    with uow:
        assert uow.sites.count() == 1
    with pytest.raises(RuntimeError):
        _ = uow.session


def test_naive_datetimes_are_refused(uow_factory: UnitOfWorkFactory) -> None:
    with uow_factory() as uow, pytest.raises(Exception, match="naive"):
        uow.sites.add(Site(name="naive", created_at=datetime(2026, 1, 1)))  # noqa: DTZ001


def test_unique_violation_becomes_integrity_conflict(uow_factory: UnitOfWorkFactory) -> None:
    with uow_factory() as uow:
        uow.sites.add(Site(name="twin"))
        uow.commit()
    with uow_factory() as uow, pytest.raises(IntegrityConflictError) as caught:
        uow.sites.add(Site(name="twin"))
    assert "twin" not in str(caught.value)


def test_check_constraints_hold(uow_factory: UnitOfWorkFactory) -> None:
    key = generate_key()
    with uow_factory() as uow, pytest.raises(IntegrityConflictError):
        uow.api_keys.add(ApiKey(role="site", site_id=None, prefix=key.prefix, key_hash="h"))
    with uow_factory() as uow, pytest.raises(IntegrityConflictError):
        uow.api_keys.add(ApiKey(role="root", site_id=None, prefix=key.prefix, key_hash="h"))
    with uow_factory() as uow:
        uow.audit.record(AuditEvent(action="x", outcome="maybe"))
        with pytest.raises(IntegrityConflictError):
            uow.flush()


def test_foreign_keys_are_enforced(uow_factory: UnitOfWorkFactory) -> None:
    key = generate_key()
    with uow_factory() as uow, pytest.raises(IntegrityConflictError):
        uow.api_keys.add(
            ApiKey(role="site", site_id="f" * 32, prefix=key.prefix, key_hash=key.key_hash)
        )


def test_one_active_admin_key_at_a_time(uow_factory: UnitOfWorkFactory) -> None:
    first, second = generate_key(), generate_key()
    with uow_factory() as uow:
        uow.api_keys.add(ApiKey(role="admin", prefix=first.prefix, key_hash=first.key_hash))
        uow.commit()
    with uow_factory() as uow, pytest.raises(IntegrityConflictError):
        uow.api_keys.add(ApiKey(role="admin", prefix=second.prefix, key_hash=second.key_hash))


def run_concurrently(count: int, target: Callable[[], object]) -> list[object]:
    """Run ``target`` in ``count`` threads released together; results or exceptions."""
    barrier = threading.Barrier(count)
    results: list[object] = []
    lock = threading.Lock()

    def run() -> None:
        barrier.wait()
        try:
            outcome: object = target()
        except Exception as exc:  # collected for the assertions
            outcome = exc
        with lock:
            results.append(outcome)

    threads = [threading.Thread(target=run) for _ in range(count)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    return results


def test_racing_first_starts_generate_one_admin_key(uow_factory: UnitOfWorkFactory) -> None:
    results = run_concurrently(4, lambda: ensure_admin_key(uow_factory()))
    tokens = [r for r in results if isinstance(r, str)]
    assert len(tokens) == 1, results
    assert all(r is None for r in results if not isinstance(r, str)), results
    principal = authenticate(
        uow_factory(), token=tokens[0], configured_admin_key_hash=None, context=SYSTEM
    )
    assert principal.is_admin


def test_racing_rotations_with_one_key_issue_one_new_key(uow_factory: UnitOfWorkFactory) -> None:
    issued = create_site(uow_factory(), name="racer", actor=ADMIN, context=SYSTEM)
    caller = authenticate(
        uow_factory(), token=issued.token, configured_admin_key_hash=None, context=SYSTEM
    )

    results = run_concurrently(
        3,
        lambda: rotate_site_key(
            uow_factory(), site_id=issued.site.id, actor=caller, context=SYSTEM
        ),
    )
    winners = [r for r in results if not isinstance(r, Exception)]
    losers = [r for r in results if isinstance(r, Exception)]
    assert len(winners) == 1, results
    assert all(isinstance(r, ConflictError) for r in losers), results
    with uow_factory() as uow:
        assert len(uow.api_keys.active_for_site(issued.site.id)) == 1
    with pytest.raises(AuthenticationError):
        authenticate(
            uow_factory(), token=issued.token, configured_admin_key_hash=None, context=SYSTEM
        )


def test_a_rotation_racing_a_deactivation_leaves_the_site_without_a_key(
    uow_factory: UnitOfWorkFactory,
) -> None:
    """Whichever of the admin's rotation and deactivation of a site runs first, the site ends
    deactivated with no key in force (the site's row is locked by both)."""
    for attempt in range(8):
        site = create_site(uow_factory(), name=f"leaving {attempt}", actor=ADMIN, context=SYSTEM)
        turns = iter(range(2))

        def act(site_id: str = site.site.id, turn: Iterator[int] = turns) -> object:
            if next(turn) == 0:
                return deactivate_site(uow_factory(), site_id=site_id, actor=ADMIN, context=SYSTEM)
            return rotate_site_key(uow_factory(), site_id=site_id, actor=ADMIN, context=SYSTEM)

        results = run_concurrently(2, act)
        assert not any(
            isinstance(r, Exception) and not isinstance(r, ConflictError) for r in results
        ), results
        with uow_factory() as uow:
            row = uow.sites.get(site.site.id)
            assert row is not None
            assert row.deactivated_at is not None
            assert uow.api_keys.active_for_site(site.site.id) == []
