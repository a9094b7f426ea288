"""Pure unit tests of the benchmark's correctness arithmetic: no daemons, no timing."""

from __future__ import annotations

import struct

import pytest

from nsqclient.benchmark.accounting import (
    HEADER,
    SequenceTracker,
    body_factory,
    latency_summary,
    percentile,
    steady_mark,
    steady_rate,
)
from nsqclient.benchmark.results import ScenarioResult, exit_code, result_from_measurement

pytestmark = pytest.mark.timeout(10)


def body(seq: int, sent_ns: int = 1_000) -> bytes:
    return HEADER.pack(seq, sent_ns) + b"pad"


def test_body_factory_round_trip_and_size() -> None:
    make = body_factory(64)
    data = make(41)
    assert len(data) == 64
    seq, sent = HEADER.unpack_from(data)
    assert seq == 41 and sent > 0


def test_body_factory_refuses_payload_smaller_than_header() -> None:
    with pytest.raises(ValueError):
        body_factory(15)


def test_tracker_counts_unique_duplicates_invalid_and_missing() -> None:
    t = SequenceTracker(5)
    assert not t.record(body(0))
    assert not t.record(body(0))  # duplicate
    assert not t.record(body(9))  # out of range
    assert not t.record(b"short")  # too small to carry a sequence id
    assert not t.record(body(3))
    assert (t.unique, t.duplicates, t.invalid, t.received, t.missing) == (2, 1, 2, 5, 3)
    assert not t.complete


def test_tracker_signals_exactly_the_completing_delivery() -> None:
    t = SequenceTracker(3)
    results = [t.record(body(s)) for s in (2, 0, 2, 1)]
    assert results == [False, False, False, True]
    assert t.complete and t.missing == 0 and t.duplicates == 1
    assert not t.record(body(1))  # a late duplicate never completes it again
    assert t.duplicates == 2


def test_tracker_records_latency_only_when_given_a_clock() -> None:
    t = SequenceTracker(2)
    t.record(body(0, sent_ns=1_000), now_ns=5_000)
    t.record(body(1, sent_ns=1_000))
    assert list(t.latencies_ns) == [4_000]


def test_merge_counts_cross_consumer_overlap_as_duplicates() -> None:
    total = SequenceTracker(4)
    total.record(body(0))
    total.record(body(1))
    other = bytearray(4)
    other[1] = other[2] = 1  # seq 1 was seen by both consumers
    total.merge(other, received=3, duplicates=1)
    assert total.unique == 3
    assert total.duplicates == 2  # one inside the other consumer, one across
    assert total.received == 5
    assert total.missing == 1
    with pytest.raises(ValueError):
        total.merge(bytearray(3), received=0)


@pytest.mark.parametrize(
    ("p", "expected"),
    [(0, 1), (1, 1), (50, 50), (95, 95), (99, 99), (99.5, 100), (100, 100)],
)
def test_percentile_is_nearest_rank(p: float, expected: int) -> None:
    assert percentile(list(range(1, 101)), p) == expected


def test_percentile_edges() -> None:
    assert percentile([7], 99) == 7
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1], 101)


def test_latency_summary_in_milliseconds() -> None:
    summary = latency_summary([4_000_000, 1_000_000, 2_000_000, 3_000_000])
    assert summary == {"p50": 2.0, "p95": 4.0, "p99": 4.0, "max": 4.0}
    assert latency_summary([]) is None


def test_steady_rate() -> None:
    assert steady_mark(1000) == 990
    assert steady_mark(10) == 9
    assert steady_mark(1) == 1
    assert steady_rate(990, 10.0, 12.0) == pytest.approx(495.0)
    assert steady_rate(990, 10.0, 0.0) is None


def _row(**changes: object) -> ScenarioResult:
    measurement = {"duration_s": 2.0, "latency_ms": {"p50": 1.0, "p95": 2.0, "p99": 3.0}}
    row = result_from_measurement(
        "tcp-pub", measurement, messages=1000, payload_size=1024, batch_size=None,
        concurrency=8, cpu_s=0.5, peak_rss_kib=2048,
    )  # fmt: skip
    for key, value in changes.items():
        setattr(row, key, value)
    return row


def test_result_rates_and_resources() -> None:
    row = _row()
    assert row.msg_per_s == 500.0
    assert row.mib_per_s == pytest.approx(500 * 1024 / 1024**2)
    assert row.cpu_us_per_msg == pytest.approx(500.0)
    assert row.peak_rss_mib == 2.0
    assert row.errors == 0


@pytest.mark.parametrize(
    "change",
    [
        {"missing": 1},
        {"duplicates": 1},
        {"publish_errors": 1},
        {"fin_errors": 1},
        {"server_errors": 1},
        {"timed_out": True},
        {"failure": "ValueError: x"},
    ],
)
def test_any_error_makes_the_exit_status_non_zero(change: dict[str, object]) -> None:
    assert exit_code([_row(), _row()]) == 0
    bad = _row(**change)
    assert bad.errors == 1
    assert exit_code([_row(), bad]) == 1


def test_header_layout_is_what_the_go_program_writes() -> None:
    # gobench: binary.BigEndian uint64 seq, then uint64 unix nanoseconds
    assert HEADER.size == 16
    assert HEADER.pack(1, 2) == struct.pack(">QQ", 1, 2)
