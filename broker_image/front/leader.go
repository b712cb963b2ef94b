package main

// The leader port (issue 18, docs/design/2026-11-28-replication.md, "What clients see").
//
// In a replicated broker set every pod serves the access point (-listen: routes,
// heartbeats, telemetry), and only the leader's pod serves the leader port
// (-leader-listen), which a Service per broker set targets. The store role says
// whether its replica leads with a file (-leader-file) it rewrites every round
// while leading and removes when it stops. popfront opens the leader port while
// that file exists and was written within -leader-file-max-age, and otherwise
// closes it together with every connection accepted on it: a client holding a
// connection to a deposed leader reconnects through the Service and reaches the
// new one, and a store that died or froze while leading stops being the leader's
// address once its file is stale.

import (
	"errors"
	"log"
	"net"
	"os"
	"sync"
	"time"
)

// leaderFileFresh reports whether the file at path exists and was written
// within maxAge of now.
func leaderFileFresh(path string, maxAge time.Duration, now time.Time) bool {
	info, err := os.Stat(path)
	if err != nil {
		return false
	}
	return now.Sub(info.ModTime()) <= maxAge
}

// trackedListener remembers the connections it accepted, so they can be closed
// together with it.
type trackedListener struct {
	net.Listener
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

func newTrackedListener(inner net.Listener) *trackedListener {
	return &trackedListener{Listener: inner, conns: map[net.Conn]struct{}{}}
}

func (l *trackedListener) Accept() (net.Conn, error) {
	conn, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		conn.Close()
		return nil, net.ErrClosed
	}
	tracked := &trackedConn{Conn: conn, owner: l}
	l.conns[tracked] = struct{}{}
	return tracked, nil
}

// closeAll closes the listener and every connection it accepted.
func (l *trackedListener) closeAll() {
	l.mu.Lock()
	l.closed = true
	conns := make([]net.Conn, 0, len(l.conns))
	for conn := range l.conns {
		conns = append(conns, conn)
	}
	l.conns = map[net.Conn]struct{}{}
	l.mu.Unlock()
	l.Listener.Close()
	for _, conn := range conns {
		conn.Close()
	}
}

func (l *trackedListener) forget(conn net.Conn) {
	l.mu.Lock()
	delete(l.conns, conn)
	l.mu.Unlock()
}

type trackedConn struct {
	net.Conn
	owner *trackedListener
	once  sync.Once
}

func (c *trackedConn) Close() error {
	c.once.Do(func() { c.owner.forget(c) })
	return c.Conn.Close()
}

// leaderGate opens and closes the leader port as the leader file says.
type leaderGate struct {
	address string
	file    string
	maxAge  time.Duration
	serve   func(net.Listener) error // the gRPC server's Serve
	now     func() time.Time

	mu       sync.Mutex
	listener *trackedListener // nil while closed
	onChange func(open bool)  // tests and the log
}

// check opens or closes the port to match the file once; it returns whether the
// port is open afterwards.
func (g *leaderGate) check() (bool, error) {
	fresh := leaderFileFresh(g.file, g.maxAge, g.now())
	g.mu.Lock()
	defer g.mu.Unlock()
	switch {
	case fresh && g.listener == nil:
		inner, err := net.Listen("tcp", g.address)
		if err != nil {
			return false, err
		}
		g.listener = newTrackedListener(inner)
		go func(l *trackedListener) {
			if err := g.serve(l); err != nil && !errors.Is(err, net.ErrClosed) {
				log.Printf("leader port: %v", err)
			}
		}(g.listener)
		g.changed(true)
	case !fresh && g.listener != nil:
		g.listener.closeAll()
		g.listener = nil
		g.changed(false)
	}
	return g.listener != nil, nil
}

func (g *leaderGate) changed(open bool) {
	if open {
		log.Printf("leader port %s open: this pod leads its broker set", g.address)
	} else {
		log.Printf("leader port %s closed with its connections: this pod does not lead", g.address)
	}
	if g.onChange != nil {
		g.onChange(open)
	}
}

// run checks every interval until stop is closed, then closes the port.
func (g *leaderGate) run(interval time.Duration, stop <-chan struct{}) {
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for {
		if _, err := g.check(); err != nil {
			log.Printf("leader port %s: %v", g.address, err)
		}
		select {
		case <-stop:
			g.mu.Lock()
			if g.listener != nil {
				g.listener.closeAll()
				g.listener = nil
			}
			g.mu.Unlock()
			return
		case <-ticker.C:
		}
	}
}
