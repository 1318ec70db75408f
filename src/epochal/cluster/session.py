"""The SparkSession a job runs on: which master, and a quiet start.

- `probe_master` connects to a standalone (`spark://`), Kubernetes (`k8s://`) or Spark Connect
  (`sc://`) master's port before Spark is started: an unreachable master fails in seconds, in
  one line, instead of after Spark's three 20 s registration attempts and a page of Java stack
  trace.
- `create_session` makes a classic session (a driver JVM in this process) or a Spark Connect
  client: of an `sc://` server, or of a local server it starts (`connect=True`, like
  `SparkSession.builder.remote("local[2]")`). `is_connect` tells the two kinds apart: a Connect
  session has no SparkContext and no RDD API, so the Spark host launches its stage through the
  DataFrame API.
- `use_master` makes `default_session` create its session on a given master, lazily: `epochal
  run --master URL` uses it, so that a job whose checks fail (a missing input, output that would
  be written twice) fails before the JVM starts.
- `master_of`, `task_slots`, `wait_for_slots` and `bind_host` tell the Spark host what the
  session offers: its master, how many workers it can gang-schedule, and the address of this
  machine its workers can connect back to.
- Start-up is quiet: the driver's JVM logs only errors (a log4j2 configuration of our own, so
  neither Spark's "default profile" banner nor its WARN lines such as NativeCodeLoader's), and
  not a task's failure (each task of each launch printed its Python traceback in a Java one:
  the job master reports the failure, in one line), and
  its one start-up line outside log4j ("Using incubator modules") is dropped from its stderr.
  `EPOCHAL_SPARK_LOG=WARN` (or INFO, DEBUG...) keeps Spark's own logging at that level instead.
"""

from __future__ import annotations

import os
import re
import socket
import subprocess
import sys
import tempfile
import threading
import time
import warnings
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from typing import IO, Any
from urllib.parse import urlsplit

from ..errors import EpochalError

SPARK_LOG_ENV = "EPOCHAL_SPARK_LOG"
BIND_HOST_ENV = "EPOCHAL_BIND_HOST"  # the address workers connect back to, if not the default
LOG_LEVELS = ("ALL", "TRACE", "DEBUG", "INFO", "WARN", "ERROR", "FATAL", "OFF")
PROBE_TIMEOUT = 5.0  # seconds per address of the master
CONNECT_PORT = 15002  # Spark Connect's default port

_SPLITS = re.compile(r"\bsplits=(?:Some\()?(\d+)")
_NOISE = (b"WARNING: Using incubator modules",)  # the JVM's, printed before log4j exists

# Errors only on the console. PySpark's gateway starts Spark's logging as a shell's: unless the
# gateway's own logger is configured, Spark sets the root level to WARN and says so on stderr.
_LOG4J2 = """\
rootLogger.level = error
rootLogger.appenderRef.stderr.ref = console
appender.console.type = Console
appender.console.name = console
appender.console.target = SYSTEM_ERR
appender.console.layout.type = PatternLayout
appender.console.layout.pattern = %d{yy/MM/dd HH:mm:ss} %p %c{1}: %m%n%ex
logger.gateway.name = org.apache.spark.api.python.PythonGatewayServer
logger.gateway.level = error
logger.executor.name = org.apache.spark.executor.Executor
logger.executor.level = off
"""

_default_master: str | None = None


def is_connect(spark: Any) -> bool:
    """Whether `spark` is a Spark Connect session: a client, with no SparkContext and no RDDs.

    Told by the class's module, so that a classic session never imports Connect's modules
    (they need the `connect` extra: grpcio and friends).
    """
    return type(spark).__module__.startswith("pyspark.sql.connect.")


_LOCAL = re.compile(r"local(\[(\*|\d+)(,\d+)?\])?|local-cluster\[\d+,\d+,\d+\]")
_FORMS = ("local, local[N], local[*], local-cluster[W,C,MB], spark://HOST:PORT, k8s://https://HOST[:PORT], "
          "yarn or sc://HOST[:PORT]")


