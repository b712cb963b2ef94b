package main

import (
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

// echoServe stands in for the gRPC server: it keeps every connection open and
// echoes what it reads.
func echoServe(l net.Listener) error {
	for {
		conn, err := l.Accept()
		if err != nil {
			return err
		}
		go io.Copy(conn, conn)
	}
}

func freeAddress(t *testing.T) string {
	t.Helper()
	probe, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer probe.Close()
	return probe.Addr().String()
}

func echoes(conn net.Conn) bool {
	conn.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := conn.Write([]byte("x")); err != nil {
		return false
	}
	buf := make([]byte, 1)
	_, err := io.ReadFull(conn, buf)
	return err == nil && buf[0] == 'x'
}

func TestTheLeaderPortFollowsTheLeaderFile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "leading")
	clock := time.Now()
	var changes []bool
	gate := &leaderGate{
		address: freeAddress(t), file: file, maxAge: 6 * time.Second,
		serve: echoServe, now: func() time.Time { return clock },
		onChange: func(open bool) { changes = append(changes, open) },
	}
	check := func(want bool) {
		t.Helper()
		open, err := gate.check()
		if err != nil || open != want {
			t.Fatalf("check: open %v, %v; want open %v", open, err, want)
		}
	}
	write := func() {
		t.Helper()
		if err := os.WriteFile(file, []byte("term 3\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(file, clock, clock); err != nil {
			t.Fatal(err)
		}
	}
	refused := func() {
		t.Helper()
		if conn, err := net.Dial("tcp", gate.address); err == nil {
			conn.Close()
			t.Fatal("the leader port accepted a connection while this pod does not lead")
		}
	}

	served := func(failure string) net.Conn {
		t.Helper()
		conn, err := net.Dial("tcp", gate.address)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		if !echoes(conn) {
			t.Fatal(failure)
		}
		return conn
	}

	check(false) // no file: not leading
	refused()

	write()
	check(true)
	held := served("a connection to the leader port is not served")
	check(true) // nothing changes while the file stays fresh

	os.Remove(file) // the store stopped leading
	check(false)
	if echoes(held) {
		t.Fatal("a connection accepted while leading stays open after the pod stopped leading")
	}
	refused()

	write() // leading again: the same address opens again
	check(true)
	again := served("the reopened leader port does not serve")

	clock = clock.Add(7 * time.Second) // the store died or froze: its file goes stale
	check(false)
	if echoes(again) {
		t.Fatal("a connection stays open behind a stale leader file")
	}
	refused()

	if want := []bool{true, false, true, false}; !slices.Equal(changes, want) {
		t.Fatalf("changes %v, want %v", changes, want)
	}
}

func TestLeaderFlagsGoTogether(t *testing.T) {
	base := []string{"-listen", "127.0.0.1:0", "-upstream", "unix:///tmp/x.sock"}
	if _, err := parseFlags(append(base, "-leader-listen", "127.0.0.1:0")); err == nil {
		t.Error("-leader-listen without -leader-file was accepted")
	}
	if _, err := parseFlags(append(base, "-leader-file", "/tmp/leading")); err == nil {
		t.Error("-leader-file without -leader-listen was accepted")
	}
	o, err := parseFlags(append(base, "-leader-listen", "127.0.0.1:0", "-leader-file", "/tmp/l"))
	if err != nil || o.leaderFileMaxAge != 6*time.Second {
		t.Errorf("both flags: %+v, %v", o, err)
	}
}
