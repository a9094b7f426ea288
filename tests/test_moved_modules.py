"""The HTTP helpers and address parsing moved out of ``aio`` (they are not asyncio); the old import
paths are kept as re-export shims and must hand out the very same objects."""

from __future__ import annotations

import importlib
from types import ModuleType

import pytest

import nsqclient.addresses
import nsqclient.aio
import nsqclient.aio.addresses
import nsqclient.aio.http
import nsqclient.http
import nsqclient.sync


@pytest.mark.parametrize(
    ("old", "new"),
    [
        (nsqclient.aio.http, nsqclient.http),
        (nsqclient.aio.addresses, nsqclient.addresses),
    ],
)
def test_the_old_path_re_exports_the_same_objects(old: ModuleType, new: ModuleType) -> None:
    old_all = old.__all__
    new_all = new.__all__
    assert sorted(old_all) == sorted(new_all)
    for name in new_all:
        assert getattr(old, name) is getattr(new, name), name
    assert "compatibility" in (old.__doc__ or "")


def test_the_lazy_names_on_the_faces_are_the_moved_classes() -> None:
    assert nsqclient.aio.NsqdHTTPClient is nsqclient.http.NsqdHTTPClient
    assert nsqclient.aio.LookupResult is nsqclient.http.LookupResult
    assert nsqclient.sync.SyncNsqdHTTPClient is nsqclient.http.SyncNsqdHTTPClient


def test_from_imports_through_the_old_paths_still_work() -> None:
    module = importlib.import_module("nsqclient.aio.http")
    namespace: dict[str, object] = {}
    exec("from nsqclient.aio.http import SyncLookupdHTTPClient, HTTPError", namespace)
    assert namespace["SyncLookupdHTTPClient"] is module.SyncLookupdHTTPClient
    exec("from nsqclient.aio.addresses import parse_address", namespace)
    assert namespace["parse_address"] is nsqclient.addresses.parse_address
