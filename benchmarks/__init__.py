"""The repository's benchmarks (not installed with nsqclient; BENCHMARKS.md describes them all).

* ``compare/``: nsqclient beside other NSQ clients (``python -m benchmarks.compare``).
* ``fleet/``: consumers across many nsqd found through nsqlookupd, nsqclient beside go-nsq
  (``python -m benchmarks.fleet``, ``bash test_service/benchmark_fleet.sh``).
* ``sync_bench.py``: the blocking facade against the asyncio core on one nsqd.
* ``decoder_bench.py``, ``flow_bench.py``: micro-benchmarks of the frame decoder and of the RDY
  controller's per-message path.

The benchmark of nsqclient itself against a cluster ships with the package:
``nsqclient-benchmark`` (:mod:`nsqclient.benchmark`).
"""
