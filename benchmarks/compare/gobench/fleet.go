// The fleet command: go-nsq's Consumer across many nsqd found through nsqlookupd, for
// `python -m benchmarks.fleet` (benchmarks/fleet/harness.py). Same flags and result fields as
// nsqclient's side (benchmarks/fleet/client.py): bodies carry seq (8 bytes), the index of the
// nsqd they were published to (4) and the publish time (8), big-endian; the result counts
// deliveries per nsqd and per time bucket since ConnectToNSQLookupd.
package main

import (
	"bufio"
	"encoding/binary"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nsqio/go-nsq"
)

type fleetResult struct {
	Fleetbench  int            `json:"fleetbench"`
	Client      string         `json:"client"`
	Version     string         `json:"version"`
	Runtime     string         `json:"runtime"`
	Status      string         `json:"status"`
	Reason      string         `json:"reason,omitempty"`
	Expected    int            `json:"expected"`
	Received    int            `json:"received"`
	Unique      int            `json:"unique"`
	Duplicates  int            `json:"duplicates"`
	Bad         int            `json:"bad"`
	Finished    int            `json:"finished"`
	DoneS       *float64       `json:"done_s"`
	FirstS      []*float64     `json:"first_s"`
	LastS       []*float64     `json:"last_s"`
	PerNsqd     []int          `json:"per_nsqd"`
	BucketS     float64        `json:"bucket_s"`
	Timeline    [][]int        `json:"timeline"`
	StartUnix   float64        `json:"start_unix"`
	EndS        float64        `json:"end_s"`
	StoppedBy   string         `json:"stopped_by"`
	CPUS        float64        `json:"cpu_s"`
	MaxRSSKiB   int64          `json:"max_rss_kib"`
	Connections int            `json:"connections"`
	MaxInFlight int            `json:"max_in_flight"`
	HandlerMS   float64        `json:"handler_ms"`
	Concurrency int            `json:"concurrency"`
	Options     map[string]any `json:"options"`
	Notes       string         `json:"notes"`
	GoMaxProcs  int            `json:"gomaxprocs"`
}

type fleetRecorder struct {
	mu       sync.Mutex
	t0       time.Time
	expected int
	nsqd     int
	bucket   float64
	handler  time.Duration
	seen     []bool
	r        fleetResult
	done     chan struct{}
}

func (f *fleetRecorder) record(body []byte, t float64) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	r := &f.r
	r.Received++
	if len(body) < 20 {
		r.Bad++
		return false
	}
	seq := binary.BigEndian.Uint64(body[0:8])
	src := int(binary.BigEndian.Uint32(body[8:12]))
	if seq >= uint64(f.expected) || src >= f.nsqd {
		r.Bad++
		return false
	}
	if f.seen[seq] {
		r.Duplicates++
		return false
	}
	f.seen[seq] = true
	r.Unique++
	if r.FirstS[src] == nil {
		v := t
		r.FirstS[src] = &v
	}
	v := t
	r.LastS[src] = &v
	r.PerNsqd[src]++
	b := int(t / f.bucket)
	for len(r.Timeline) <= b {
		r.Timeline = append(r.Timeline, make([]int, f.nsqd))
	}
	r.Timeline[b][src]++
	return true
}

func (f *fleetRecorder) HandleMessage(m *nsq.Message) error {
	isNew := f.record(m.Body, time.Since(f.t0).Seconds())
	if f.handler > 0 {
		time.Sleep(f.handler)
	}
	if isNew {
		f.mu.Lock()
		f.r.Finished++
		if f.r.Finished == f.expected && f.r.DoneS == nil {
			v := time.Since(f.t0).Seconds()
			f.r.DoneS = &v
			close(f.done)
		}
		f.mu.Unlock()
	}
	return nil // go-nsq FINs on return
}

