package queue

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
)

// publishOnce is one synchronous publish of msg to stream: what jetstream's PublishMsg with
// WithExpectStream and no retries does, with the same errors, except that the answer a
// server gives nearly every publish is read by scanPubAck instead of encoding/json, whose
// reflection cost an admission 2.5 µs (a twentieth of its share of the ingress's CPU).
//
// It waits for the answer up to timeout (then nats.ErrTimeout), on a pooled timer rather than
// a context.
func (q *Queues) publishOnce(msg *nats.Msg, stream string, timeout time.Duration) (*jetstream.PubAck, error) {
	if msg.Header == nil {
		msg.Header = nats.Header{}
	}
	msg.Header[jetstream.ExpectedStreamHeader] = []string{stream}
	resp, err := q.js.Conn().RequestMsg(msg, timeout)
	if err != nil {
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, jetstream.ErrNoStreamResponse
		}
		return nil, err
	}
	return readPubAck(resp.Data)
}

// readPubAck reads a publish's answer as jetstream does: the PubAck, or the server's error
// as a *jetstream.APIError, or ErrInvalidJSAck.
func readPubAck(b []byte) (*jetstream.PubAck, error) {
	if ack, ok := scanPubAck(b); ok {
		return ack, nil
	}
	return decodePubAck(b)
}

// decodePubAck is readPubAck by encoding/json, for any answer: what jetstream does.
func decodePubAck(b []byte) (*jetstream.PubAck, error) {
	var r struct {
		Error *jetstream.APIError `json:"error,omitempty"`
		jetstream.PubAck
	}
	if err := json.Unmarshal(b, &r); err != nil {
		return nil, jetstream.ErrInvalidJSAck
	}
	if r.Error != nil {
		return nil, fmt.Errorf("nats: %w", r.Error)
	}
	if r.Stream == "" {
		return nil, jetstream.ErrInvalidJSAck
	}
	return &r.PubAck, nil
}

// scanPubAck reads the two answers servers give nearly every publish,
// {"stream":"S","seq":N} and {"stream":"S","seq":N,"duplicate":true}, exactly as
// decodePubAck would (FuzzReadPubAck holds it to that); ok is false for anything else,
// which decodePubAck then reads.
func scanPubAck(b []byte) (ack *jetstream.PubAck, ok bool) {
	rest, ok := bytes.CutPrefix(b, []byte(`{"stream":"`))
	if !ok {
		return nil, false
	}
	end := 0
	for end < len(rest) && rest[end] != '"' {
		if c := rest[end]; c < 0x20 || c > 0x7e || c == '\\' {
			return nil, false // escapes, control characters, non-ASCII: encoding/json's to read
		}
		end++
	}
	if end == 0 {
		return nil, false
	}
	stream := rest[:end]
	if rest, ok = bytes.CutPrefix(rest[end:], []byte(`","seq":`)); !ok {
		return nil, false
	}
	digits := 0
	var seq uint64
	for digits < len(rest) && rest[digits] >= '0' && rest[digits] <= '9' {
		d := uint64(rest[digits] - '0')
		if seq > (1<<64-1-d)/10 {
			return nil, false // overflows a uint64
		}
		seq = seq*10 + d
		digits++
	}
	if digits == 0 || (digits > 1 && rest[0] == '0') { // JSON numbers have no leading zeros
		return nil, false
	}
	dup := false
	switch string(rest[digits:]) {
	case `}`:
	case `,"duplicate":true}`:
		dup = true
	default:
		return nil, false
	}
	return &jetstream.PubAck{Stream: string(stream), Sequence: seq, Duplicate: dup}, true
}
