package main

import (
	"bytes"
	"context"
	"testing"

	"google.golang.org/grpc/metadata"
	"google.golang.org/protobuf/encoding/protowire"
)

func batchOf(items ...[]byte) []byte {
	var b []byte
	for _, item := range items {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, item)
	}
	return b
}

func TestSplitBatchReturnsTheResponsesInOrder(t *testing.T) {
	want := [][]byte{[]byte("status"), bytes.Repeat([]byte("m"), 70000), {}, []byte("timestamp")}
	got, err := splitBatch(batchOf(want...))
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != len(want) {
		t.Fatalf("got %d responses, want %d", len(got), len(want))
	}
	for i := range want {
		if !bytes.Equal(got[i], want[i]) {
			t.Errorf("response %d differs", i)
		}
	}
	if got, err := splitBatch(nil); err != nil || len(got) != 0 {
		t.Errorf("an empty batch: %v, %v", got, err)
	}
}

func TestSplitBatchRefusesDamagedInput(t *testing.T) {
	whole := batchOf([]byte("first"), []byte("second"))
	for cut := 1; cut < len(whole); cut++ {
		got, err := splitBatch(whole[:cut])
		if err == nil && !(len(got) == 1 && cut == len(batchOf([]byte("first")))) {
			t.Errorf("cut at %d: accepted %d responses", cut, len(got))
		}
	}
	other := protowire.AppendBytes(protowire.AppendTag(nil, 2, protowire.BytesType), []byte("x"))
	if _, err := splitBatch(other); err == nil {
		t.Error("field 2 accepted")
	}
	varint := protowire.AppendVarint(protowire.AppendTag(nil, 1, protowire.VarintType), 7)
	if _, err := splitBatch(varint); err == nil {
		t.Error("a varint field 1 accepted")
	}
}

func TestOutgoingKeepsTheClientsMetadataButNotPseudoHeaders(t *testing.T) {
	in := metadata.MD{
		":authority":     {"127.0.0.1:1"},
		"authorization":  {"MQv2-HMAC-SHA1 Credential=ak, SignedHeaders=x-mq-date-time, Signature=s"},
		"x-mq-client-id": {"client-1"},
		"x-mq-date-time": {"20261127T000000Z"},
		"x-mq-namespace": {""},
	}
	ctx := outgoing(metadata.NewIncomingContext(context.Background(), in))
	out, ok := metadata.FromOutgoingContext(ctx)
	if !ok {
		t.Fatal("no outgoing metadata")
	}
	if _, found := out[":authority"]; found {
		t.Error(":authority forwarded")
	}
	for _, key := range []string{"authorization", "x-mq-client-id", "x-mq-date-time", "x-mq-namespace"} {
		if got := out.Get(key); len(got) != 1 || got[0] != in.Get(key)[0] {
			t.Errorf("%s: got %q", key, got)
		}
	}
}

func TestFlagsAreChecked(t *testing.T) {
	cases := [][]string{
		{},
		{"-listen", "127.0.0.1:0"},
		{"-listen", "127.0.0.1:0", "-upstream", "unix:///x", "-tls-cert", "c.pem"},
		{"-listen", "127.0.0.1:0", "-upstream", "unix:///x", "-max-recv-bytes", "0"},
		{"-listen", "127.0.0.1:0", "-upstream", "unix:///x", "-gc-percent", "0"},
	}
	for _, args := range cases {
		if _, err := parseFlags(args); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
	o, err := parseFlags([]string{"-listen", "127.0.0.1:0", "-upstream", "unix:///x"})
	if err != nil {
		t.Error(err)
	}
	if o.gcPercent != 400 {
		t.Errorf("-gc-percent defaults to %d, want 400", o.gcPercent)
	}
}
