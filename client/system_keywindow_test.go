package client_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
)

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
