"""TLS for the links between a job's processes (`TlsConfig`), with the standard `ssl` module.

Both ends present a certificate and require the other's to be signed by the configured
authority (mutual TLS, as Flink's internal connectivity does). Host names are not checked:
workers reach one another by the addresses Spark's barrier context reports (often IPs), and
the job's secret (`runtime.wire.handshake`), checked inside the TLS session, is what says the
peer belongs to this job; the certificate says it belongs to the cluster. TLS 1.2 at least.

Contexts are made once per process and kept: loading the files costs a few milliseconds.
"""

from __future__ import annotations

import functools
import ssl

from ...config import TlsConfig


@functools.cache
def server_context(config: TlsConfig) -> ssl.SSLContext:
    """The context of a listening side (a worker's data port, the job master's port)."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    return _mutual(context, config)


@functools.cache
def client_context(config: TlsConfig) -> ssl.SSLContext:
    """The context of a connecting side."""
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
    context.check_hostname = False  # see the module's docstring: the CA and the job's secret decide
    return _mutual(context, config)


def _mutual(context: ssl.SSLContext, config: TlsConfig) -> ssl.SSLContext:
    context.minimum_version = ssl.TLSVersion.TLSv1_2
    context.verify_mode = ssl.CERT_REQUIRED
    context.load_cert_chain(config.certfile, config.keyfile)
    context.load_verify_locations(config.cafile or config.certfile)
    return context
