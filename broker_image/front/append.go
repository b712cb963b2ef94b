package main

// Sends encoded in the front: popfront turns each v2 Message of a SendMessage
// into the commit-log record popack would store, and asks popack's framed
// FRONT_SEND instead (popbroker.grpc.frontappends has the protocol and why), so
// popack neither converts nor encodes the message. The reference is Python's
// chain popbroker.grpc.convert.outgoing_message -> messages.to_store_properties
// -> store.appending.encode_unplaced; testdata/appends.json holds its records
// for a set of messages and the tests compare the two as decoded records.
//
// popfront never refuses a message: a message that is not plainly valid goes
// as an 'X' item and popack takes it the reference way, so the error codes and
// texts stay Python's alone. The request is the items in order, each as u32
// length + item; item layouts, big-endian:
//
//	'A'  u8 kind  u16 len + topic  u16 len + message id  u16 len + tag (0xFFFF: none)
//	     u16 len + message group (0xFFFF: none)  u32 body size
//	     u16 user properties  u32 their bytes (keys and values, as popack counts them)
//	     the unplaced record (queue id 0: popack writes the queue it chooses)
//	'X'  the serialized v2 Message
//
// popack still runs every check on the head (the topic's config, the id, tag,
// group, the limits on body and user properties); what it cannot see there --
// the keys and the user properties' names and bytes -- popfront checks, and
// routes anything it is not sure of (a key Python's str.strip might call blank)
// to 'X'.

import (
	"encoding/binary"
	"hash/crc32"
	"strings"
	"unicode"
	"unicode/utf8"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/protobuf/proto"
)

const (
	frontSend     = "/popfleet.front.v1.Front/SendMessage"
	itemAppend    = 'A'
	itemReference = 'X'
	noString      = 0xFFFF

	maxFastUserProperties = 16 // more: the reference path (its limits are settings)
	maxFastTagChars       = 128
	maxNameBytes          = 255   // topic and born host, as the record's u8 lengths
	recordQueueIDAt       = 9 + 8 // after the prefix and the physical offset
)

// fastKinds are the message kinds the fast path takes; DELAY goes to the revive
// log by rules popack keeps, transactions are refused there.
var fastKinds = map[v2.MessageType]bool{v2.MessageType_NORMAL: true, v2.MessageType_FIFO: true}

// frontSendRequest is the client's SendMessageRequest as FRONT_SEND's items, with
// how many of its messages were encoded and how many it has; false when it does
// not parse (popack then answers the client's request as is). The items are
// written into one buffer sized in a first pass: a batch's records are most of
// popfront's allocations, and the garbage they made was most of its extra CPU.
func frontSendRequest(request frame) (frame, int, int, bool) {
	var req v2.SendMessageRequest
	if err := proto.Unmarshal(request, &req); err != nil {
		return nil, 0, 0, false
	}
	messages := req.GetMessages()
	plans := make([]appendPlan, len(messages))
	size := 0
	for i, m := range messages {
		plans[i] = planAppend(m)
		size += 4 + plans[i].itemSize(m)
	}
	out := make([]byte, 0, size)
	encoded := 0
	for i, m := range messages {
		at := len(out)
		out = append(out, 0, 0, 0, 0) // the item's length, written below
		var err error
		if out, err = appendItem(out, m, plans[i]); err != nil {
			return nil, 0, 0, false
		}
		binary.BigEndian.PutUint32(out[at:], uint32(len(out)-at-4))
		if plans[i].fast {
			encoded++
		}
	}
	return out, encoded, len(messages), true
}

// appendPlan is what the first pass learns of a message: whether it takes the
// fast path, and then its record's properties and born time.
type appendPlan struct {
	fast       bool
	properties []byte
	bornMS     int64
}

// itemSize is the size of m's item under p.
func (p appendPlan) itemSize(m *v2.Message) int {
	if !p.fast {
		return 1 + proto.Size(m)
	}
	sp := m.GetSystemProperties()
	head := 2 + 2 + len(m.GetTopic().GetName()) + 2 + len(sp.GetMessageId()) +
		2 + len(sp.GetTag()) + 2 + len(sp.GetMessageGroup()) + 4 + 2 + 4
	return head + unplacedSize(m.GetTopic().GetName(), sp.GetBornHost(), p.properties, m.GetBody())
}

// appendItem appends the item popack gets for m (see the file comment).
func appendItem(out []byte, m *v2.Message, p appendPlan) ([]byte, error) {
	if !p.fast {
		out = append(out, itemReference)
		return proto.MarshalOptions{}.MarshalAppend(out, m)
	}
	sp := m.GetSystemProperties()
	out = append(out, itemAppend, byte(sp.GetMessageType()))
	out = appendString16(out, m.GetTopic().GetName())
	out = appendString16(out, sp.GetMessageId())
	out = appendOptional16(out, sp.Tag)
	out = appendOptional16(out, sp.MessageGroup)
	out = binary.BigEndian.AppendUint32(out, uint32(len(m.GetBody())))
	userBytes := 0
	for key, value := range m.GetUserProperties() {
		userBytes += len(key) + len(value)
	}
	out = binary.BigEndian.AppendUint16(out, uint16(len(m.GetUserProperties())))
	out = binary.BigEndian.AppendUint32(out, uint32(userBytes))
	return appendUnplaced(out, m.GetTopic().GetName(), sp.GetBornHost(), p.bornMS, p.properties, m.GetBody()), nil
}

