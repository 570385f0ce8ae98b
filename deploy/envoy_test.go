package deploy_test

import (
	"encoding/json"
	"os"
	"strconv"
	"strings"
	"testing"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	ratelimitv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ratelimit/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	upstreamhttpv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"gopkg.in/yaml.v3"

	"github.com/sluice-io/sluice/internal/rules"
)

// There is no Envoy binary here: these tests read the Envoy and Istio examples with
// go-control-plane's generated types (every field name and type checked, every typed_config
// resolved), run Envoy's own proto validation rules, and check that they point at sluice's
// gRPC port and send descriptors that the example rules know.

const rlsService = "envoy.service.ratelimit.v3.RateLimitService"

// yamlToProto decodes a YAML value into m the way Envoy reads YAML: as proto JSON.
func yamlToProto(t *testing.T, v any, m proto.Message) {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := protojson.Unmarshal(b, m); err != nil {
		t.Fatalf("%T: %v", m, err)
	}
}

func TestEnvoyExample(t *testing.T) {
	t.Parallel()
	var doc any
	decodeFile(t, "envoy/envoy.yaml", &doc)
	var b bootstrapv3.Bootstrap
	yamlToProto(t, doc, &b)
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("envoy/envoy.yaml: %v", err)
	}

	// The rate limit service cluster: sluice's gRPC port, HTTP/2, health-checked with
	// grpc.health.v1 for the RLS service.
	var rls *clusterv3.Cluster
	for _, c := range b.StaticResources.Clusters {
		if c.Name == "sluice_ratelimit" {
			rls = c
		}
	}
	if rls == nil {
		t.Fatal("no sluice_ratelimit cluster")
	}
	port := rls.LoadAssignment.Endpoints[0].LbEndpoints[0].GetEndpoint().Address.GetSocketAddress().GetPortValue()
	if port != 8081 {
		t.Errorf("sluice_ratelimit points at port %d, not the ingress's -grpc default 8081", port)
	}
	var po upstreamhttpv3.HttpProtocolOptions
	if a := rls.TypedExtensionProtocolOptions["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"]; a == nil || a.UnmarshalTo(&po) != nil || po.GetExplicitHttpConfig().GetHttp2ProtocolOptions() == nil {
		t.Error("sluice_ratelimit does not speak HTTP/2 (gRPC needs it)")
	}
	if len(rls.HealthChecks) == 0 || rls.HealthChecks[0].GetGrpcHealthCheck().GetServiceName() != rlsService {
		t.Errorf("sluice_ratelimit is not health-checked with grpc.health.v1 for %s", rlsService)
	}

	// The HTTP filter asks that cluster, over v3, for a domain of the example rules; the
	// route's actions build descriptors that those rules match.
	set, err := rules.Load("examples")
	if err != nil {
		t.Fatal(err)
	}
	var hcm hcmv3.HttpConnectionManager
	filter := b.StaticResources.Listeners[0].FilterChains[0].Filters[0]
	if err := filter.GetTypedConfig().UnmarshalTo(&hcm); err != nil {
		t.Fatal(err)
	}
	var rl ratelimitv3.RateLimit
	found := false
	for _, f := range hcm.HttpFilters {
		if f.Name == "envoy.filters.http.ratelimit" {
			if err := f.GetTypedConfig().UnmarshalTo(&rl); err != nil {
				t.Fatal(err)
			}
			found = true
		}
	}
	if !found {
		t.Fatal("no envoy.filters.http.ratelimit filter")
	}
	checkRateLimitFilter(t, &rl, "sluice_ratelimit", set)

	routes := hcm.GetRouteConfig().VirtualHosts[0].Routes[0].GetRoute().RateLimits
	// A sample request: client 10.1.2.3, anonymous, GET /api/orders, x-client-id scraper-7, x-banned true.
	sample := map[string]string{"remote_address": "10.1.2.3", "path": "/api/orders", "client_id": "scraper-7"}
	for i, r := range routes {
		var entries []rules.Entry
		for _, a := range r.Actions {
			switch {
			case a.GetRemoteAddress() != nil:
				entries = append(entries, rules.Entry{Key: "remote_address", Value: sample["remote_address"]})
			case a.GetGenericKey() != nil:
				entries = append(entries, rules.Entry{Key: a.GetGenericKey().DescriptorKey, Value: a.GetGenericKey().DescriptorValue})
			case a.GetRequestHeaders() != nil:
				k := a.GetRequestHeaders().DescriptorKey
				entries = append(entries, rules.Entry{Key: k, Value: sample[k]})
			case a.GetHeaderValueMatch() != nil:
				entries = append(entries, rules.Entry{Key: a.GetHeaderValueMatch().DescriptorKey, Value: a.GetHeaderValueMatch().DescriptorValue})
			default:
				t.Fatalf("rate_limits[%d]: an action this test does not know: %v", i, a)
			}
		}
		if _, ok := set.Match(rl.Domain, entries); !ok {
			t.Errorf("rate_limits[%d] sends %v, which no rule of domain %s matches", i, entries, rl.Domain)
		}
	}
}

