"""The asyncio core: connections, Writer, Reader, lookupd discovery and HTTP helpers."""
