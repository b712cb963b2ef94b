package main

// Metrics: popfront's own, on -metrics-listen (/metrics, Prometheus text format).
// popack counts every v2 call that reaches it (popfleet_broker_requests_total);
// these say what the front end itself does and costs: calls as the clients saw
// them (including those that never reached popack), how receives were answered,
// and the Go runtime and process figures that size spec.resources.front.
//
// Labels are bounded: method is one of the v2 service's methods, the health
// check's, or "other" (a client may name any method); code is a gRPC code name.

import (
	"errors"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"google.golang.org/grpc/status"
)

const (
	v2Prefix     = "/apache.rocketmq.v2.MessagingService/"
	healthPrefix = "/grpc.health.v1.Health/"
)

// v2Methods are the MessagingService methods a client may call (labels: the name alone).
var v2Methods = map[string]bool{
	"QueryRoute": true, "Heartbeat": true, "SendMessage": true, "QueryAssignment": true,
	"ReceiveMessage": true, "AckMessage": true, "ForwardMessageToDeadLetterQueue": true,
	"PullMessage": true, "UpdateOffset": true, "GetOffset": true, "QueryOffset": true,
	"EndTransaction": true, "Telemetry": true, "NotifyClientTermination": true,
	"ChangeInvisibleDuration": true, "RecallMessage": true,
}

type frontMetrics struct {
	registry *prometheus.Registry
	calls    *prometheus.CounterVec
	seconds  *prometheus.HistogramVec
	inFlight prometheus.Gauge
	items    *prometheus.CounterVec
	sent     *prometheus.CounterVec
	upstream *prometheus.CounterVec
}

func newFrontMetrics() *frontMetrics {
	m := &frontMetrics{
		registry: prometheus.NewRegistry(),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "popfleet_front_calls_total",
			Help: "Calls answered by popfront, by method and gRPC status code.",
		}, []string{"method", "code"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "popfleet_front_call_seconds",
			Help:    "Time from a call's start to its end as popfront saw it, by method (long polls included).",
			Buckets: []float64{0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30},
		}, []string{"method"}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "popfleet_front_calls_in_flight",
			Help: "Calls popfront is serving now (parked long polls and telemetry streams included).",
		}),
		items: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "popfleet_front_receive_responses_total",
			Help: "ReceiveMessage responses popfront streamed: built here from a delivery, or sent as popack serialized them.",
		}, []string{"source"}),
		sent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "popfleet_front_sent_messages_total",
			Help: "Messages of framed SendMessage calls: encoded here as records, or passed to popack as the client sent them (the reference path).",
		}, []string{"encoding"}),
		upstream: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "popfleet_front_upstream_calls_total",
			Help: "Calls popfront made to popack, by transport: framed (popack's frames socket) or grpc.",
		}, []string{"transport"}),
	}
	m.registry.MustRegister(m.calls, m.seconds, m.inFlight, m.items, m.sent, m.upstream,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// methodLabel bounds the method label: the v2 method's name, "Health", or "other".
func methodLabel(fullMethod string) string {
	if name, ok := strings.CutPrefix(fullMethod, v2Prefix); ok && v2Methods[name] {
		return name
	}
	if strings.HasPrefix(fullMethod, healthPrefix) {
		return "Health"
	}
	return "other"
}

// observe counts one finished call.
func (m *frontMetrics) observe(fullMethod string, started time.Time, err error) {
	if m == nil {
		return
	}
	method := methodLabel(fullMethod)
	m.calls.WithLabelValues(method, status.Code(err).String()).Inc()
	m.seconds.WithLabelValues(method).Observe(time.Since(started).Seconds())
}

func (m *frontMetrics) responses(built, forwarded int) {
	if m == nil {
		return
	}
	m.items.WithLabelValues("built").Add(float64(built))
	m.items.WithLabelValues("popack").Add(float64(forwarded))
}

// sentMessages counts the messages of one framed send by how they went.
func (m *frontMetrics) sentMessages(encoded, reference int) {
	if m == nil {
		return
	}
	m.sent.WithLabelValues("record").Add(float64(encoded))
	m.sent.WithLabelValues("reference").Add(float64(reference))
}

// upstreamCall counts one call to popack by its transport.
func (m *frontMetrics) upstreamCall(framed bool) {
	if m == nil {
		return
	}
	transport := "grpc"
	if framed {
		transport = "framed"
	}
	m.upstream.WithLabelValues(transport).Inc()
}

// serve answers /metrics on lis until it is closed.
func (m *frontMetrics) serve(lis net.Listener) error {
	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(m.registry, promhttp.HandlerOpts{}))
	server := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	if err := server.Serve(lis); err != nil && !errors.Is(err, http.ErrServerClosed) && !errors.Is(err, net.ErrClosed) {
		return err
	}
	return nil
}