// planAppend decides m's path: fast, with its record's properties and born time,
// or the reference path.
func planAppend(m *v2.Message) appendPlan {
	sp := m.GetSystemProperties()
	topic, body := m.GetTopic().GetName(), m.GetBody()
	if sp == nil || !fastKinds[sp.GetMessageType()] || sp.DeliveryTimestamp != nil ||
		len(body) == 0 || topic == "" || len(topic) > maxNameBytes ||
		len(sp.GetBornHost()) > maxNameBytes || blank(sp.GetMessageId()) {
		return appendPlan{}
	}
	if sp.Tag != nil {
		tag := sp.GetTag()
		if blank(tag) || strings.Contains(tag, "|") || utf8.RuneCountInString(tag) > maxFastTagChars {
			return appendPlan{}
		}
	}
	for _, key := range sp.GetKeys() {
		if !word(key) {
			return appendPlan{}
		}
	}
	if sp.GetMessageType() == v2.MessageType_FIFO && blank(sp.GetMessageGroup()) {
		return appendPlan{}
	}
	user := m.GetUserProperties()
	if len(user) > maxFastUserProperties {
		return appendPlan{}
	}
	if separated(sp.GetMessageId()) || separated(sp.GetTag()) || separated(sp.GetMessageGroup()) ||
		separated(strings.Join(sp.GetKeys(), "")) {
		return appendPlan{}
	}
	size := len(propUniqueID) + len(sp.GetMessageId()) + 2
	for key, value := range user {
		if key == "" || reserved(key) || separated(key) || separated(value) {
			return appendPlan{}
		}
		size += len(key) + len(value) + 2
	}
	if sp.GetTag() != "" {
		size += len(propTags) + len(sp.GetTag()) + 2
	}
	if len(sp.GetKeys()) > 0 {
		size += len(propKeys) + 2 + len(sp.GetKeys()) - 1
		for _, key := range sp.GetKeys() {
			size += len(key)
		}
	}
	if sp.GetMessageGroup() != "" {
		size += len(propGroup) + len(sp.GetMessageGroup()) + 2
	}
	properties := make([]byte, 0, size)
	for key, value := range user {
		properties = appendProperty(properties, key, value)
	}
	properties = appendProperty(properties, propUniqueID, sp.GetMessageId())
	if sp.GetTag() != "" {
		properties = appendProperty(properties, propTags, sp.GetTag())
	}
	if len(sp.GetKeys()) > 0 {
		properties = appendProperty(properties, propKeys, strings.Join(sp.GetKeys(), keySeparator))
	}
	if sp.GetMessageGroup() != "" {
		properties = appendProperty(properties, propGroup, sp.GetMessageGroup())
	}
	var bornMS int64
	if ts := sp.GetBornTimestamp(); ts != nil {
		if ts.GetNanos() < 0 || ts.GetNanos() >= 1_000_000_000 {
			return appendPlan{} // Python floors, Go truncates: leave it to the reference
		}
		bornMS = ts.GetSeconds()*1000 + int64(ts.GetNanos())/1_000_000
	}
	return appendPlan{fast: true, properties: properties, bornMS: bornMS}
}

func unplacedSize(topic, bornHost string, properties, body []byte) int {
	return recordFixedEnd + 1 + len(topic) + 1 + len(bornHost) + 4 + len(properties) + 4 + len(body)
}

// appendUnplaced appends a version-1 record (popbroker/store/format.py) whose
// physical offset, queue id, queue offset and store time are zero.
func appendUnplaced(out []byte, topic, bornHost string, bornMS int64, properties, body []byte) []byte {
	start := len(out)
	out = binary.BigEndian.AppendUint32(out, uint32(unplacedSize(topic, bornHost, properties, body)))
	out = append(out, recordMagicV1, 0, 0, 0, 0) // the CRC, written below
	out = binary.BigEndian.AppendUint64(out, 0)  // physical offset
	out = binary.BigEndian.AppendUint32(out, 0)  // queue id
	out = binary.BigEndian.AppendUint64(out, 0)  // queue offset
	out = binary.BigEndian.AppendUint16(out, 0)  // flags
	out = binary.BigEndian.AppendUint64(out, uint64(bornMS))
	out = binary.BigEndian.AppendUint64(out, 0) // store time
	out = binary.BigEndian.AppendUint32(out, 0) // reconsume times
	out = append(out, byte(len(topic)))
	out = append(out, topic...)
	out = append(out, byte(len(bornHost)))
	out = append(out, bornHost...)
	out = binary.BigEndian.AppendUint32(out, uint32(len(properties)))
	out = append(out, properties...)
	out = binary.BigEndian.AppendUint32(out, uint32(len(body)))
	out = append(out, body...)
	binary.BigEndian.PutUint32(out[start+5:], crc32.ChecksumIEEE(out[start+9:]))
	return out
}

func appendProperty(out []byte, key, value string) []byte {
	out = append(out, key...)
	out = append(out, propertySep)
	out = append(out, value...)
	return append(out, pairSep)
}

func appendString16(out []byte, s string) []byte {
	out = binary.BigEndian.AppendUint16(out, uint16(len(s)))
	return append(out, s...)
}

func appendOptional16(out []byte, s *string) []byte {
	if s == nil {
		return binary.BigEndian.AppendUint16(out, noString)
	}
	return appendString16(out, *s)
}

func blank(s string) bool { return strings.TrimSpace(s) == "" }

// word: a key the reference surely accepts (non-empty, every rune graphic and
// not a space in Go's sense or a separator in Unicode's, which covers every
// character Python's str.isspace calls a space).
func word(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		if !unicode.IsGraphic(r) || unicode.IsSpace(r) || unicode.In(r, unicode.Z) {
			return false
		}
	}
	return true
}

func reserved(key string) bool {
	_, ok := reservedProperties[key]
	return ok
}

func separated(s string) bool { return strings.ContainsAny(s, string([]byte{propertySep, pairSep})) }
