"""Connection flags pass through to Config (TLS, snappy, deflate, AUTH, --opt) and addresses
fall back to the cluster.env variables."""

from __future__ import annotations

from typing import Any

import pytest

from nsqclient.testing.certs import CertBundle

from .conftest import clean_env, cli, topic_stats, unique

pytestmark = pytest.mark.timeout(60)


def round_trip(nsqd: Any, *flags: str, env: dict[str, str] | None = None) -> None:
    topic = unique()
    address = ["--nsqd-tcp-address", nsqd.tcp_address]
    pub = cli("pub", "--topic", topic, *flags, *address, input=b"a\nb\n", env=env)
    assert pub.returncode == 0, pub.stderr
    tail = cli("tail", "--topic", topic, "-n", "2", *flags, *address, env=env)
    assert tail.returncode == 0, tail.stderr
    assert sorted(tail.stdout.split()) == [b"a", b"b"]


@pytest.mark.parametrize("flags", [["--snappy"], ["--deflate", "--deflate-level", "3"]])
def test_compression_flags(nsqd: Any, flags: list[str]) -> None:
    round_trip(nsqd, *flags)


def test_tls_flags(nsqd_tls: Any, tls_certs: CertBundle) -> None:
    round_trip(nsqd_tls, "--tls-v1", "--tls-ca-file", str(tls_certs.ca_cert))


def test_auth_secret_flag_and_variable(nsqd_auth: Any) -> None:
    round_trip(nsqd_auth, "--auth-secret", "s3cret")
    round_trip(nsqd_auth, env=clean_env(NSQ_AUTH_SECRET="s3cret"))
    refused = cli("pub", "--topic", unique(), "--body", "x", "--auth-secret", "wrong",
                  "--nsqd-tcp-address", nsqd_auth.tcp_address)  # fmt: skip
    assert refused.returncode == 1
    assert len(refused.stderr.splitlines()) == 1 and b"AUTH" in refused.stderr.upper()


def test_opt_reaches_config(nsqd: Any) -> None:
    round_trip(nsqd, "--opt", "heartbeat_interval=5000", "--opt", "client_id=cli-test")


def test_addresses_fall_back_to_the_cluster_env_variables(nsqd: Any) -> None:
    env = clean_env(NSQD_TCP_ADDRESSES=nsqd.tcp_address, NSQD_HTTP_ADDRESSES=nsqd.http_address)
    topic = unique()
    pub = cli("pub", "--topic", topic, "--body", "from env", env=env)
    assert pub.returncode == 0, pub.stderr
    assert topic_stats(nsqd, topic)["message_count"] == 1
    topics = cli("topics", env=env)
    assert topics.returncode == 0 and topic in topics.stdout.decode().split()
    # a flag given on the command line wins over every variable
    wrong = clean_env(NSQD_TCP_ADDRESSES="127.0.0.1:1")
    pub = cli("pub", "--topic", topic, "--body", "x", "--nsqd-tcp-address", nsqd.tcp_address,
              env=wrong)  # fmt: skip
    assert pub.returncode == 0, pub.stderr


def test_https_addresses_use_the_tls_flags(nsqd_tls: Any, tls_certs: CertBundle) -> None:
    topic = unique()
    nsqd_tls.pub(topic, b"x")
    https = ["--nsqd-http-address", f"https://{nsqd_tls.https_address}"]
    topics = cli("topics", *https, "--tls-ca-file", str(tls_certs.ca_cert))
    assert topics.returncode == 0, topics.stderr
    assert topic in topics.stdout.decode().split()
    stat = cli("stat", "--count", "1", "--json", *https, "--tls-ca-file", str(tls_certs.ca_cert))
    assert stat.returncode == 0, stat.stderr
    unverified = cli("topics", *https)  # the test CA is not trusted by default
    assert unverified.returncode == 1 and len(unverified.stderr.splitlines()) == 1
