package process_test

import (
	"io"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/internal/process"
)

// -sign-scheme: sluice by default, standard-webhooks from the flag or SLUICE_SIGN_SCHEME,
// anything else refused naming the flag.
func TestSignSchemeFlag(t *testing.T) {
	t.Parallel()
	env := func(k string) string { return map[string]string{"SLUICE_RULES": "a.yaml"}[k] }
	c, err := process.ParseDrainerFlags(nil, env, io.Discard)
	if err != nil || c.SignScheme != "sluice" {
		t.Fatalf("default: %q, %v", c.SignScheme, err)
	}
	c, err = process.ParseDrainerFlags(nil, func(k string) string {
		return map[string]string{"SLUICE_RULES": "a.yaml", "SLUICE_SIGN_SCHEME": "standard-webhooks"}[k]
	}, io.Discard)
	if err != nil || c.SignScheme != "standard-webhooks" {
		t.Fatalf("from SLUICE_SIGN_SCHEME: %q, %v", c.SignScheme, err)
	}
	if _, err := process.ParseDrainerFlags([]string{"-sign-scheme", "stripe"}, env, io.Discard); err == nil || !strings.Contains(err.Error(), "-sign-scheme") {
		t.Fatalf("-sign-scheme stripe: %v, want an error naming -sign-scheme", err)
	}
}
