package process_test

import (
	"io"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/internal/process"
	"github.com/sluice-io/sluice/internal/process/ingress"
)

// TestSettingsDeclaredOnce: every flag the ingress and the drainer both have comes from the
// one table of process.Settings (neither declares a shared flag again), with the same
// environment variable, and the shared checks answer the same in both processes.
func TestSettingsDeclaredOnce(t *testing.T) {
	t.Parallel()
	shared := map[process.Role]map[string]process.Flag{}
	for _, r := range []process.Role{process.RoleIngress, process.RoleDrainer} {
		var s process.Settings
		f := process.NewFlagSet("settings", func(string) string { return "" }, io.Discard)
		s.Declare(f, r)
		shared[r] = map[string]process.Flag{}
		for _, fl := range f.Flags() {
			shared[r][fl.Name] = fl
		}
	}
	byName := func(l []process.Flag) map[string]process.Flag {
		m := map[string]process.Flag{}
		for _, f := range l {
			m[f.Name] = f
		}
		return m
	}
	ing, dr := byName(ingress.Flags()), byName(process.DrainerFlags())
	for name, f := range ing {
		if g, both := dr[name]; both {
			if _, ok := shared[process.RoleIngress][name]; !ok {
				t.Errorf("-%s: declared by both processes, not in process.Settings", name)
			}
			if f.Env != g.Env {
				t.Errorf("-%s: env %s in the ingress, %s in the drainer", name, f.Env, g.Env)
			}
		}
	}
	for r, l := range map[process.Role]map[string]process.Flag{process.RoleIngress: ing, process.RoleDrainer: dr} {
		for name, want := range shared[r] {
			if got, ok := l[name]; !ok || got != want {
				t.Errorf("role %d -%s: %+v, want the Settings row %+v", r, name, got, want)
			}
		}
	}
	// -workers is -drain-workers in the ingress: one field, two names.
	if _, ok := shared[process.RoleIngress]["drain-workers"]; !ok {
		t.Error("the ingress's -drain-workers is not the Settings' Workers")
	}

	none := func(string) string { return "" }
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"-replicas", "2"}, "-replicas: want 1 or 3, got 2"},
		{[]string{"-nats-cert", "c.pem"}, "-nats-cert and -nats-key: give both or neither"},
		{[]string{"-tls-client-ca", "ca.pem"}, "-tls-client-ca: needs -tls-cert and -tls-key (client certificates are only asked for over TLS)"},
		{[]string{"-engine", "fast"}, `-engine: want claim or own, got "fast"`},
		{[]string{"-status-keep-max", "0"}, "-status-keep-max: want a positive number of records, got 0"},
		{[]string{"-redis", "redis://h:6379?dial_timout=1s"}, "dial_timout"},
	} {
		args := append([]string{"-rules", "x"}, tc.args...)
		_, ierr := ingress.ParseFlags(args, none, io.Discard)
		_, derr := process.ParseDrainerFlags(args, none, io.Discard)
		for who, err := range map[string]error{"ingress": ierr, "drainer": derr} {
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%s %v: %v, want %q", who, tc.args, err, tc.want)
			}
		}
	}
	// Defaults written once: both read "own" from the one row.
	ic, err := ingress.ParseFlags([]string{"-rules", "x"}, none, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	dc, err := process.ParseDrainerFlags([]string{"-rules", "x"}, none, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if ic.Engine != "own" || dc.Engine != "own" || ic.Workers != 32 || dc.Workers != 32 {
		t.Errorf("defaults: ingress engine %q workers %d, drainer engine %q workers %d", ic.Engine, ic.Workers, dc.Engine, dc.Workers)
	}
}
