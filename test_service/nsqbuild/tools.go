//go:build tools

// Package tools pins the NSQ daemons used by nsqclient's tests. Nothing imports it: it only makes
// `go mod tidy` keep github.com/nsqio/nsq (and its dependencies) in go.mod and go.sum, so that
// build_nsq.sh can `go build` the apps with -mod=readonly from checked-in sums.
package tools

import (
	_ "github.com/nsqio/nsq/apps/nsqadmin"
	_ "github.com/nsqio/nsq/apps/nsqd"
	_ "github.com/nsqio/nsq/apps/nsqlookupd"
)