def master_addresses(master: str) -> list[tuple[str, int]]:
    """The (host, port) pairs a master URL names; none for masters not reached by address
    (`local…`, `yarn`: YARN is found through the Hadoop configuration).

    Raises:
        EpochalError: `master` is no master URL Spark takes (`spark//host:7077`): one line,
            instead of the JVM's page of stack trace once Spark has started.
    """
    if _LOCAL.fullmatch(master) or master == "yarn":
        return []
    if not master.startswith(("sc://", "spark://", "k8s://")):
        raise EpochalError(f"bad Spark master URL {master!r}: expected {_FORMS}")
    if master.startswith("sc://"):
        parts = urlsplit(master.split("/;", 1)[0])  # sc://HOST[:PORT][/;param=value;...]
        try:
            connect_port = parts.port
        except ValueError:
            connect_port = -1
        if not parts.hostname or connect_port == -1:
            raise EpochalError(f"bad Spark Connect URL {master!r}: expected sc://HOST[:PORT][/;PARAMS]")
        return [(parts.hostname, connect_port or CONNECT_PORT)]
    if master.startswith("spark://"):
        found = []
        for part in master[len("spark://") :].split(","):
            host, _, port = part.strip().rpartition(":")
            if not host or not port.isdigit():
                raise EpochalError(f"bad Spark master URL {master!r}: expected spark://HOST:PORT[,HOST:PORT...]")
            found.append((host.strip("[]"), int(port)))
        return found
    if master.startswith("k8s://"):
        url = master[len("k8s://") :]
        parts = urlsplit(url if "://" in url else f"https://{url}")
        if parts.hostname is None:
            raise EpochalError(f"bad Spark master URL {master!r}: expected k8s://https://HOST[:PORT]")
        return [(parts.hostname, parts.port or (80 if parts.scheme == "http" else 443))]
    raise AssertionError(master)  # unreachable: every scheme above returned


def probe_master(master: str, timeout: float = PROBE_TIMEOUT) -> None:
    """Raise an `EpochalError` naming `master` unless one of its addresses accepts a connection."""
    addresses = master_addresses(master)
    errors = []
    for host, port in addresses:
        try:
            with socket.create_connection((host, port), timeout=timeout):
                return
        except OSError as exc:
            reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
            errors.append(f"{host}:{port}: {reason.lower()}")
    if addresses:
        raise EpochalError(f"cannot reach the Spark master {master} ({'; '.join(errors)})")


@contextmanager
def use_master(master: str) -> Iterator[None]:
    """Inside the block, `default_session` creates its session on `master`."""
    global _default_master
    previous, _default_master = _default_master, master
    try:
        yield
    finally:
        _default_master = previous


def spark_log_level() -> str | None:
    """The Spark log level asked for with `EPOCHAL_SPARK_LOG`, or None (quiet)."""
    level = os.environ.get(SPARK_LOG_ENV, "").strip().upper()
    if not level:
        return None
    if level not in LOG_LEVELS:
        raise EpochalError(f"{SPARK_LOG_ENV} must be one of {', '.join(LOG_LEVELS)}, got {level!r}")
    return level


def create_session(master: str, *, connect: bool = False) -> Any:
    """A SparkSession on `master`, set up for long-running barrier tasks.

    Python workers use this interpreter; a cancelled task's Python process is killed after
    200 ms instead of Spark's default seconds (a relaunch then takes ~5 s instead of ~8 s).
    `connect=True` starts that same driver as a local Spark Connect server in this process and
    returns a Connect client of it (`master` is then `local...`). An `sc://` master is a Spark
    Connect server elsewhere: the session is a client of it, and the settings above are the
    server's to make (docs/operations.md, Running on Spark Connect).

    Raises:
        EpochalError: the master's address cannot be reached (see `probe_master`).
    """
    probe_master(master)
    if master.startswith("sc://"):
        from pyspark.sql import SparkSession

        return SparkSession.builder.remote(master).getOrCreate()
    level = spark_log_level()
    is_local = master.startswith("local")
    if is_local:  # on this machine only: keep Spark off other interfaces
        os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    settings = {
        "spark.master": master,
        "spark.app.name": "epochal",
        "spark.python.task.killTimeout": "200ms",
        "spark.ui.enabled": "false",
        "spark.ui.showConsoleProgress": "false",
    }
    if is_local and os.environ["SPARK_LOCAL_IP"].startswith("127."):
        settings["spark.driver.host"] = settings["spark.driver.bindAddress"] = "127.0.0.1"
    if level is None:
        _start_quiet_jvm(settings)
    from pyspark import SparkContext
    from pyspark.sql import SparkSession

    builder = SparkSession.builder.remote(master) if connect else SparkSession.builder
    for key, value in settings.items():
        if not (connect and key == "spark.master"):  # remote(master) names it
            builder = builder.config(key, value)
    with warnings.catch_warnings():
        # a local Connect server takes the settings at start, then pyspark also tries each as a
        # session setting and warns about the static ones
        warnings.filterwarnings("ignore", "Failed to set", UserWarning)
        session = builder.getOrCreate()
    context = SparkContext._active_spark_context  # the driver's, in this process (Connect too)
    if context is not None:
        context.setLogLevel(level or "ERROR")
    return session


