package main

// Deliveries: popack hands popfront a popped message as the stored record plus
// what this delivery adds (receipt handle, attempt, invisible time), and popfront
// builds the client's v2 Message from it. The reference is Python's
// popbroker.grpc.convert.delivered_message; testdata/deliveries.json holds its
// answers for a set of records and the tests compare the two field by field.
//
// Item layout (popbroker.grpc.front.encode_item), big-endian:
//
//	'D'  u32 delivery_attempt  i64 invisible_ms
//	u16 len + topic   u16 len + namespace   u16 len + store_host   u16 len + receipt_handle
//	the commit-log record, as popbroker/store/format.py lays it out (version 1)
//
// The record was read and verified (CRC, physical offset) by the store before
// popack popped it; here every length is still bounds-checked, and an item that
// does not parse fails the call rather than reaching a client half built.

import (
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"strconv"
	"strings"

	v2 "github.com/apache/rocketmq-clients/golang/v5/protocol/v2"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/timestamppb"
)

const (
	itemResponse = 'R' // a serialized ReceiveMessageResponse, sent as is
	itemDelivery = 'D' // a delivery, built here

	recordMagicV1   = 0xB1
	recordFixedEnd  = 51 // topic_len follows the fixed fields (format.py)
	propertySep     = '\x01'
	pairSep         = '\x02'
	keySeparator    = " "
	propUniqueID    = "UNIQ_KEY"
	propTags        = "TAGS"
	propKeys        = "KEYS"
	propGroup       = "__SHARDINGKEY"
	propDeliverMS   = "TIMER_DELIVER_MS"
	deliveryHeadLen = 1 + 4 + 8
)

// reservedProperties are the stored property keys that are not the user's
// (popbroker.services.messages.RESERVED_PROPERTY_KEYS; a test compares the two).
var reservedProperties = map[string]struct{}{
	"1ST_POP_TIME": {}, "BUYER_ID": {}, "CONSUME_START_TIME": {}, "CORRECTION_FLAG": {},
	"DELAY": {}, "INNER_BASE": {}, "INNER_NUM": {}, propKeys: {}, "MAX_OFFSET": {},
	"MAX_RECONSUME_TIMES": {}, "MIN_OFFSET": {}, "MQ2_FLAG": {}, "MSG_REGION": {},
	"ORIGIN_MESSAGE_ID": {}, "ORIGIN_TOPIC": {}, "PGROUP": {}, "POP_CK": {}, "POP_CK_OFFSET": {},
	"REAL_QID": {}, "REAL_TOPIC": {}, "RECONSUME_TIME": {}, "RETRY_TOPIC": {}, propTags: {},
	"TIMER_DELAY_MS": {}, "TIMER_DELAY_SEC": {}, propDeliverMS: {}, "TIMER_DEL_UNIQKEY": {},
	"TIMER_DEQUEUE_MS": {}, "TIMER_ENQUEUE_MS": {}, "TIMER_OUT_MS": {}, "TIMER_ROLL_TIMES": {},
	"TRACE_ON": {}, "TRANSFER_FLAG": {}, "TRAN_MSG": {}, propUniqueID: {}, "WAIT": {},
	propGroup: {},
}

var errShort = errors.New("delivery item truncated")

// record is the part of a commit-log record a delivery needs.
type record struct {
	physicalOffset int64
	queueID        int32
	queueOffset    int64
	bornMS         int64
	storeMS        int64
	bornHost       string
	properties     map[string]string
	body           []byte
}

// delivery is one decoded 'D' item.
type delivery struct {
	attempt       int32
	invisibleMS   int64
	topic         string
	namespace     string
	storeHost     string
	receiptHandle string
	record        record
}

type reader struct{ b []byte }

func (r *reader) take(n int) ([]byte, error) {
	if n < 0 || len(r.b) < n {
		return nil, errShort
	}
	out := r.b[:n]
	r.b = r.b[n:]
	return out, nil
}

func (r *reader) string16() (string, error) {
	head, err := r.take(2)
	if err != nil {
		return "", err
	}
	s, err := r.take(int(binary.BigEndian.Uint16(head)))
	return string(s), err
}

func (r *reader) string8() (string, error) {
	head, err := r.take(1)
	if err != nil {
		return "", err
	}
	s, err := r.take(int(head[0]))
	return string(s), err
}

func (r *reader) bytes32() ([]byte, error) {
	head, err := r.take(4)
	if err != nil {
		return nil, err
	}
	return r.take(int(binary.BigEndian.Uint32(head)))
}

// parseDelivery decodes a 'D' item (the layout in the file comment).
func parseDelivery(item []byte) (delivery, error) {
	var d delivery
	if len(item) < deliveryHeadLen || item[0] != itemDelivery {
		return d, errShort
	}
	d.attempt = int32(binary.BigEndian.Uint32(item[1:5]))
	d.invisibleMS = int64(binary.BigEndian.Uint64(item[5:13]))
	r := reader{item[deliveryHeadLen:]}
	var err error
	for _, s := range []*string{&d.topic, &d.namespace, &d.storeHost, &d.receiptHandle} {
		if *s, err = r.string16(); err != nil {
			return d, err
		}
	}
	d.record, err = parseRecord(r.b)
	return d, err
}

