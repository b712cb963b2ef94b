package main

import (
	"encoding/base64"
	"encoding/json"
	"os"
	"sort"
	"testing"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/protobuf/proto"
)

// fixture is testdata/deliveries.json, written by the Python reference
// (tests/unit/services/front_deliveries.py).
type fixture struct {
	Reserved []string `json:"reserved_properties"`
	Cases    []struct {
		Item     string `json:"item"`
		Response string `json:"response"`
		Error    string `json:"error"`
	} `json:"cases"`
}

func loadFixture(t *testing.T) fixture {
	t.Helper()
	raw, err := os.ReadFile("testdata/deliveries.json")
	if err != nil {
		t.Fatal(err)
	}
	var f fixture
	if err := json.Unmarshal(raw, &f); err != nil {
		t.Fatal(err)
	}
	if len(f.Cases) == 0 {
		t.Fatal("no cases in testdata/deliveries.json")
	}
	return f
}

func decode64(t *testing.T, s string) []byte {
	t.Helper()
	b, err := base64.StdEncoding.DecodeString(s)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestDeliveriesMatchThePythonReference(t *testing.T) {
	for i, c := range loadFixture(t).Cases {
		got, err := buildResponse(decode64(t, c.Item))
		if c.Error != "" {
			if err == nil {
				t.Errorf("case %d: the reference fails (%s), popfront built a message", i, c.Error)
			}
			continue
		}
		if err != nil {
			t.Errorf("case %d: %v", i, err)
			continue
		}
		var want, have v2.ReceiveMessageResponse
		if err := proto.Unmarshal(decode64(t, c.Response), &want); err != nil {
			t.Fatal(err)
		}
		if err := proto.Unmarshal(got, &have); err != nil {
			t.Fatalf("case %d: popfront's response does not parse: %v", i, err)
		}
		if !proto.Equal(&want, &have) {
			t.Errorf("case %d:\nreference %v\npopfront  %v", i, &want, &have)
		}
	}
}

func TestReservedPropertiesAreThePythonSet(t *testing.T) {
	var ours []string
	for key := range reservedProperties {
		ours = append(ours, key)
	}
	sort.Strings(ours)
	theirs := loadFixture(t).Reserved
	if len(ours) != len(theirs) {
		t.Fatalf("popfront %v, reference %v", ours, theirs)
	}
	for i := range ours {
		if ours[i] != theirs[i] {
			t.Fatalf("popfront %v, reference %v", ours, theirs)
		}
	}
}

func TestDamagedItemsAreRefusedNotBuilt(t *testing.T) {
	item := decode64(t, loadFixture(t).Cases[0].Item)
	for cut := 0; cut < len(item); cut++ { // every truncation
		if _, err := buildResponse(item[:cut]); err == nil {
			t.Fatalf("an item cut at %d of %d bytes was built", cut, len(item))
		}
	}
	longer := append(append([]byte{}, item...), 0)
	if _, err := buildResponse(longer); err == nil {
		t.Fatal("an item with a byte after its record was built")
	}
	for _, kind := range []byte{0, 'X'} {
		if _, err := response(frame{kind, 1, 2}); err == nil {
			t.Fatalf("item kind %q was accepted", kind)
		}
	}
	if _, err := response(frame{}); err == nil {
		t.Fatal("an empty item was accepted")
	}
	if got, err := response(frame{'R', 7, 8}); err != nil || string(got) != "\x07\x08" {
		t.Fatalf("an R item is its response as is: %v %v", got, err)
	}
}