func runFleet(args []string) int {
	fs := flag.NewFlagSet("fleet", flag.ContinueOnError)
	lookupd := fs.String("lookupd-http", "", "nsqlookupd HTTP host:port")
	topic := fs.String("topic", "", "topic")
	channel := fs.String("channel", "fleet", "channel")
	nsqdCount := fs.Int("nsqd-count", 0, "source indexes in the bodies")
	expect := fs.Int("expect", 0, "messages published in all")
	mif := fs.Int("max-in-flight", 1, "MaxInFlight")
	handlerMS := fs.Float64("handler-ms", 0, "handler sleep (ms)")
	concurrency := fs.Int("concurrency", 0, "handler goroutines (0: max-in-flight; 1 when handler-ms is 0)")
	maxDuration := fs.Float64("max-duration", 120, "seconds")
	bucketMS := fs.Float64("bucket-ms", 100, "timeline bucket (ms)")
	stopOnStdin := fs.Bool("stop-on-stdin", false, "stop at a line or EOF on stdin")
	var options stringList
	fs.Var(&options, "option", "not supported by go-nsq's side (refused)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	r := fleetResult{
		Fleetbench: 1, Client: "go-nsq", Version: goNsqVersion, Runtime: runtimeName(), Status: "ok",
		Expected: *expect, MaxInFlight: *mif, HandlerMS: *handlerMS, BucketS: *bucketMS / 1000,
		GoMaxProcs: runtimeGoMaxProcs(), Options: map[string]any{},
	}
	fail := func(reason string) int {
		r.Status, r.Reason = "error", reason
		emit(r)
		return 0
	}
	if *lookupd == "" || *topic == "" || *nsqdCount < 1 || *expect < 0 {
		return fail("--lookupd-http, --topic, --nsqd-count and --expect are required")
	}
	if len(options) > 0 {
		return fail(fmt.Sprintf("--option %v: nsqclient Reader options do not apply to go-nsq", options))
	}
	workers := *concurrency
	if workers == 0 {
		workers = *mif
	}
	if *handlerMS <= 0 {
		workers = 1
	}
	r.Concurrency = workers
	r.FirstS = make([]*float64, *nsqdCount)
	r.LastS = make([]*float64, *nsqdCount)
	r.PerNsqd = make([]int, *nsqdCount)
	r.Timeline = [][]int{}
	rec := &fleetRecorder{
		expected: *expect, nsqd: *nsqdCount, bucket: r.BucketS, seen: make([]bool, *expect),
		handler: time.Duration(*handlerMS * float64(time.Millisecond)), done: make(chan struct{}), r: r,
	}
	if *expect == 0 {
		close(rec.done)
	}
	cfg := nsq.NewConfig()
	cfg.MaxInFlight = *mif
	cons, err := nsq.NewConsumer(*topic, *channel, cfg)
	if err != nil {
		return fail(err.Error())
	}
	cons.SetLogger(quietLogger(), nsq.LogLevelError)
	if workers == 1 {
		cons.AddHandler(rec)
	} else {
		cons.AddConcurrentHandlers(rec, workers)
	}
	stop := make(chan struct{})
	if *stopOnStdin {
		go func() {
			_, _ = bufio.NewReader(os.Stdin).ReadString('\n') // a line or EOF
			close(stop)
		}()
	}
	cpu0, _ := cpuAndRSS()
	rec.mu.Lock()
	rec.t0 = time.Now()
	rec.mu.Unlock()
	startUnix := float64(rec.t0.UnixNano()) / 1e9
	if err := cons.ConnectToNSQLookupd(*lookupd); err != nil {
		return fail(err.Error())
	}
	stoppedBy := "done"
	select {
	case <-rec.done:
	case <-stop:
		stoppedBy = "stdin"
	case <-time.After(time.Duration(*maxDuration * float64(time.Second))):
		stoppedBy = "max-duration"
	}
	endS := time.Since(rec.t0).Seconds()
	cpu1, rss := cpuAndRSS()
	conns := cons.Stats().Connections
	stopConsumer(cons)
	rec.mu.Lock()
	out := rec.r
	rec.mu.Unlock()
	out.StartUnix, out.EndS, out.StoppedBy = startUnix, endS, stoppedBy
	out.CPUS, out.MaxRSSKiB, out.Connections = cpu1-cpu0, rss, conns
	if workers == 1 {
		out.Notes = "AddHandler (1 goroutine)"
	} else {
		out.Notes = fmt.Sprintf("AddConcurrentHandlers(h, %d), time.Sleep(%gms)", workers, *handlerMS)
	}
	emit(out)
	return 0
}

type stringList []string

func (s *stringList) String() string     { return fmt.Sprint(*s) }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
