// gobench: the go-nsq side of the comparison (`python -m benchmarks.compare`).
//
// It speaks the same tiny protocol as the Python peer drivers (benchmarks/compare/drivers):
//
//	gobench list                  -> one JSON line: client, version, runtime, scenarios
//	gobench run --scenario pub ... -> one JSON line with the result (see result below)
//
// Scenarios: pub (N goroutines, each a synchronous Publish: N publishes outstanding),
// pub-async (PublishAsync with a window of N outstanding), mpub (MultiPublish batches from
// --mpub-concurrency goroutines), e2e (a Consumer on the topic, publish with N goroutines, FIN in
// the handler), drain (consume a channel the harness preloaded). Bodies carry an 8-byte
// big-endian sequence id and an 8-byte big-endian publish time (Unix ns), so loss and duplicates
// are counted exactly. GO_MAX_PROCS=n (environment) sets runtime.GOMAXPROCS(n).
//
//	gobench fleet --lookupd-http ADDR ... -> the fleet benchmark's consumer (fleet.go)
package main

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nsqio/go-nsq"
)

const goNsqVersion = "1.1.0"

type latency struct {
	P50 float64 `json:"p50"`
	P95 float64 `json:"p95"`
	P99 float64 `json:"p99"`
	Max float64 `json:"max"`
}

type result struct {
	Nsqbench      int      `json:"nsqbench"`
	Client        string   `json:"client"`
	Version       string   `json:"version"`
	Runtime       string   `json:"runtime"`
	Scenario      string   `json:"scenario"`
	Status        string   `json:"status"`
	Reason        string   `json:"reason,omitempty"`
	Messages      int      `json:"messages"`
	PayloadSize   int      `json:"payload_size"`
	BatchSize     int      `json:"batch_size"`
	Concurrency   int      `json:"concurrency"`
	MaxInFlight   int      `json:"max_in_flight"`
	DurationS     float64  `json:"duration_s"`
	PublishS      *float64 `json:"publish_duration_s"`
	Latency       *latency `json:"latency_ms"`
	Received      int      `json:"received"`
	Missing       int      `json:"missing"`
	Duplicates    int      `json:"duplicates"`
	PublishErrors int      `json:"publish_errors"`
	FinErrors     int      `json:"fin_errors"`
	TimedOut      bool     `json:"timed_out"`
	CPUS          float64  `json:"cpu_s"`
	MaxRSSKiB     int64    `json:"max_rss_kib"`
	Notes         string   `json:"notes"`
	GoMaxProcs    int      `json:"gomaxprocs"`
}

type options struct {
	scenario        string
	nsqdTCP         string
	topic           string
	channel         string
	messages        int
	payloadSize     int
	concurrency     int
	batchSize       int
	mpubConcurrency int
	maxInFlight     int
	timeout         time.Duration
}

var scenarios = []string{"pub", "pub-async", "mpub", "e2e", "drain"}

func runtimeGoMaxProcs() int { return runtime.GOMAXPROCS(0) }

func runtimeName() string {
	return fmt.Sprintf("%s GOMAXPROCS=%d", runtime.Version(), runtime.GOMAXPROCS(0))
}

func emit(v any) {
	data, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	fmt.Println(string(data))
}

func cpuAndRSS() (float64, int64) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, 0
	}
	cpu := float64(ru.Utime.Sec+ru.Stime.Sec) + float64(ru.Utime.Usec+ru.Stime.Usec)/1e6
	return cpu, peakRSSKiB(int64(ru.Maxrss))
}

// peakRSSKiB reads VmHWM (this process's own peak): ru_maxrss survives exec, so it would report
// the size of the harness that started us.
func peakRSSKiB(fallback int64) int64 {
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return fallback
	}
	for _, line := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(line, "VmHWM:") {
			fields := strings.Fields(line)
			if len(fields) >= 2 {
				if v, err := strconv.ParseInt(fields[1], 10, 64); err == nil {
					return v
				}
			}
		}
	}
	return fallback
}

func percentiles(ns []int64) *latency {
	if len(ns) == 0 {
		return nil
	}
	sort.Slice(ns, func(i, j int) bool { return ns[i] < ns[j] })
	pick := func(p float64) float64 {
		// nearest rank, as the Python side computes it
		rank := int(float64(len(ns))*p/100.0 + 0.999999999)
		if rank < 1 {
			rank = 1
		}
		if rank > len(ns) {
			rank = len(ns)
		}
		return float64(ns[rank-1]) / 1e6
	}
	return &latency{P50: pick(50), P95: pick(95), P99: pick(99), Max: float64(ns[len(ns)-1]) / 1e6}
}

