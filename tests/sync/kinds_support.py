"""Kinds of connection for the publish wing's tests: plain TCP, TLS (a CA and client
certificates), snappy, deflate, and TLS with compression; and a TLS 1.3 KeyUpdate asked of
the embedded server's side of a session.

Every kind is served by an nsqd from the suite's fixtures (``nsqd_factory``, ``tls_certs``): a
TLS kind by one that requires TLS with a verified client certificate
(``--tls-client-auth-policy=require-verify``), so that the client's certificate is always
presented and checked.
"""

from __future__ import annotations

import ctypes
import functools
import ssl
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pytest

from nsqclient.testing.certs import CertBundle


@dataclass(frozen=True)
class Kind:
    """One kind of connection."""

    name: str
    tls: bool = False
    codec: str | None = None
    #: the fewest bytes one OK frame takes on the wire from real nsqd 1.3.0 (measured: a
    #: TLS 1.3 record of it 32, a snappy chunk 18, a deflate block after the first 8)
    reply: int = 10

    def options(self, certs: CertBundle) -> dict[str, Any]:
        """The client options of this kind."""
        options: dict[str, Any] = {}
        if self.tls:
            options.update(
                tls_v1=True,
                tls_ca_file=str(certs.ca_cert),
                tls_cert_file=str(certs.client_cert),
                tls_key_file=str(certs.client_key),
            )
        if self.codec is not None:
            options[self.codec] = True
        return options

    def server_options(self, certs: CertBundle) -> dict[str, Any]:
        """What the nsqd serving this kind is started with."""
        if not self.tls:
            return {}
        return {
            "tls_cert": certs.server_cert,
            "tls_key": certs.server_key,
            "tls_root_ca": certs.ca_cert,
            "tls_client_auth_policy": "require-verify",
        }

    def nsqd(self, factory: Callable[..., Any], certs: CertBundle, **extra: Any) -> Any:
        """An nsqd of ``factory`` serving this kind; its HTTP helpers (``stats()``) present
        the client certificate over HTTPS, which it then requires too."""
        nsqd = factory(**self.server_options(certs), **extra)
        if self.tls:
            context = ssl.create_default_context(cafile=str(certs.ca_cert))
            context.load_cert_chain(str(certs.client_cert), str(certs.client_key))
            nsqd.https_context = context
        return nsqd


PLAIN = Kind("plain")
TLS = Kind("tls", tls=True, reply=30)
SNAPPY = Kind("snappy", codec="snappy", reply=18)
DEFLATE = Kind("deflate", codec="deflate", reply=8)
TLS_DEFLATE = Kind("tls-deflate", tls=True, codec="deflate", reply=30)


def params(*kinds: Kind) -> list[Any]:
    """``kinds`` as pytest parameters named for them; snappy ones marked ``snappy`` (cramjam
    turns the GIL on: the free-threaded CI step deselects them)."""
    return [
        pytest.param(k, id=k.name, marks=[pytest.mark.snappy] if k.codec == "snappy" else [])
        for k in kinds
    ]


# -- a TLS 1.3 KeyUpdate, asked of an SSL object through OpenSSL itself --------------------------
# The ssl module has no call for it. libssl is reached through the _ssl extension that links it,
# and an SSLObject's SSL* is the field after the weak reference to its socket in CPython's
# PySSLSocket (Modules/_ssl.c, 3.11-3.14): found at the object header's size plus one pointer,
# and checked with SSL_version() before use.

_TLS1_3_VERSION = 0x0304
_KEY_UPDATE_REQUESTED = 1


@functools.cache
def _libssl() -> ctypes.CDLL:
    lib = ctypes.CDLL(ssl._ssl.__file__)  # type: ignore[attr-defined]
    for name in ("SSL_version", "SSL_key_update", "SSL_get_key_update_type"):
        getattr(lib, name).argtypes = [ctypes.c_void_p] + (
            [ctypes.c_int] if name == "SSL_key_update" else []
        )
    lib.SSL_new_session_ticket.argtypes = [ctypes.c_void_p]
    return lib


def _ssl_pointer(obj: ssl.SSLObject) -> int:
    inner = obj._sslobj  # type: ignore[attr-defined]
    offset = object.__basicsize__ + ctypes.sizeof(ctypes.c_void_p)
    pointer = ctypes.c_void_p.from_address(id(inner) + offset).value
    if not pointer or _libssl().SSL_version(pointer) != _TLS1_3_VERSION:
        raise AssertionError("this CPython's SSL object layout is not the one expected")
    return pointer


def request_key_update(obj: ssl.SSLObject) -> None:
    """Have ``obj``'s side send a KeyUpdate asking the peer for one back with its next record
    (call it on the thread that owns ``obj``)."""
    if _libssl().SSL_key_update(_ssl_pointer(obj), _KEY_UPDATE_REQUESTED) != 1:
        raise AssertionError("SSL_key_update failed")


def request_session_ticket(obj: ssl.SSLObject) -> None:
    """Have ``obj`` (a server's side) send a new session ticket with its next record (OpenSSL
    refuses this while a key update is still to be sent, and the other way round)."""
    if _libssl().SSL_new_session_ticket(_ssl_pointer(obj)) != 1:
        raise AssertionError("SSL_new_session_ticket failed")


def key_update_owed(obj: ssl.SSLObject) -> bool:
    """Whether ``obj`` owes its peer a KeyUpdate (it received one asking for it and has not
    written since)."""
    return bool(_libssl().SSL_get_key_update_type(_ssl_pointer(obj)) == 0)  # NOT_REQUESTED
