"""The blocking facade: SyncReader and SyncWriter over the asyncio core on a loop thread."""