// checkRateLimitFilter checks the envoy rate limit filter's settings against sluice.
func checkRateLimitFilter(t *testing.T, rl *ratelimitv3.RateLimit, cluster string, set *rules.Set) {
	t.Helper()
	if err := rl.ValidateAll(); err != nil {
		t.Fatal(err)
	}
	svc := rl.GetRateLimitService()
	if svc.GetGrpcService().GetEnvoyGrpc().GetClusterName() != cluster {
		t.Errorf("the filter asks cluster %q, want %q", svc.GetGrpcService().GetEnvoyGrpc().GetClusterName(), cluster)
	}
	if svc.GetTransportApiVersion().String() != "V3" {
		t.Errorf("transport_api_version %v: sluice serves v3 only", svc.GetTransportApiVersion())
	}
	known := false
	for _, r := range set.Rules() {
		known = known || r.Domain == rl.Domain
	}
	if !known {
		t.Errorf("domain %q is in no rules file of deploy/examples", rl.Domain)
	}
	if rl.FailureModeDeny {
		t.Error("failure_mode_deny: true would refuse every request while sluice is unreachable")
	}
}

func TestIstioExample(t *testing.T) {
	t.Parallel()
	var ef struct {
		Kind string `yaml:"kind"`
		Spec struct {
			ConfigPatches []struct {
				ApplyTo string `yaml:"applyTo"`
				Patch   struct {
					Operation string `yaml:"operation"`
					Value     any    `yaml:"value"`
				} `yaml:"patch"`
			} `yaml:"configPatches"`
		} `yaml:"spec"`
	}
	decodeFile(t, "envoy/istio-envoyfilter.yaml", &ef)
	if ef.Kind != "EnvoyFilter" || len(ef.Spec.ConfigPatches) != 2 {
		t.Fatalf("want an EnvoyFilter with two patches, got %s with %d", ef.Kind, len(ef.Spec.ConfigPatches))
	}
	set, err := rules.Load("examples")
	if err != nil {
		t.Fatal(err)
	}
	// The k8s Service of the ingress and its gRPC port, as Istio names outbound clusters.
	cluster := "outbound|8081||sluice-ingress.sluice.svc.cluster.local"
	for _, p := range ef.Spec.ConfigPatches {
		switch p.ApplyTo {
		case "HTTP_FILTER":
			var f hcmv3.HttpFilter
			yamlToProto(t, p.Patch.Value, &f)
			if err := f.ValidateAll(); err != nil {
				t.Fatal(err)
			}
			var rl ratelimitv3.RateLimit
			if err := f.GetTypedConfig().UnmarshalTo(&rl); err != nil {
				t.Fatal(err)
			}
			checkRateLimitFilter(t, &rl, cluster, set)
		case "VIRTUAL_HOST":
			var vh routev3.VirtualHost // a MERGE patch: a partial VirtualHost
			yamlToProto(t, p.Patch.Value, &vh)
			if len(vh.RateLimits) == 0 {
				t.Error("the VIRTUAL_HOST patch adds no rate_limits")
			}
		default:
			t.Errorf("unexpected patch %s", p.ApplyTo)
		}
	}
	// The Service and port the cluster name refers to exist in the k8s manifests.
	data, err := os.ReadFile("k8s/ingress.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var svc struct {
		Kind     string `yaml:"kind"`
		Metadata struct{ Name, Namespace string }
		Spec     struct {
			Ports []servicePort `yaml:"ports"`
		} `yaml:"spec"`
	}
	ok := false
	for _, doc := range strings.Split(string(data), "\n---\n") {
		if yaml.Unmarshal([]byte(doc), &svc) == nil && svc.Kind == "Service" {
			for _, p := range svc.Spec.Ports {
				ok = ok || ("outbound|"+strconv.Itoa(p.Port)+"||"+svc.Metadata.Name+"."+svc.Metadata.Namespace+".svc.cluster.local" == cluster)
			}
		}
	}
	if !ok {
		t.Errorf("no k8s Service and port behind %s", cluster)
	}
}
