"""A real PostgreSQL server for the tests: one per run (`postgres`), a fresh database per test
(`pg_dsn`). Skipped, with the reason, only where no server is installed (`.ci/run` installs
Debian's `postgresql`)."""

from __future__ import annotations

import itertools
import shutil
import tempfile
from collections.abc import Iterator

import pytest

from epochal.connectors.postgres.server import LocalPostgres, postgres_bin

_names = itertools.count()


@pytest.fixture(scope="session")
def postgres() -> Iterator[LocalPostgres]:
    """A PostgreSQL server on 127.0.0.1 (max_prepared_transactions, wal_level=logical)."""
    if postgres_bin() is None:
        pytest.skip("no PostgreSQL server installed (apt-get install postgresql)")
    pytest.importorskip("psycopg")
    directory = tempfile.mkdtemp(prefix="epochal-pg-")  # not under pytest's 0700 tmp: the server's user reads it
    server = LocalPostgres(directory).start()
    yield server
    server.stop("immediate")
    shutil.rmtree(directory, ignore_errors=True)


@pytest.fixture
def pg_dsn(postgres: LocalPostgres) -> Iterator[str]:
    """The connection string of a new, empty database on the `postgres` server."""
    import psycopg

    name = f"t{next(_names)}_{tempfile.mktemp(dir='').strip('/_')[-8:].lower()}"
    with psycopg.connect(postgres.dsn, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}"')
    yield postgres.dsn.replace("dbname=postgres", f"dbname={name}")
    try:
        with psycopg.connect(postgres.dsn, autocommit=True) as admin:
            with psycopg.connect(postgres.dsn.replace("dbname=postgres", f"dbname={name}"), autocommit=True) as db:
                for (gid,) in db.execute("SELECT gid FROM pg_prepared_xacts WHERE database = current_database()"):
                    db.execute(f"ROLLBACK PREPARED '{gid}'")
                for (slot,) in db.execute("SELECT slot_name FROM pg_replication_slots WHERE database = "
                                          "current_database() AND NOT active").fetchall():
                    db.execute("SELECT pg_drop_replication_slot(%s)", (slot,))
            admin.execute(f'DROP DATABASE "{name}" WITH (FORCE)')
    except psycopg.OperationalError:  # a test that stopped the server: its database goes with the run
        pass
