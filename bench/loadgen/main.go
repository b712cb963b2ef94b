// Command loadgen is the peer benchmark's compiled load generator: it drives one
// phase against one system on loopback and prints the phase's figures as one JSON
// line on stdout (bench/peers/loadgen.py runs it and reads that line).
//
// Systems: "popfleet" and "rocketmq" through the RocketMQ v2 gRPC protocol (the
// stubs of the official Go client module), "nats" (JetStream, nats.go) and
// "redis" (Streams, go-redis). Phases mirror bench/peers/workload.py: produce,
// popack (1 or N consumers over a backlog), e2e (producer + 1 consumer at once),
// latency (a paced producer with a schedule fixed in advance; latency is measured
// from each message's intended send time, so there is no coordinated omission),
// redelivery (lateness after the invisible deadline), and ready (the endpoint
// answers and every topic resolves).
//
// Every loop is bounded in count and in time (-cap-s); the endpoint must be a
// loopback address. Errors go to stderr with exit status 1.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net"
	"os"
	"strings"
	"time"
)

type options struct {
	system    string
	endpoint  string
	phase     string
	topic     string
	group     string
	topics    string
	count     int
	consumers int
	inflight  int
	batch     int
	bodyBytes int
	rate      float64
	duration  time.Duration
	invisible time.Duration
	changeTo  time.Duration // redelivery, v2 only: ChangeInvisibleDuration to this after receiving
	await     time.Duration // how long an empty receive may wait on the server
	capTime   time.Duration
	redisPoll time.Duration
}

func parseOptions(args []string) (options, error) {
	var o options
	var durationS, invisibleS, changeToS, awaitS, capS, redisPollS float64
	fs := flag.NewFlagSet("loadgen", flag.ContinueOnError)
	fs.StringVar(&o.system, "system", "", "popfleet | rocketmq | nats | redis")
	fs.StringVar(&o.endpoint, "endpoint", "", "HOST:PORT on loopback")
	fs.StringVar(&o.phase, "phase", "", "ready | produce | popack | e2e | latency | redelivery")
	fs.StringVar(&o.topic, "topic", "bench", "topic (stream) of the phase")
	fs.StringVar(&o.group, "group", "g1", "consumer group of the phase")
	fs.StringVar(&o.topics, "topics", "", "ready: comma-separated topics that must resolve")
	fs.IntVar(&o.count, "count", 20000, "messages to send, or to consume in popack")
	fs.IntVar(&o.consumers, "consumers", 1, "popack: consumers, each with its own connection")
	fs.IntVar(&o.inflight, "inflight", 4, "batches a producer keeps in flight")
	fs.IntVar(&o.batch, "batch", 32, "messages per send and per receive")
	fs.IntVar(&o.bodyBytes, "body-bytes", 1024, "message body size")
	fs.Float64Var(&o.rate, "rate", 1000, "latency: messages per second")
	fs.Float64Var(&durationS, "duration-s", 5, "latency: seconds of paced sending")
	fs.Float64Var(&invisibleS, "invisible-s", 60, "invisible time (AckWait, min-idle-time)")
	fs.Float64Var(&changeToS, "change-invisible-s", 0,
		"redelivery, v2 only: after receiving, ChangeInvisibleDuration to this (the RocketMQ proxy receives with >= 10 s)")
	fs.Float64Var(&awaitS, "await-s", 1, "how long an empty receive may wait (v2: the official client's await duration)")
	fs.Float64Var(&capS, "cap-s", 60, "time cap of the phase")
	fs.Float64Var(&redisPollS, "redis-poll-s", 0.05, "redis redelivery: XAUTOCLAIM polling interval")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	o.duration = seconds(durationS)
	o.invisible = seconds(invisibleS)
	o.changeTo = seconds(changeToS)
	o.await = seconds(awaitS)
	o.capTime = seconds(capS)
	o.redisPoll = seconds(redisPollS)
	switch o.system {
	case "popfleet", "rocketmq", "nats", "redis":
	default:
		return o, fmt.Errorf("unknown -system %q", o.system)
	}
	host, _, err := net.SplitHostPort(o.endpoint)
	if err != nil {
		return o, fmt.Errorf("-endpoint %q: %w", o.endpoint, err)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return o, fmt.Errorf("-endpoint %q: only loopback addresses are driven", o.endpoint)
	}
	if o.count <= 0 || o.batch <= 0 || o.inflight <= 0 || o.consumers <= 0 || o.bodyBytes < headerBytes {
		return o, fmt.Errorf("counts must be positive and -body-bytes >= %d", headerBytes)
	}
	return o, nil
}

func seconds(s float64) time.Duration { return time.Duration(s * float64(time.Second)) }

func run(ctx context.Context, o options) (map[string]any, error) {
	switch o.phase {
	case "ready":
		return ready(ctx, o)
	case "produce":
		return produce(ctx, o)
	case "popack":
		return popAck(ctx, o)
	case "e2e":
		return endToEnd(ctx, o)
	case "latency":
		return latency(ctx, o)
	case "redelivery":
		return redelivery(ctx, o)
	}
	return nil, fmt.Errorf("unknown -phase %q", o.phase)
}

func ready(ctx context.Context, o options) (map[string]any, error) {
	topics := strings.Split(o.topics, ",")
	if o.topics == "" {
		topics = []string{o.topic}
	}
	for _, topic := range topics {
		t := o
		t.topic = topic
		client, err := connect(ctx, t, roleProducer, "ready")
		if err != nil {
			return nil, fmt.Errorf("topic %s: %w", topic, err)
		}
		if err := client.Close(); err != nil {
			return nil, err
		}
	}
	return map[string]any{"topics": topics}, nil
}

func main() {
	o, err := parseOptions(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(2)
	}
	// A hard stop beyond the phase's own cap: setup, drain and teardown included.
	ctx, cancel := context.WithTimeout(context.Background(), o.capTime+o.duration+o.invisible+60*time.Second)
	defer cancel()
	figures, err := run(ctx, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "loadgen %s %s: %v\n", o.system, o.phase, err)
		os.Exit(1)
	}
	figures["system"] = o.system
	figures["phase"] = o.phase
	line, err := json.Marshal(figures)
	if err != nil {
		fmt.Fprintln(os.Stderr, "loadgen:", err)
		os.Exit(1)
	}
	fmt.Println(string(line))
}