type bodyMaker struct{ pad []byte }

func newBodyMaker(size int) bodyMaker {
	if size < 16 {
		size = 16
	}
	pad := make([]byte, size-16)
	for i := range pad {
		pad[i] = 'x'
	}
	return bodyMaker{pad: pad}
}

func (b bodyMaker) make(seq int) []byte {
	body := make([]byte, 16+len(b.pad))
	binary.BigEndian.PutUint64(body[0:8], uint64(seq))
	binary.BigEndian.PutUint64(body[8:16], uint64(time.Now().UnixNano()))
	copy(body[16:], b.pad)
	return body
}

func quietLogger() *log.Logger { return log.New(io.Discard, "", 0) }

func newProducer(addr string) (*nsq.Producer, error) {
	cfg := nsq.NewConfig()
	p, err := nsq.NewProducer(addr, cfg)
	if err != nil {
		return nil, err
	}
	p.SetLogger(quietLogger(), nsq.LogLevelError)
	if err := p.Ping(); err != nil {
		return nil, err
	}
	return p, nil
}

// publishPub publishes seq 0..n-1 from `workers` goroutines; returns per-message ack latencies.
func publishPub(p *nsq.Producer, o options, workers int) ([]int64, int) {
	bm := newBodyMaker(o.payloadSize)
	var next int64 = -1
	var failed int64
	lat := make([]int64, o.messages)
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				seq := int(atomic.AddInt64(&next, 1))
				if seq >= o.messages {
					return
				}
				t0 := time.Now()
				if err := p.Publish(o.topic, bm.make(seq)); err != nil {
					atomic.AddInt64(&failed, 1)
					lat[seq] = -1
					continue
				}
				lat[seq] = time.Since(t0).Nanoseconds()
			}
		}()
	}
	wg.Wait()
	out := lat[:0]
	for _, v := range lat {
		if v >= 0 {
			out = append(out, v)
		}
	}
	return out, int(failed)
}

func runPub(o options, r *result) error {
	p, err := newProducer(o.nsqdTCP)
	if err != nil {
		return err
	}
	defer p.Stop()
	start := time.Now()
	lat, failed := publishPub(p, o, o.concurrency)
	r.DurationS = time.Since(start).Seconds()
	r.Latency = percentiles(lat)
	r.PublishErrors = failed
	r.Notes = fmt.Sprintf("%d goroutines, synchronous Publish", o.concurrency)
	return nil
}

func runPubAsync(o options, r *result) error {
	p, err := newProducer(o.nsqdTCP)
	if err != nil {
		return err
	}
	defer p.Stop()
	bm := newBodyMaker(o.payloadSize)
	done := make(chan *nsq.ProducerTransaction, o.concurrency)
	lat := make([]int64, 0, o.messages)
	failed := 0
	outstanding := 0
	collect := func() {
		t := <-done
		outstanding--
		if t.Error != nil {
			failed++
			return
		}
		lat = append(lat, time.Since(t.Args[0].(time.Time)).Nanoseconds())
	}
	start := time.Now()
	for seq := 0; seq < o.messages; seq++ {
		for outstanding >= o.concurrency {
			collect()
		}
		if err := p.PublishAsync(o.topic, bm.make(seq), done, time.Now()); err != nil {
			failed++
			continue
		}
		outstanding++
	}
	for outstanding > 0 {
		collect()
	}
	r.DurationS = time.Since(start).Seconds()
	r.Latency = percentiles(lat)
	r.PublishErrors = failed
	r.Notes = fmt.Sprintf("PublishAsync, window %d", o.concurrency)
	return nil
}