// parseRecord reads a version-1 commit-log record (popbroker/store/format.py).
func parseRecord(raw []byte) (record, error) {
	var rec record
	if len(raw) < recordFixedEnd {
		return rec, errShort
	}
	if total := binary.BigEndian.Uint32(raw[0:4]); int(total) != len(raw) {
		return rec, fmt.Errorf("record length %d but %d bytes", total, len(raw))
	}
	if raw[4] != recordMagicV1 {
		return rec, fmt.Errorf("unknown record magic 0x%02x", raw[4])
	}
	be := binary.BigEndian
	rec.physicalOffset = int64(be.Uint64(raw[9:17]))
	rec.queueID = int32(be.Uint32(raw[17:21]))
	rec.queueOffset = int64(be.Uint64(raw[21:29]))
	rec.bornMS = int64(be.Uint64(raw[31:39]))
	rec.storeMS = int64(be.Uint64(raw[39:47]))
	r := reader{raw[recordFixedEnd:]}
	if _, err := r.string8(); err != nil { // the stored topic (a retry topic's is not shown)
		return rec, err
	}
	var err error
	if rec.bornHost, err = r.string8(); err != nil {
		return rec, err
	}
	props, err := r.bytes32()
	if err != nil {
		return rec, err
	}
	if rec.properties, err = parseProperties(string(props)); err != nil {
		return rec, err
	}
	if rec.body, err = r.bytes32(); err != nil {
		return rec, err
	}
	if len(r.b) != 0 {
		return rec, fmt.Errorf("record has %d bytes after its body", len(r.b))
	}
	return rec, nil
}

// parseProperties reads "k\x01v\x02" pairs; a later duplicate key wins, as in a dict.
func parseProperties(s string) (map[string]string, error) {
	props := map[string]string{}
	for _, pair := range strings.Split(s, string(pairSep)) {
		if pair == "" {
			continue
		}
		key, value, ok := strings.Cut(pair, string(propertySep))
		if !ok {
			return nil, errors.New("property pair without a key/value separator")
		}
		props[key] = value
	}
	return props, nil
}

// floorDivMod is Python's divmod for a positive divisor.
func floorDivMod(a, b int64) (int64, int64) {
	q, m := a/b, a%b
	if m < 0 {
		q, m = q-1, m+b
	}
	return q, m
}

func timestampMS(ms int64) *timestamppb.Timestamp {
	s, rest := floorDivMod(ms, 1000)
	return &timestamppb.Timestamp{Seconds: s, Nanos: int32(rest * 1_000_000)}
}

func durationMS(ms int64) *durationpb.Duration {
	s, rest := floorDivMod(ms, 1000)
	return &durationpb.Duration{Seconds: s, Nanos: int32(rest * 1_000_000)}
}

// asciiDigits: TIMER_DELIVER_MS is read only when it is all ASCII digits.
func asciiDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// message is the client's v2 Message for d (the reference: delivered_message).
func (d *delivery) message() (*v2.Message, error) {
	rec := &d.record
	props := rec.properties
	user := make(map[string]string, len(props))
	for key, value := range props {
		if _, reserved := reservedProperties[key]; !reserved {
			user[key] = value
		}
	}
	digest := md5.Sum(rec.body)
	system := &v2.SystemProperties{
		BodyDigest:      &v2.Digest{Type: v2.DigestType_MD5, Checksum: strings.ToUpper(hex.EncodeToString(digest[:]))},
		BodyEncoding:    v2.Encoding_IDENTITY,
		MessageType:     v2.MessageType_NORMAL,
		BornTimestamp:   timestampMS(rec.bornMS),
		BornHost:        rec.bornHost,
		StoreTimestamp:  timestampMS(rec.storeMS),
		StoreHost:       d.storeHost,
		QueueId:         rec.queueID,
		QueueOffset:     proto.Int64(rec.queueOffset),
		DeliveryAttempt: proto.Int32(d.attempt),
	}
	if tag := props[propTags]; tag != "" {
		system.Tag = &tag
	}
	for _, key := range strings.Split(props[propKeys], keySeparator) {
		if key != "" {
			system.Keys = append(system.Keys, key)
		}
	}
	if id := props[propUniqueID]; id != "" {
		system.MessageId = id
	} else {
		system.MessageId = fmt.Sprintf("%032X", rec.physicalOffset)
	}
	if raw, ok := props[propDeliverMS]; ok && asciiDigits(raw) {
		ms, err := strconv.ParseInt(raw, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("%s %q: %w", propDeliverMS, raw, err)
		}
		system.DeliveryTimestamp = timestampMS(ms)
		system.MessageType = v2.MessageType_DELAY
	}
	if group := props[propGroup]; group != "" {
		system.MessageGroup = &group
		system.MessageType = v2.MessageType_FIFO
	}
	if d.receiptHandle != "" {
		handle := d.receiptHandle
		system.ReceiptHandle = &handle
	}
	if d.invisibleMS > 0 {
		system.InvisibleDuration = durationMS(d.invisibleMS)
	}
	return &v2.Message{
		Topic:            &v2.Resource{Name: d.topic, ResourceNamespace: d.namespace},
		UserProperties:   user,
		SystemProperties: system,
		Body:             rec.body,
	}, nil
}

// buildResponse turns a 'D' item into a serialized ReceiveMessageResponse.
func buildResponse(item []byte) (frame, error) {
	d, err := parseDelivery(item)
	if err != nil {
		return nil, err
	}
	msg, err := d.message()
	if err != nil {
		return nil, err
	}
	out, err := proto.Marshal(&v2.ReceiveMessageResponse{
		Content: &v2.ReceiveMessageResponse_Message{Message: msg},
	})
	return frame(out), err
}
