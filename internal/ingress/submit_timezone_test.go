package ingress_test

import (
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/internal/natstest"
	"github.com/sluice-io/sluice/internal/window"
	"github.com/sluice-io/sluice/queue"
)

// TestSubmitTimeZone: a submission's time_zone (for a rule whose delivery.window follows
// each message's zone) is an IANA name, checked at submit — 400 naming time_zone
// otherwise (a batch refuses the item, naming [0].time_zone) — and stored with the message as its Sluice-Time-Zone
// header; the submission itself may not set that header.
func TestSubmitTimeZone(t *testing.T) {
	t.Parallel()
	e := start(t, nil)
	for _, bad := range []string{`"Mars/Olympus"`, `"Local"`, `"/etc/localtime"`, `9`} {
		body := `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m-tz"}],"payload":1,"time_zone":` + bad + `}`
		if r := e.do("POST", "/v1/messages", body); r.code != 400 || r.body["field"] != "time_zone" {
			t.Errorf("time_zone %s: %d %s, want 400 naming time_zone", bad, r.code, r.raw)
		}
		if r := e.do("POST", "/v1/messages", "["+body+"]"); r.code != 200 || r.body["refused"] != 1.0 || !strings.Contains(r.raw, `"field":"[0].time_zone"`) {
			t.Errorf("batch with time_zone %s: %d %s, want the item refused naming [0].time_zone", bad, r.code, r.raw)
		}
	}
	forged := `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m-tz"}],"payload":1,"headers":{"Sluice-Time-Zone":"UTC"}}`
	if r := e.do("POST", "/v1/messages", forged); r.code != 400 {
		t.Errorf("a submission setting Sluice-Time-Zone itself: %d %s, want 400", r.code, r.raw)
	}
	ok := `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m-tz"}],"payload":1,"time_zone":"Asia/Seoul","headers":{"X-Order":"7"}}`
	if r := e.do("POST", "/v1/messages", ok); r.code != 202 {
		t.Fatalf("time_zone Asia/Seoul: %d %s", r.code, r.raw)
	}
	_, js := natstest.Connect(t, e.nats.URL())
	qs, err := queue.NewQueues(js, queue.Config{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := qs.Pop(context.Background(), "orders", "m-tz")
	if err != nil {
		t.Fatal(err)
	}
	if m.Headers[window.HeaderTimeZone] != "Asia/Seoul" || m.Headers["X-Order"] != "7" {
		t.Fatalf("stored headers %v, want Sluice-Time-Zone: Asia/Seoul and the submission's own", m.Headers)
	}
	// The zone does not count against the submission's 16 headers.
	var hs []string
	for i := range 16 {
		hs = append(hs, fmt.Sprintf(`"X-H-%d":"v"`, i))
	}
	full := `{"domain":"orders","descriptor":[{"key":"merchant_id","value":"m-tz16"}],"payload":1,"time_zone":"UTC","headers":{` + strings.Join(hs, ",") + `}}`
	if r := e.do("POST", "/v1/messages", full); r.code != 202 {
		t.Fatalf("16 headers and a time_zone: %d %s", r.code, r.raw)
	}
	if m, err := qs.Pop(context.Background(), "orders", "m-tz16"); err != nil || len(m.Headers) != 17 || m.Headers[window.HeaderTimeZone] != "UTC" {
		t.Fatalf("stored %d headers (%v), want 17 with Sluice-Time-Zone: UTC", len(m.Headers), err)
	}
}