func runMpub(o options, r *result) error {
	p, err := newProducer(o.nsqdTCP)
	if err != nil {
		return err
	}
	defer p.Stop()
	bm := newBodyMaker(o.payloadSize)
	batches := (o.messages + o.batchSize - 1) / o.batchSize
	var next int64 = -1
	var failed int64
	lat := make([]int64, batches)
	var wg sync.WaitGroup
	start := time.Now()
	for w := 0; w < o.mpubConcurrency; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				b := int(atomic.AddInt64(&next, 1))
				if b >= batches {
					return
				}
				lo, hi := b*o.batchSize, (b+1)*o.batchSize
				if hi > o.messages {
					hi = o.messages
				}
				bodies := make([][]byte, 0, hi-lo)
				for seq := lo; seq < hi; seq++ {
					bodies = append(bodies, bm.make(seq))
				}
				t0 := time.Now()
				if err := p.MultiPublish(o.topic, bodies); err != nil {
					atomic.AddInt64(&failed, int64(hi-lo))
					lat[b] = -1
					continue
				}
				lat[b] = time.Since(t0).Nanoseconds()
			}
		}()
	}
	wg.Wait()
	r.DurationS = time.Since(start).Seconds()
	ok := lat[:0]
	for _, v := range lat {
		if v >= 0 {
			ok = append(ok, v)
		}
	}
	r.Latency = percentiles(ok)
	r.PublishErrors = int(failed)
	r.Concurrency = o.mpubConcurrency
	r.Notes = fmt.Sprintf("%d goroutines, MultiPublish; latency per batch", o.mpubConcurrency)
	return nil
}

type collector struct {
	mu       sync.Mutex
	seen     []bool
	unique   int
	received int
	dups     int
	bad      int
	lat      []int64
	lastFin  time.Time
	done     chan struct{}
	once     sync.Once
	expected int
}

func newCollector(n int) *collector {
	return &collector{seen: make([]bool, n), lat: make([]int64, 0, n), done: make(chan struct{}), expected: n}
}

func (c *collector) HandleMessage(m *nsq.Message) error {
	now := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.received++
	if len(m.Body) < 16 {
		c.bad++
		return nil
	}
	seq := int(binary.BigEndian.Uint64(m.Body[0:8]))
	sent := int64(binary.BigEndian.Uint64(m.Body[8:16]))
	if seq < 0 || seq >= c.expected {
		c.bad++
		return nil
	}
	if c.seen[seq] {
		c.dups++
		return nil
	}
	c.seen[seq] = true
	c.unique++
	c.lat = append(c.lat, now.UnixNano()-sent)
	if c.unique == c.expected {
		c.lastFin = now
		c.once.Do(func() { close(c.done) })
	}
	return nil // go-nsq FINs on return
}

func newConsumer(o options, c *collector) (*nsq.Consumer, error) {
	cfg := nsq.NewConfig()
	cfg.MaxInFlight = o.maxInFlight
	// go-nsq sends 250ms by default; use the same flush interval as the nsqd flag (BENCHMARKS.md)
	cfg.OutputBufferTimeout = 25 * time.Millisecond
	cons, err := nsq.NewConsumer(o.topic, o.channel, cfg)
	if err != nil {
		return nil, err
	}
	cons.SetLogger(quietLogger(), nsq.LogLevelError)
	cons.AddHandler(c)
	return cons, nil
}

func stopConsumer(cons *nsq.Consumer) {
	cons.Stop()
	select {
	case <-cons.StopChan:
	case <-time.After(10 * time.Second):
	}
}

func finishConsume(o options, r *result, c *collector, start time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	r.Received = c.received
	r.Missing = o.messages - c.unique
	r.Duplicates = c.dups
	r.FinErrors = c.bad
	r.Latency = percentiles(c.lat)
	if c.unique == o.messages {
		r.DurationS = c.lastFin.Sub(start).Seconds()
	} else {
		r.DurationS = time.Since(start).Seconds()
	}
}

func runE2E(o options, r *result) error {
	c := newCollector(o.messages)
	cons, err := newConsumer(o, c)
	if err != nil {
		return err
	}
	if err := cons.ConnectToNSQD(o.nsqdTCP); err != nil {
		return err
	}
	defer stopConsumer(cons)
	p, err := newProducer(o.nsqdTCP)
	if err != nil {
		return err
	}
	defer p.Stop()
	start := time.Now()
	_, failed := publishPub(p, o, o.concurrency)
	pubS := time.Since(start).Seconds()
	r.PublishS = &pubS
	r.PublishErrors = failed
	select {
	case <-c.done:
	case <-time.After(o.timeout):
		r.TimedOut = true
	}
	finishConsume(o, r, c, start)
	r.Notes = fmt.Sprintf("publish: %d goroutines; consumer: 1 handler goroutine, latency publish->handler", o.concurrency)
	return nil
}

