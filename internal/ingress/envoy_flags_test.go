package ingress_test

import (
	"io"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/internal/decide"
	ingressproc "github.com/sluice-io/sluice/internal/process/ingress"
)

// The envoy parity flags: defaults as envoy's (all off), each flag and its SLUICE_*
// variable, a bad value refused naming the flag, and -check-config taking -rules' list.
func TestEnvoyParityFlags(t *testing.T) {
	t.Parallel()
	parse := func(env map[string]string, args ...string) (ingressproc.Config, error) {
		return ingressproc.ParseFlags(append([]string{"-rules", "r.yaml"}, args...), func(k string) string { return env[k] }, io.Discard)
	}
	c, err := parse(nil)
	if err != nil {
		t.Fatal(err)
	}
	if c.MergeDomainConfig || c.ShadowMode || c.QuotaMode || c.ResponseDynamicMetadata || c.LocalCacheBytes != 0 ||
		c.DetailedMetricValues != decide.DefaultDetailedMetricValues || len(c.CheckConfig) != 0 {
		t.Fatalf("defaults: %+v", c)
	}
	c, err = parse(nil, "-merge-domain-config", "-shadow-mode=true", "-quota-mode=1", "-response-dynamic-metadata",
		"-local-cache-bytes", "1048576", "-detailed-metric-values", "7")
	if err != nil {
		t.Fatal(err)
	}
	if !c.MergeDomainConfig || !c.ShadowMode || !c.QuotaMode || !c.ResponseDynamicMetadata || c.LocalCacheBytes != 1<<20 || c.DetailedMetricValues != 7 {
		t.Fatalf("flags: %+v", c)
	}
	c, err = parse(map[string]string{"SLUICE_MERGE_DOMAIN_CONFIG": "true", "SLUICE_SHADOW_MODE": "true", "SLUICE_QUOTA_MODE": "true",
		"SLUICE_RESPONSE_DYNAMIC_METADATA": "true", "SLUICE_LOCAL_CACHE_SIZE_IN_BYTES": "4096", "SLUICE_DETAILED_METRIC_VALUES": "0"})
	if err != nil {
		t.Fatal(err)
	}
	if !c.MergeDomainConfig || !c.ShadowMode || !c.QuotaMode || !c.ResponseDynamicMetadata || c.LocalCacheBytes != 4096 || c.DetailedMetricValues != 0 {
		t.Fatalf("environment: %+v", c)
	}
	if c, err = parse(map[string]string{"SLUICE_SHADOW_MODE": "true"}, "-shadow-mode=false"); err != nil || c.ShadowMode {
		t.Fatalf("the flag must win over the environment: %v %v", c.ShadowMode, err)
	}
	for _, bad := range [][]string{{"-shadow-mode=yes please"}, {"-quota-mode=2"}, {"-merge-domain-config=x"},
		{"-response-dynamic-metadata=on"}, {"-local-cache-bytes", "-1"}, {"-local-cache-bytes", "1XB"}, {"-detailed-metric-values", "-2"}} {
		name := strings.SplitN(bad[0], "=", 2)[0]
		if _, err := parse(nil, bad...); err == nil || !strings.Contains(err.Error(), name+":") && !strings.Contains(err.Error(), "for flag "+name) {
			t.Errorf("%v: %v, want an error naming %s", bad, err, name)
		}
	}
	for name, v := range map[string]string{"SLUICE_SHADOW_MODE": "maybe", "SLUICE_LOCAL_CACHE_SIZE_IN_BYTES": "lots", "SLUICE_DETAILED_METRIC_VALUES": "x"} {
		if _, err := parse(map[string]string{name: v}); err == nil || !strings.HasPrefix(err.Error(), name+":") {
			t.Errorf("%s=%s: %v, want an error naming %s", name, v, err, name)
		}
	}
	c, err = ingressproc.ParseFlags([]string{"-check-config", "a.yaml, dir/ ,b.yml"}, func(string) string { return "" }, io.Discard)
	if err != nil || strings.Join(c.CheckConfig, "|") != "a.yaml|dir/|b.yml" {
		t.Fatalf("-check-config list: %q %v", c.CheckConfig, err)
	}
}
