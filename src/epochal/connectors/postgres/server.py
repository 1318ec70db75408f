"""A throw-away PostgreSQL server on 127.0.0.1, for tests, benchmarks and trying the connectors.

`initdb` into a directory, then `pg_ctl start` on a free port with what the connectors need:
`max_prepared_transactions` (PostgresSink's two-phase commit) and `wal_level=logical`
(PostgresCdcSource's replication slot). PostgreSQL refuses to run as root; as root the server
runs as the `postgres` user (Debian's package creates it), through `runuser`.

From a shell: `python -m epochal.connectors.postgres.server /tmp/pg` starts one and prints its
connection string; `python -m epochal.connectors.postgres.server /tmp/pg --stop` stops it.
"""

from __future__ import annotations

import glob
import os
import pwd
import shutil
import socket
import subprocess
import sys
from dataclasses import dataclass

from ...errors import EpochalError

SETTINGS = {
    "listen_addresses": "'127.0.0.1'",
    "unix_socket_directories": "''",
    "max_prepared_transactions": "64",
    "wal_level": "logical",
    "max_replication_slots": "16",
    "max_wal_senders": "16",
    "max_connections": "200",
    "fsync": "off",  # a throw-away server: its durability is the machine's, not the disk's
    "synchronous_commit": "off",
    "full_page_writes": "off",
    "shared_buffers": "128MB",
}


def postgres_bin() -> str | None:
    """The directory of `initdb`/`pg_ctl` (newest Debian install, or on PATH), or None."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(p.split("/")[4]))
    if found:
        return os.path.dirname(found[-1])
    initdb = shutil.which("initdb")
    return None if initdb is None else os.path.dirname(initdb)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class LocalPostgres:
    """A PostgreSQL cluster in `directory`, served on 127.0.0.1:`port` (user `postgres`, trust auth)."""

    directory: str
    port: int = 0
    user: str = "postgres"

    @property
    def dsn(self) -> str:
        return f"host=127.0.0.1 port={self.port} user={self.user} dbname=postgres"

    def _run(self, args: list[str], timeout: float = 120) -> None:
        if os.geteuid() == 0:  # postgres refuses root: run its programs as the postgres user
            args = ["runuser", "-u", _os_user(), "--", *args]
        done = subprocess.run(args, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise EpochalError(f"{' '.join(args)} failed: "
                               f"{(done.stderr or done.stdout).strip()[-800:]}")

    def start(self) -> LocalPostgres:
        """initdb (first time only) and start; returns self once the server accepts connections."""
        bin_dir = postgres_bin()
        if bin_dir is None:
            raise EpochalError("no PostgreSQL server here (initdb not found): apt-get install postgresql")
        data = os.path.join(self.directory, "data")
        if not os.path.exists(os.path.join(data, "PG_VERSION")):
            os.makedirs(self.directory, exist_ok=True)
            if os.geteuid() == 0:
                owner = pwd.getpwnam(_os_user())
                os.chown(self.directory, owner.pw_uid, owner.pw_gid)
                os.chmod(self.directory, 0o755)
            self._run([f"{bin_dir}/initdb", "-D", data, "-U", self.user, "-A", "trust", "-E", "UTF8",
                       "--no-sync", "--locale=C"])
            with open(os.path.join(data, "postgresql.auto.conf"), "a") as conf:
                conf.writelines(f"{k} = {v}\n" for k, v in SETTINGS.items())
        self.port = self.port or _free_port()
        log = os.path.join(self.directory, "server.log")
        self._run([f"{bin_dir}/pg_ctl", "-D", data, "-l", log, "-w", "-t", "60", "-o", f"-p {self.port}", "start"])
        return self

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (`mode`: smart, fast or immediate, as `pg_ctl stop -m`)."""
        bin_dir = postgres_bin()
        data = os.path.join(self.directory, "data")
        if bin_dir and os.path.exists(os.path.join(data, "postmaster.pid")):
            self._run([f"{bin_dir}/pg_ctl", "-D", data, "-w", "-t", "60", "-m", mode, "stop"])


def _os_user() -> str:
    try:
        pwd.getpwnam("postgres")
    except KeyError:  # a machine without Debian's package user: make one
        subprocess.run(["useradd", "--system", "--no-create-home", "postgres"], check=True, capture_output=True)
    return "postgres"


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(__doc__)
        return 0
    server = LocalPostgres(os.path.abspath(argv[0]))
    if "--stop" in argv:
        server.stop()
        return 0
    port_file = os.path.join(server.directory, "port")
    if os.path.exists(port_file):
        server.port = int(open(port_file).read())
    server.start()
    with open(port_file, "w") as f:
        f.write(str(server.port))
    print(server.dsn)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
