// popfront is popfleet's compiled front end for the RocketMQ v2 gRPC protocol.
//
// It terminates the clients' connections and forwards every call, frame by
// frame and without decoding it, to a popack endpoint (popbroker's v2
// server), with the client's metadata, deadline and cancellation. The one
// exception is MessagingService/ReceiveMessage: the v2 answer is a stream with
// one response per message, which costs the Python server about 60 µs of CPU
// per message; popfront asks popack for the whole answer as one unary call
// (popfleet.front.v1.Front/ReceiveMessage, answered with a ReceiveBatch:
// repeated bytes responses = 1) and writes the responses to the client itself.
//
// Usage:
//
//	popfront -listen HOST:PORT -upstream TARGET [-port-file PATH] [-metrics-listen HOST:PORT]
//	         [-tls-cert PEM -tls-key PEM] [-max-recv-bytes N] [-procs N] [-drain DURATION]
//	         [-frames auto|off] [-leader-listen HOST:PORT -leader-file PATH [-leader-file-max-age D]]
//
// TARGET is a gRPC target: unix:///path/to/socket or HOST:PORT. Only the
// client-facing side speaks TLS; the upstream is a Unix socket or loopback in
// the same pod. Design note: docs/design/2026-11-27-compiled-front-end.md.
package main

import (
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"strconv"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	_ "google.golang.org/grpc/encoding/gzip" // clients may compress their requests
	"google.golang.org/grpc/keepalive"
)

type options struct {
	listen, upstream, portFile string
	metricsListen              string
	tlsCert, tlsKey            string
	maxRecvBytes, procs        int
	gcPercent                  int
	drain                      time.Duration
	cpuProfile                 string
	frames                     string
	leaderListen, leaderFile   string
	leaderFileMaxAge           time.Duration
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("popfront", flag.ContinueOnError)
	fs.StringVar(&o.listen, "listen", "", "HOST:PORT the clients connect to")
	fs.StringVar(&o.upstream, "upstream", "", "gRPC target of the popack endpoint (unix:///path or HOST:PORT)")
	fs.StringVar(&o.portFile, "port-file", "", "write the bound port here once serving")
	fs.StringVar(&o.metricsListen, "metrics-listen", "", "HOST:PORT of /metrics (Prometheus); none when empty")
	fs.StringVar(&o.tlsCert, "tls-cert", "", "PEM certificate chain: the client side speaks TLS only")
	fs.StringVar(&o.tlsKey, "tls-key", "", "PEM private key of -tls-cert")
	fs.IntVar(&o.maxRecvBytes, "max-recv-bytes", 80<<20, "largest request frame accepted from a client")
	fs.DurationVar(&o.drain, "drain", 2*time.Second, "on SIGTERM, time running calls get before they are cut")
	// One P by default: forwarding is I/O, and on 2 cores a second P spins looking for work
	// (measured: 23% more CPU per message at the same load, docs/design/2026-11-27-compiled-front-end.md).
	fs.IntVar(&o.procs, "procs", 1, "GOMAXPROCS: OS threads running Go code at once")
	// GOGC 400, not Go's 100: popfront's live heap is a few MB and each message it
	// handles is garbage at once, so at 100 the collector ran every few thousand
	// messages and took a fifth of popfront's CPU (measured: docs/benchmarks-peers.md).
	fs.IntVar(&o.gcPercent, "gc-percent", 400, "GOGC: heap growth over the live heap before a collection (the GOGC variable, when set, wins)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a pprof CPU profile here until exit")
	fs.StringVar(&o.frames, "frames", "auto", "auto: hot calls to a unix:// upstream go framed to its .frames socket once it is there (frames.go); off: all over gRPC")
	fs.StringVar(&o.leaderListen, "leader-listen", "", "HOST:PORT served only while this pod leads its broker set (leader.go)")
	fs.StringVar(&o.leaderFile, "leader-file", "", "the file the store role keeps fresh while its replica leads")
	fs.DurationVar(&o.leaderFileMaxAge, "leader-file-max-age", 6*time.Second, "a leader file written longer ago than this is stale: the store died or froze")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.listen == "" || o.upstream == "" {
		return o, errors.New("-listen and -upstream are required")
	}
	if (o.tlsCert == "") != (o.tlsKey == "") {
		return o, errors.New("-tls-cert and -tls-key go together")
	}
	if o.maxRecvBytes <= 0 {
		return o, fmt.Errorf("-max-recv-bytes %d: must be positive", o.maxRecvBytes)
	}
	if o.gcPercent <= 0 {
		return o, fmt.Errorf("-gc-percent %d: must be positive", o.gcPercent)
	}
	if o.procs <= 0 {
		return o, fmt.Errorf("-procs %d: must be positive", o.procs)
	}
	if (o.leaderListen == "") != (o.leaderFile == "") {
		return o, errors.New("-leader-listen and -leader-file go together")
	}
	if o.leaderFileMaxAge <= 0 {
		return o, fmt.Errorf("-leader-file-max-age %v: must be positive", o.leaderFileMaxAge)
	}
	if o.frames != "auto" && o.frames != "off" {
		return o, fmt.Errorf("-frames %q: auto or off", o.frames)
	}
	return o, nil
}

