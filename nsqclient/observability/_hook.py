"""The one switch the core reads: which instrumentation new clients attach to, if any.

Imports nothing from OpenTelemetry, so the core can import it whether or not the ``otel`` extra
is installed. Clients check :data:`active` once, when they are created (never per message).
"""

from __future__ import annotations

from typing import Any

#: the :class:`~nsqclient.observability.Instrumentation` set by ``instrument()``
active: Any = None