func runDrain(o options, r *result) error {
	c := newCollector(o.messages)
	cons, err := newConsumer(o, c)
	if err != nil {
		return err
	}
	start := time.Now()
	if err := cons.ConnectToNSQD(o.nsqdTCP); err != nil {
		return err
	}
	defer stopConsumer(cons)
	select {
	case <-c.done:
	case <-time.After(o.timeout):
		r.TimedOut = true
	}
	finishConsume(o, r, c, start)
	r.Latency = nil // bodies were published before the clock started
	r.Notes = "1 handler goroutine"
	return nil
}

func main() {
	if v := os.Getenv("GO_MAX_PROCS"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			fmt.Fprintf(os.Stderr, "gobench: GO_MAX_PROCS must be a positive integer, got %q\n", v)
			os.Exit(2)
		}
		runtime.GOMAXPROCS(n)
	}
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "usage: gobench list | gobench run --scenario NAME ... | gobench fleet ...")
		os.Exit(2)
	}
	switch os.Args[1] {
	case "list":
		sc := map[string]string{}
		for _, s := range scenarios {
			sc[s] = "ok"
		}
		emit(map[string]any{
			"nsqbench": 1, "client": "go-nsq", "version": goNsqVersion,
			"runtime": runtimeName(), "gomaxprocs": runtime.GOMAXPROCS(0), "scenarios": sc,
			"fleet": "ok",
		})
	case "run":
		os.Exit(run(os.Args[2:]))
	case "fleet":
		os.Exit(runFleet(os.Args[2:]))
	default:
		fmt.Fprintf(os.Stderr, "gobench: unknown command %q\n", os.Args[1])
		os.Exit(2)
	}
}

func run(args []string) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	var o options
	var timeoutS float64
	fs.StringVar(&o.scenario, "scenario", "", "pub, pub-async, mpub, e2e or drain")
	fs.StringVar(&o.nsqdTCP, "nsqd-tcp", "127.0.0.1:4150", "nsqd TCP address")
	fs.StringVar(&o.topic, "topic", "", "topic")
	fs.StringVar(&o.channel, "channel", "bench", "channel (e2e, drain)")
	fs.IntVar(&o.messages, "messages", 10000, "messages")
	fs.IntVar(&o.payloadSize, "payload-size", 512, "body size in bytes (>= 16)")
	fs.IntVar(&o.concurrency, "concurrency", 256, "outstanding publishes")
	fs.IntVar(&o.batchSize, "batch-size", 250, "MPUB batch size")
	fs.IntVar(&o.mpubConcurrency, "mpub-concurrency", 4, "outstanding MPUB batches")
	fs.IntVar(&o.maxInFlight, "max-in-flight", 1024, "consumer max in flight")
	fs.Float64Var(&timeoutS, "timeout", 120, "seconds")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	o.timeout = time.Duration(timeoutS * float64(time.Second))
	r := result{
		Nsqbench: 1, Client: "go-nsq", Version: goNsqVersion, Runtime: runtimeName(),
		Scenario: o.scenario, Status: "ok", Messages: o.messages, PayloadSize: o.payloadSize,
		BatchSize: o.batchSize, Concurrency: o.concurrency, MaxInFlight: o.maxInFlight,
		GoMaxProcs: runtime.GOMAXPROCS(0),
	}
	if o.topic == "" {
		fmt.Fprintln(os.Stderr, "gobench: --topic is required")
		return 2
	}
	cpu0, _ := cpuAndRSS()
	var err error
	switch o.scenario {
	case "pub":
		err = runPub(o, &r)
	case "pub-async":
		err = runPubAsync(o, &r)
	case "mpub":
		err = runMpub(o, &r)
	case "e2e":
		err = runE2E(o, &r)
	case "drain":
		err = runDrain(o, &r)
	default:
		err = errors.New("unsupported scenario")
		r.Status = "unsupported"
		r.Reason = fmt.Sprintf("gobench has no scenario %q", o.scenario)
	}
	cpu1, rss := cpuAndRSS()
	r.CPUS = cpu1 - cpu0
	r.MaxRSSKiB = rss
	if err != nil && r.Status == "ok" {
		r.Status = "error"
		r.Reason = err.Error()
	}
	emit(r)
	return 0
}