func main() {
	log.SetFlags(log.LstdFlags | log.LUTC)
	log.SetPrefix("popfront ")
	o, err := parseFlags(os.Args[1:])
	if err != nil {
		log.Printf("%v", err)
		os.Exit(2)
	}
	if err := run(o); err != nil {
		log.Printf("%v", err)
		os.Exit(1)
	}
}

func run(o options) error {
	runtime.GOMAXPROCS(o.procs)
	if os.Getenv("GOGC") == "" {
		debug.SetGCPercent(o.gcPercent)
	}
	if o.cpuProfile != "" {
		out, err := os.Create(o.cpuProfile)
		if err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		if err := pprof.StartCPUProfile(out); err != nil {
			return fmt.Errorf("-cpuprofile: %w", err)
		}
		defer func() { pprof.StopCPUProfile(); out.Close() }()
	}
	upstream, err := grpc.NewClient(o.upstream,
		grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodecV2(rawCodec{}), grpc.MaxCallRecvMsgSize(1<<31-1),
			grpc.MaxCallSendMsgSize(o.maxRecvBytes)),
	)
	if err != nil {
		return fmt.Errorf("-upstream %q: %w", o.upstream, err)
	}
	defer upstream.Close()

	var framed *frames
	if path := framesPathOf(o.upstream); path != "" && o.frames == "auto" {
		framed = newFrames(path)
		defer framed.close()
	}

	var metrics *frontMetrics
	if o.metricsListen != "" {
		metrics = newFrontMetrics()
		metricsLis, err := net.Listen("tcp", o.metricsListen)
		if err != nil {
			return fmt.Errorf("-metrics-listen %q: %w", o.metricsListen, err)
		}
		defer metricsLis.Close()
		go func() {
			if err := metrics.serve(metricsLis); err != nil {
				log.Printf("metrics: %v", err)
			}
		}()
	}

	serverOpts := []grpc.ServerOption{
		grpc.ForceServerCodecV2(rawCodec{}),
		grpc.UnknownServiceHandler(newProxy(upstream, framed, metrics).handle),
		grpc.MaxRecvMsgSize(o.maxRecvBytes),
		// The official clients ping idle connections more often than grpc-go's default
		// policy (5 min) allows; refusing them would close their connections.
		grpc.KeepaliveEnforcementPolicy(keepalive.EnforcementPolicy{
			MinTime: 10 * time.Second, PermitWithoutStream: true,
		}),
	}
	if o.tlsCert != "" {
		creds, err := credentials.NewServerTLSFromFile(o.tlsCert, o.tlsKey)
		if err != nil {
			return fmt.Errorf("-tls-cert/-tls-key: %w", err)
		}
		serverOpts = append(serverOpts, grpc.Creds(creds))
	}
	server := grpc.NewServer(serverOpts...)

	lis, err := net.Listen("tcp", o.listen)
	if err != nil {
		return fmt.Errorf("-listen %q: %w", o.listen, err)
	}
	port := lis.Addr().(*net.TCPAddr).Port
	if o.portFile != "" {
		if err := writeFileAtomic(o.portFile, strconv.Itoa(port)+"\n"); err != nil {
			return fmt.Errorf("-port-file: %w", err)
		}
	}
	log.Printf("serving on %s, forwarding to %s (tls %v)", lis.Addr(), o.upstream, o.tlsCert != "")

	if o.leaderListen != "" {
		gate := &leaderGate{
			address: o.leaderListen, file: o.leaderFile, maxAge: o.leaderFileMaxAge,
			serve: server.Serve, now: time.Now,
		}
		gateStop := make(chan struct{})
		defer close(gateStop)
		go gate.run(leaderCheckInterval, gateStop)
	}

	stop := make(chan os.Signal, 1)
	signal.Notify(stop, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		sig := <-stop
		log.Printf("%v: draining for up to %v", sig, o.drain)
		done := make(chan struct{})
		go func() { server.GracefulStop(); close(done) }()
		select {
		case <-done:
		case <-time.After(o.drain):
			server.Stop()
		}
	}()
	return server.Serve(lis)
}

// leaderCheckInterval is how often the leader file is looked at: a deposed
// leader's port closes at most this long after its store removed the file.
const leaderCheckInterval = 200 * time.Millisecond

// writeFileAtomic writes through a temporary file and a rename, so a reader
// never sees a partial port.
func writeFileAtomic(path, text string) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(text), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}
