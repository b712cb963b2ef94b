package main

import (
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestMethodLabelsAreBounded(t *testing.T) {
	cases := map[string]string{
		"/apache.rocketmq.v2.MessagingService/SendMessage": "SendMessage",
		"/apache.rocketmq.v2.MessagingService/Telemetry":   "Telemetry",
		"/apache.rocketmq.v2.MessagingService/Bogus":       "other",
		"/grpc.health.v1.Health/Check":                     "Health",
		"/x.y/Z" + strings.Repeat("z", 500):                "other",
		"":                                                 "other",
	}
	for method, want := range cases {
		if got := methodLabel(method); got != want {
			t.Errorf("methodLabel(%q) = %q, want %q", method[:min(len(method), 60)], got, want)
		}
	}
}

func TestMetricsCountCallsAndServeTheRuntime(t *testing.T) {
	m := newFrontMetrics()
	start := time.Now()
	m.observe("/apache.rocketmq.v2.MessagingService/SendMessage", start, nil)
	m.observe("/apache.rocketmq.v2.MessagingService/SendMessage", start, nil)
	m.observe("/apache.rocketmq.v2.MessagingService/AckMessage", start,
		status.Error(codes.Unavailable, "popack is down"))
	m.observe("/evil/"+strings.Repeat("x", 64), start, errors.New("not a status"))
	m.responses(30, 2)

	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = m.serve(lis) }()
	defer lis.Close()
	reply, err := http.Get("http://" + lis.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer reply.Body.Close()
	body, _ := io.ReadAll(reply.Body)
	text := string(body)
	for _, want := range []string{
		`popfleet_front_calls_total{code="OK",method="SendMessage"} 2`,
		`popfleet_front_calls_total{code="Unavailable",method="AckMessage"} 1`,
		`popfleet_front_calls_total{code="Unknown",method="other"} 1`,
		`popfleet_front_call_seconds_count{method="SendMessage"} 2`,
		`popfleet_front_receive_responses_total{source="built"} 30`,
		`popfleet_front_receive_responses_total{source="popack"} 2`,
		"popfleet_front_calls_in_flight 0",
		"go_goroutines ",
		"process_cpu_seconds_total ",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics lacks %q", want)
		}
	}
}

func TestANilMetricsCountsNothing(t *testing.T) {
	var m *frontMetrics
	m.observe("/apache.rocketmq.v2.MessagingService/SendMessage", time.Now(), nil)
	m.responses(1, 1) // no panic: popfront runs without -metrics-listen
}
