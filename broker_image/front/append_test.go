package main

import (
	"encoding/binary"
	"encoding/json"
	"hash/crc32"
	"os"
	"reflect"
	"testing"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/protobuf/proto"
)

// appendCases is testdata/appends.json, written by the Python reference
// (tests/unit/services/front_appends.py).
type appendCases struct {
	Cases []struct {
		Message string `json:"message"`
		Record  string `json:"record"`
		Error   string `json:"error"`
	} `json:"cases"`
}

func TestAppendItemsCarryTheReferencesRecordAndOnlyForMessagesItAccepts(t *testing.T) {
	raw, err := os.ReadFile("testdata/appends.json")
	if err != nil {
		t.Fatal(err)
	}
	var f appendCases
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	accepted, fast := 0, 0
	for i, c := range f.Cases {
		var m v2.Message
		if err := proto.Unmarshal(decode64(t, c.Message), &m); err != nil {
			t.Fatal(err)
		}
		if c.Error == "" {
			accepted++
		}
		plan := planAppend(&m)
		item, err := appendItem(nil, &m, plan)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if len(item) != plan.itemSize(&m) {
			t.Errorf("case %d: item of %d bytes, planned %d", i, len(item), plan.itemSize(&m))
		}
		if item[0] == itemReference {
			var back v2.Message
			if err := proto.Unmarshal(item[1:], &back); err != nil || !proto.Equal(&back, &m) {
				t.Errorf("case %d: the X item does not carry the message (%v)", i, err)
			}
			continue
		}
		fast++
		if c.Error != "" {
			t.Errorf("case %d: the reference refuses it (%s), popfront took the fast path", i, c.Error)
			continue
		}
		record := skipAppendHead(t, item)
		if got := crc32.ChecksumIEEE(record[9:]); got != binary.BigEndian.Uint32(record[5:9]) {
			t.Errorf("case %d: CRC %08x does not match the record", i, got)
		}
		want := decode64(t, c.Record)
		gotRec, err := parseRecord(record)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		wantRec, _ := parseRecord(want)
		if !reflect.DeepEqual(gotRec, wantRec) {
			t.Errorf("case %d:\n got %+v\nwant %+v", i, gotRec, wantRec)
		}
		if topicOf(record) != topicOf(want) {
			t.Errorf("case %d: topic %q, want %q", i, topicOf(record), topicOf(want))
		}
	}
	if accepted == 0 || fast*10 < accepted*8 {
		t.Fatalf("%d of the %d messages the reference accepts took the fast path; want >= 80%%", fast, accepted)
	}
}

func skipAppendHead(t *testing.T, item []byte) []byte {
	t.Helper()
	r := reader{item[2:]}
	for range 2 {
		if _, err := r.string16(); err != nil {
			t.Fatal(err)
		}
	}
	for range 2 { // tag and group: 0xFFFF is none
		head, err := r.take(2)
		if err != nil {
			t.Fatal(err)
		}
		if n := binary.BigEndian.Uint16(head); n != noString {
			if _, err := r.take(int(n)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if _, err := r.take(4 + 2 + 4); err != nil { // body size, user properties, their bytes
		t.Fatal(err)
	}
	return r.b
}

func topicOf(record []byte) string {
	n := int(record[recordFixedEnd])
	return string(record[recordFixedEnd+1 : recordFixedEnd+1+n])
}

func TestFrontSendRequestIsTheMessagesAsItemsInOrder(t *testing.T) {
	group := "g1"
	normal := &v2.Message{
		Topic: &v2.Resource{Name: "orders"},
		Body:  []byte("hello"),
		SystemProperties: &v2.SystemProperties{
			MessageId: "ID-1", MessageType: v2.MessageType_FIFO, MessageGroup: &group,
		},
	}
	delayed := proto.Clone(normal).(*v2.Message)
	delayed.SystemProperties.MessageId = "ID-2"
	delayed.SystemProperties.MessageType = v2.MessageType_DELAY
	request, err := proto.Marshal(&v2.SendMessageRequest{Messages: []*v2.Message{normal, delayed}})
	if err != nil {
		t.Fatal(err)
	}
	items, encoded, total, ok := frontSendRequest(request)
	if !ok || encoded != 1 || total != 2 {
		t.Fatalf("ok %v, encoded %d of %d; want 1 of 2", ok, encoded, total)
	}
	if len(items) != cap(items) {
		t.Errorf("items of %d bytes in a buffer of %d: the first pass sized it wrong", len(items), cap(items))
	}
	var kinds []byte
	for rest := []byte(items); len(rest) > 0; {
		size := binary.BigEndian.Uint32(rest)
		item := rest[4 : 4+size]
		kinds = append(kinds, item[0])
		if item[0] == itemReference {
			var m v2.Message
			if err := proto.Unmarshal(item[1:], &m); err != nil || m.GetSystemProperties().GetMessageId() != "ID-2" {
				t.Fatalf("X item: %v, %v", err, &m)
			}
		}
		rest = rest[4+size:]
	}
	if string(kinds) != "AX" {
		t.Fatalf("item kinds %q, want \"AX\" (DELAY goes the reference way)", kinds)
	}
	if _, _, _, ok := frontSendRequest(frame{0x0a, 0xff}); ok {
		t.Fatal("a request that does not parse must go to popack as it is")
	}
}

// BenchmarkFrontSendRequest: a producer's batch of 32 messages of 1 KiB (the peer
// benchmark's shape) turned into FRONT_SEND's items.
func BenchmarkFrontSendRequest(b *testing.B) {
	messages := make([]*v2.Message, 32)
	for i := range messages {
		messages[i] = &v2.Message{
			Topic: &v2.Resource{Name: "bench"},
			Body:  make([]byte, 1024),
			SystemProperties: &v2.SystemProperties{
				MessageId: "0A0B0C0D0E0F10111213141516171819", BornHost: "loadgen",
				MessageType: v2.MessageType_NORMAL,
			},
		}
	}
	request, err := proto.Marshal(&v2.SendMessageRequest{Messages: messages})
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, ok := frontSendRequest(request); !ok {
			b.Fatal("not encoded")
		}
	}
}

// FuzzFrontSendRequest: any request bytes are encoded or passed on as they are,
// never a panic, and encoded ones are whole items, one per message.
func FuzzFrontSendRequest(f *testing.F) {
	group := "g"
	seed, _ := proto.Marshal(&v2.SendMessageRequest{Messages: []*v2.Message{{
		Topic: &v2.Resource{Name: "orders"}, Body: []byte("x"),
		SystemProperties: &v2.SystemProperties{MessageId: "M", MessageType: v2.MessageType_FIFO, MessageGroup: &group},
		UserProperties:   map[string]string{"k": "v"},
	}}})
	f.Add(seed)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, request []byte) {
		items, encoded, total, ok := frontSendRequest(request)
		if !ok {
			return
		}
		count := 0
		for rest := []byte(items); len(rest) > 0; count++ {
			if len(rest) < 4 || int(binary.BigEndian.Uint32(rest)) > len(rest)-4 {
				t.Fatalf("item %d cut short", count)
			}
			size := binary.BigEndian.Uint32(rest)
			if size == 0 || (rest[4] != itemAppend && rest[4] != itemReference) {
				t.Fatalf("item %d: not an A or X item", count)
			}
			rest = rest[4+size:]
		}
		if count != total || encoded > total {
			t.Fatalf("%d items, %d encoded, for %d messages", count, encoded, total)
		}
	})
}
