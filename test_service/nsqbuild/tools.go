//go:build tools

// Package tools pins the NSQ daemons and tools used by nsqclient's tests (nsqd, nsqlookupd,
// nsqadmin, nsq_tail / to_nsq for the CLI interop tests, bench_reader for
// benchmarks/drain_vs_bench_reader.py, bench_reader and bench_writer for
// benchmarks/embedded_vs_nsqd.py; build_nsq.sh also compiles go-nsq's own tests, for
// tests/embedded/test_go_nsq_suite.py). Nothing imports it: it only makes
// `go mod tidy` keep github.com/nsqio/nsq (and its dependencies) in go.mod and go.sum, so that
// build_nsq.sh can `go build` the apps with -mod=readonly from checked-in sums.
package tools

import (
	_ "github.com/nsqio/nsq/apps/nsq_tail"
	_ "github.com/nsqio/nsq/apps/nsqadmin"
	_ "github.com/nsqio/nsq/apps/nsqd"
	_ "github.com/nsqio/nsq/apps/nsqlookupd"
	_ "github.com/nsqio/nsq/apps/to_nsq"
	_ "github.com/nsqio/nsq/bench/bench_reader"
	_ "github.com/nsqio/nsq/bench/bench_writer"
)
