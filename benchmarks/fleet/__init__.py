"""The fleet benchmark (issue 21): consumers across many nsqd found through nsqlookupd.

``python -m benchmarks.fleet --scenario low-mif`` from the checkout's top folder (``--help`` for
the flags; ``bash test_service/benchmark_fleet.sh`` also builds go-nsq's side). Modules:
:mod:`.cli` (command line, table, JSON), :mod:`.scenarios` (setup, checks and figures of each
scenario), :mod:`.cluster` (the nsqd/nsqlookupd fleet, real or embedded), :mod:`.harness` (the
client processes), :mod:`.client` (nsqclient's consumer), :mod:`.body` (the message layout and
the per-nsqd recorder), :mod:`.plot` (per-nsqd deliveries over time; needs matplotlib).
"""
