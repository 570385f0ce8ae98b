package client_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/sluice-io/sluice/client"
)

// TuneKey and TuneKeys against a real ingress: one key at 20/s for 24h (its source says
// until when), a reset, 1,000 keys at once, and a refused line named by number.
func TestSystemTuneKeys(t *testing.T) {
	t.Parallel()
	sys := startSystem(t, systemRules)
	a := sys.client(t, client.WithAdminToken(systemToken)).Admin()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, err := a.TuneKey(ctx, "even", "m 42/x", client.KeyPatch{Outflow: &client.Rate{Unit: "second", RequestsPerUnit: 20}, For: 24 * time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if k.OutflowPerSecond != 20 || !strings.HasPrefix(k.Source, "key override until ") || k.Override == nil || k.Override.Until.Before(time.Now().Add(23*time.Hour)) {
		t.Fatalf("TuneKey = %+v", k)
	}
	if got, err := a.Key(ctx, "even", "m 42/x"); err != nil || got.Source != k.Source || got.Outflow.RequestsPerUnit != 20 {
		t.Fatalf("Key = %+v %v", got, err)
	}
	if k, err = a.TuneKey(ctx, "even", "m 42/x", client.KeyPatch{Reset: true}); err != nil || k.Source != "rule" || k.OutflowPerSecond != 10 || k.Override != nil {
		t.Fatalf("reset = %+v %v", k, err)
	}
	lines := make([]client.KeyLine, 1000)
	for i := range lines {
		lines[i] = client.KeyLine{Key: fmt.Sprintf("m-%d", i), Outflow: &client.Rate{Unit: "minute", RequestsPerUnit: 30}, For: time.Hour}
	}
	res, err := a.TuneKeys(ctx, "even", lines)
	if err != nil || res.Set != 1000 || res.Written != 1000 {
		t.Fatalf("TuneKeys = %+v %v", res, err)
	}
	if got, err := a.Key(ctx, "even", "m-999"); err != nil || got.OutflowPerSecond != 0.5 {
		t.Fatalf("m-999 = %+v %v", got, err)
	}
	_, err = a.TuneKeys(ctx, "even", []client.KeyLine{{Key: "a", Paused: true}, {Key: "b"}})
	var pe *client.ProblemError
	if !errors.As(err, &pe) || pe.Status != 400 || pe.Field != "line 2: " && !strings.HasPrefix(pe.Field, "line 2") {
		t.Fatalf("a line that sets nothing: %v", err)
	}
}