def default_session(workers: int) -> Any:
    """The active SparkSession, or a new one: on the master of `use_master`, else the embedded
    local one with a slot per worker (`local[*]`)."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        return active
    if _default_master is not None:
        return create_session(_default_master)
    cores = os.cpu_count() or 1
    return create_session("local[*]" if workers <= cores else f"local[{workers}]")


def stop_session() -> None:
    """Stop the active SparkSession, if Spark was started in this process."""
    if "pyspark" not in sys.modules:
        return
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()


def master_of(spark: Any) -> str:
    """The session's master URL (a Connect client reads the server's setting)."""
    if is_connect(spark):
        return str(spark.conf.get("spark.master", "") or "")
    return str(spark.sparkContext.master)


def task_slots(spark: Any) -> int | None:
    """The cluster's task slots: `defaultParallelism`, which a Connect client reads from the
    number of splits Spark plans for a `range` (one analysis call, no Spark job); None if the
    plan does not say (a Connect server's own setting of `spark.sql.leafNodeDefaultParallelism`
    overrides it, too)."""
    if not is_connect(spark):
        return int(spark.sparkContext.defaultParallelism)
    found = _SPLITS.search(spark.range(1)._explain_string(extended=False))
    return int(found.group(1)) if found else None


def wait_for_slots(spark: Any, workers: int, timeout: float = 90.0) -> int | None:
    """Task slots of the cluster; on a cluster master, waits for executors to register."""
    slots = task_slots(spark)
    master = master_of(spark)
    if master.startswith("local[") or master == "local" or slots is None:
        return slots
    deadline = time.monotonic() + timeout
    while slots is not None and slots < workers and time.monotonic() < deadline:
        time.sleep(0.5)
        slots = task_slots(spark)
    return slots


def bind_host(spark: Any) -> str:
    """The address the job master listens on for its workers.

    `EPOCHAL_BIND_HOST` if set. Else, on a classic session, `spark.driver.host`, which workers on
    any cluster reach; on a Connect session, this machine's address on the route to the Connect
    server (the cluster's side of the client), found by a UDP `connect`, which sends nothing.
    """
    chosen = os.environ.get(BIND_HOST_ENV)
    if chosen:
        return chosen
    if not is_connect(spark):
        return str(spark.sparkContext.getConf().get("spark.driver.host", "127.0.0.1"))
    builder = getattr(spark.client, "_builder", None)  # pyspark keeps the server's address here
    server = getattr(builder, "host", None) or "127.0.0.1"
    try:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as probe:
            probe.connect((socket.gethostbyname(server), 9))
            return str(probe.getsockname()[0])
    except OSError:
        return socket.gethostbyname(socket.gethostname())


def _start_quiet_jvm(settings: dict[str, str]) -> None:
    """Launch the driver's JVM with our log4j2 configuration and a filter on its stderr.

    Does nothing if this process already has a JVM (an earlier session): its logging stays.
    """
    from pyspark import SparkConf, SparkContext, java_gateway

    launch_gateway: Any = java_gateway.launch_gateway  # untyped in pyspark

    if SparkContext._gateway is not None:
        return
    conf = SparkConf(loadDefaults=False)
    for key, value in settings.items():
        conf.set(key, value)
    opts = os.environ.get("SPARK_SUBMIT_OPTS")
    os.environ["SPARK_SUBMIT_OPTS"] = f"{opts or ''} -Dlog4j2.configurationFile=file:{_log4j2_file()}".strip()
    try:
        gateway = launch_gateway(conf, popen_kwargs={"stderr": subprocess.PIPE})
    finally:
        if opts is None:
            del os.environ["SPARK_SUBMIT_OPTS"]
        else:
            os.environ["SPARK_SUBMIT_OPTS"] = opts
    SparkContext._ensure_initialized(gateway=gateway)
    threading.Thread(target=_relay, args=(gateway.proc.stderr,), name="epochal-jvm-stderr", daemon=True).start()


def _relay(stream: IO[bytes]) -> None:
    """Copy the JVM's stderr to ours (file descriptor 2, where it would have gone), minus noise."""
    for line in iter(stream.readline, b""):
        if line.startswith(_NOISE):
            continue
        try:
            while line:
                line = line[os.write(2, line) :]
        except OSError:
            pass


def _log4j2_file() -> str:
    """Our log4j2 configuration, written once into the temporary directory."""
    digest = zlib.crc32(_LOG4J2.encode())
    path = os.path.join(tempfile.gettempdir(), f"epochal-log4j2-{digest:08x}.properties")
    if not os.path.exists(path):
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(_LOG4J2)
        os.replace(tmp, path)
    return path
