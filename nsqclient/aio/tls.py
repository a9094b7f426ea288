"""The ``ssl.SSLContext`` for connections that negotiate TLS.

Verification of the certificate and the host name is on by default; ``tls_insecure_skip_verify``
turns both off and is named so that nobody enables it by accident.
"""

from __future__ import annotations

import ssl

from ..config import Config
from ..errors import ConfigError

__all__ = ["make_ssl_context"]

_VERSIONS = {
    "tls1.0": ssl.TLSVersion.TLSv1,
    "tls1.1": ssl.TLSVersion.TLSv1_1,
    "tls1.2": ssl.TLSVersion.TLSv1_2,
    "tls1.3": ssl.TLSVersion.TLSv1_3,
}


def make_ssl_context(config: Config) -> ssl.SSLContext | None:
    """Build (or pass through) the client context; None when TLS is not requested."""
    if not config.tls_v1:
        return None
    if config.tls_context is not None:
        return config.tls_context
    try:
        ctx = ssl.create_default_context(ssl.Purpose.SERVER_AUTH, cafile=config.tls_ca_file)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(f"cannot load tls_ca_file={config.tls_ca_file!r}: {exc}") from exc
    if config.tls_insecure_skip_verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    if config.tls_cert_file is not None:
        try:
            ctx.load_cert_chain(config.tls_cert_file, config.tls_key_file)
        except (OSError, ssl.SSLError) as exc:
            raise ConfigError(
                f"cannot load tls_cert_file/tls_key_file ({config.tls_cert_file!r}): {exc}"
            ) from exc
    if config.tls_min_version is not None:
        version = _VERSIONS.get(config.tls_min_version.lower().replace("v", ""))
        if version is None:
            raise ConfigError(
                f"tls_min_version={config.tls_min_version!r} must be one of {sorted(_VERSIONS)}"
            )
        ctx.minimum_version = version
    return ctx
