"""nsqclient beside other NSQ clients (asyncnsq, pynsq, gnsq, ansq, go-nsq): the same scenarios,
each client in its own process and virtualenv, against a fresh nsqd per (scenario, client) pair.

``python -m benchmarks.compare --help`` from the checkout's top folder. Repository tooling, not
part of the installed package: :mod:`.cli` (the command line), :mod:`.harness` (orchestration,
the checks of every run), :mod:`.report` (medians, the markdown table), :mod:`.chart`,
``drivers/`` (one standalone script per client, speaking the JSON protocol of
``drivers/_common.py``) and ``gobench/`` (the go-nsq program). It measures through
:mod:`nsqclient.benchmark`'s scenarios and accounting.
"""
