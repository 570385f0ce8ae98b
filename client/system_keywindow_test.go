package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
)

// rawAdmin sends body to the admin API and returns the status and the problem's field.
func rawAdmin(t *testing.T, sys *system, method, path, ctype, body string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest(method, sys.base+path, strings.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+systemToken)
	req.Header.Set("Content-Type", ctype)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var p struct {
		Field  string `json:"field"`
		Detail string `json:"detail"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&p)
	return resp.StatusCode, p.Field
}

// The window's bad input on the wire: each answer is a 400 naming the field (PATCH) or
// the line and field (bulk NDJSON and CSV, whose fourth column is the window's text).
func TestSystemKeyWindowBadInput(t *testing.T) {
	t.Parallel()
	sys := startSystem(t, systemRules)
	for _, c := range []struct{ method, path, ctype, body, field string }{
		{"PATCH", "/v1/admin/queues/even/keys/k", "application/merge-patch+json", `{"window":{"from":"09:00","to":"09:00","time_zone":"UTC"}}`, "window.to"},
		{"PATCH", "/v1/admin/queues/even/keys/k", "application/merge-patch+json", `{"window":{"from":"09:00","to":"18:00"}}`, "window.time_zone"},
		{"PATCH", "/v1/admin/queues/even/keys/k", "application/merge-patch+json", `{"window":{"days":["mon","funday"],"from":"09:00","to":"18:00","time_zone":"UTC"}}`, "window.days[1]"},
		{"PATCH", "/v1/admin/queues/even/keys/k", "application/merge-patch+json", `{"window":{"from":"09:00","to":"18:00","time_zone":"UTC","default_time_zone":"UTC"}}`, "window.default_time_zone"},
		{"PATCH", "/v1/admin/queues/even/keys/k", "application/merge-patch+json", `{"window":{"from":"09:00","to":"18:00","time_zone":"UTC","hours":3}}`, "window.hours"},
		{"PATCH", "/v1/admin/queues/even/keys/k", "application/merge-patch+json", `{"window":"9 to 5"}`, "window"},
		{"POST", "/v1/admin/queues/even/keys", "application/x-ndjson", `{"key":"a","window":{"from":"25:00","to":"06:00","time_zone":"UTC"}}`, "line 1: window.from"},
		{"POST", "/v1/admin/queues/even/keys", "text/csv", "key,outflow,for,window\na,1/s,,22:00-06:00 UTC\nb,,,22:00-06:00 Nowhere/Town\n", "line 3: window.time_zone"},
		{"POST", "/v1/admin/queues/even/keys", "text/csv", "a,reset,,22:00-06:00 UTC\n", "line 1: window"},
	} {
		if status, field := rawAdmin(t, sys, c.method, c.path, c.ctype, c.body); status != 400 || field != c.field {
			t.Errorf("%s %s\n%s\n= %d %q, want 400 %q", c.method, c.path, c.body, status, field, c.field)
		}
	}
	if status, _ := rawAdmin(t, sys, "PATCH", "/v1/admin/queues/even/keys/k", "application/merge-patch+json", `{"window":"mon-fri 09:00-18:00 Europe/Paris"}`); status != 200 {
		t.Errorf("the window's text form: %d", status)
	}
}

// TuneKey and TuneKeys with a key's own delivery window against a real ingress: it
// round-trips (the override and the effective window say the same, with the source),
// RestoreWindow gives the rule's back, and a bad window is a 400 naming window.from, or
// "line 1: window.time_zone" in the bulk form.
func TestSystemTuneKeyWindow(t *testing.T) {
	t.Parallel()
	sys := startSystem(t, systemRules)
	a := sys.client(t, client.WithAdminToken(systemToken)).Admin()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	want := client.Window{Days: []string{"mon-fri"}, From: "09:00", To: "18:00", TimeZone: "Europe/Paris"}
	k, err := a.TuneKey(ctx, "even", "m-7", client.KeyPatch{Window: &want, For: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if k.Window == nil || !reflect.DeepEqual(*k.Window, want) || !strings.HasPrefix(k.WindowSource, "key override until ") ||
		k.Override == nil || k.Override.Window == nil || !reflect.DeepEqual(*k.Override.Window, want) || k.Source != "rule" {
		t.Fatalf("TuneKey = %+v (window %+v)", k, k.Window)
	}
	if got, err := a.Key(ctx, "even", "m-7"); err != nil || got.Window == nil || !reflect.DeepEqual(*got.Window, want) {
		t.Fatalf("Key = %+v %v", got, err)
	}
	k, err = a.TuneKey(ctx, "even", "m-7", client.KeyPatch{RestoreWindow: true})
	if err != nil || k.Window != nil || k.WindowSource != "rule" || k.Override != nil {
		t.Fatalf("RestoreWindow = %+v %v", k, err)
	}
	var pe *client.ProblemError
	_, err = a.TuneKey(ctx, "even", "m-7", client.KeyPatch{Window: &client.Window{From: "9am", To: "18:00", TimeZone: "UTC"}})
	if !errors.As(err, &pe) || pe.Status != 400 || pe.Field != "window.from" {
		t.Fatalf("a bad from: %v", err)
	}
	night := client.Window{From: "22:00", To: "06:00", TimeZone: "from_message", DefaultTimeZone: "Asia/Seoul"}
	res, err := a.TuneKeys(ctx, "even", []client.KeyLine{{Key: "n-1", Window: &night}, {Key: "n-2", Window: &night, Outflow: &client.Rate{Unit: "second", RequestsPerUnit: 2}}})
	if err != nil || res.Set != 2 {
		t.Fatalf("TuneKeys = %+v %v", res, err)
	}
	if got, err := a.Key(ctx, "even", "n-2"); err != nil || got.Window == nil || !reflect.DeepEqual(*got.Window, night) || got.OutflowPerSecond != 2 || got.WindowSource != "key override" {
		t.Fatalf("n-2 = %+v %v", got, err)
	}
	_, err = a.TuneKeys(ctx, "even", []client.KeyLine{{Key: "n-3", Window: &client.Window{From: "22:00", To: "06:00", TimeZone: "Mars/Olympus"}}})
	if !errors.As(err, &pe) || pe.Status != 400 || pe.Field != "line 1: window.time_zone" {
		t.Fatalf("a bad zone in the bulk form: %v", err)
	}
}
