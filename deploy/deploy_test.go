package deploy_test

// These tests check the deployment files without Docker or a cluster: everything parses,
// the dashboard only queries metrics that exist (docs/metrics.md's core set plus the listed
// extras), the compose file has the production shape (3 clustered NATS nodes, 2 ingress,
// 3 drainers), and the Kubernetes manifests have probes, budgets, resources and a grace
// period that covers the shutdown timeout. They run from the deploy/ directory.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	"gopkg.in/yaml.v3"
)

// sluiceEnv is every environment variable the binaries read (the flag tables of the ingress
// and drainer in docs/configuration.md). A typo in a manifest would silently fall back to a
// default.
var sluiceEnv = []string{
	"SLUICE_RULES", "SLUICE_HTTP_ADDR", "SLUICE_NATS_URL", "SLUICE_REDIS_URL",
	"SLUICE_REPLICAS", "SLUICE_LOG_FORMAT", "SLUICE_SHUTDOWN_TIMEOUT",
}

// ingressEnv is read by the ingress only; its manifests must set it (issue #12: the gRPC
// port is exposed wherever the ingress runs; issue #32: the admin token is the ingress's
// only — a drainer serves no admin API, and a manifest giving it one is refused as an
// unknown variable).
var ingressEnv = []string{"SLUICE_GRPC_ADDR", "SLUICE_ADMIN_TOKEN"}

// ingressExtras are metrics the dashboard may show beyond docs/metrics.md's core set.
var ingressExtras = []string{
	"sluice_limiter_degraded", "sluice_rules_reload_total", "sluice_rules_loaded",
	"sluice_checks_total", "sluice_readmissions_total", "sluice_grpc_request_duration_seconds",
	"sluice_breaker_state", // docs/metrics.md "More metrics": the drainers' sink breakers
}

// dashboardMust are the metrics the dashboard has to show (issue #6).
var dashboardMust = []string{
	"sluice_admissions_total", "sluice_queue_depth", "sluice_outflow_rate", "sluice_deliveries_total",
	"sluice_dispatch_lag_seconds", "sluice_parked", "sluice_dead", "sluice_limiter_degraded",
	"sluice_rules_reload_total", "sluice_http_request_duration_seconds",
}

// yamlFiles lists every .yaml/.yml file under deploy/.
func yamlFiles(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && (strings.HasSuffix(path, ".yaml") || strings.HasSuffix(path, ".yml")) {
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// documents decodes every YAML document of path, in order.
func documents(t *testing.T, path string) []*yaml.Node {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []*yaml.Node
	for {
		var n yaml.Node
		err := dec.Decode(&n)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		docs = append(docs, &n)
	}
	return docs
}

func decodeFile(t *testing.T, path string, v any) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.Unmarshal(data, v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func TestEveryYAMLFileParses(t *testing.T) {
	t.Parallel()
	files := yamlFiles(t)
	for _, want := range []string{
		"docker-compose.yml", "prometheus/prometheus.yml",
		"grafana/provisioning/datasources/prometheus.yml", "grafana/provisioning/dashboards/sluice.yml",
		"k8s/ingress.yaml", "k8s/drainer.yaml", "k8s/configmap-rules.yaml", "k8s/kustomization.yaml",
	} {
		if !slices.Contains(files, filepath.FromSlash(want)) {
			t.Errorf("%s is missing", want)
		}
	}
	for _, f := range files {
		if docs := documents(t, f); len(docs) == 0 {
			t.Errorf("%s: no YAML document", f)
		}
	}
}

// --- dashboard ---

type dashboard struct {
	UID        string  `json:"uid"`
	Title      string  `json:"title"`
	Panels     []panel `json:"panels"`
	Templating struct {
		List []struct {
			Name  string `json:"name"`
			Type  string `json:"type"`
			Query any    `json:"query"`
		} `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	Targets    []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // collapsed rows
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	data, err := os.ReadFile("grafana/dashboards/sluice.json")
	if err != nil {
		t.Fatal(err)
	}
	var d dashboard
	if err := json.Unmarshal(data, &d); err != nil {
		t.Fatalf("grafana/dashboards/sluice.json: %v", err)
	}
	return d
}

// exprs returns every PromQL expression of the dashboard: panel targets and template
// variable queries.
func (d dashboard) exprs() []string {
	var out []string
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				out = append(out, tg.Expr)
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	for _, v := range d.Templating.List {
		switch q := v.Query.(type) {
		case string:
			if v.Type == "query" {
				out = append(out, q)
			}
		case map[string]any:
			if s, ok := q["query"].(string); ok {
				out = append(out, s)
			}
		}
	}
	return out
}

var metricName = regexp.MustCompile(`\bsluice_[a-z0-9_]+`)

// baseMetric strips the suffixes Prometheus adds to a histogram's series.
func baseMetric(name string) string {
	for _, suf := range []string{"_bucket", "_sum", "_count"} {
		if b, ok := strings.CutSuffix(name, suf); ok && !strings.HasSuffix(name, "_total") {
			return b
		}
	}
	return name
}

func dashboardMetrics(d dashboard) map[string]bool {
	used := map[string]bool{}
	for _, e := range d.exprs() {
		for _, m := range metricName.FindAllString(e, -1) {
			used[m] = true
		}
	}
	return used
}

func TestDashboard(t *testing.T) {
	t.Parallel()
	d := loadDashboard(t)
	if d.UID == "" || d.Title == "" {
		t.Error("dashboard needs a uid and a title")
	}
	var hasRule bool
	for _, v := range d.Templating.List {
		hasRule = hasRule || v.Name == "rule"
	}
	if !hasRule {
		t.Error("dashboard has no template variable `rule`")
	}

	ids := map[int]bool{}
	var check func([]panel)
	check = func(ps []panel) {
		for _, p := range ps {
			if ids[p.ID] {
				t.Errorf("panel id %d used twice", p.ID)
			}
			ids[p.ID] = true
			if p.Type != "row" {
				if len(p.Targets) == 0 {
					t.Errorf("panel %q has no query", p.Title)
				}
				if len(p.Datasource) == 0 {
					t.Errorf("panel %q has no datasource", p.Title)
				}
			}
			for _, tg := range p.Targets {
				if strings.Count(tg.Expr, "(") != strings.Count(tg.Expr, ")") ||
					strings.Count(tg.Expr, "{") != strings.Count(tg.Expr, "}") {
					t.Errorf("panel %q: unbalanced brackets in %s", p.Title, tg.Expr)
				}
				if strings.Contains(tg.Expr, "histogram_quantile") &&
					(!strings.Contains(tg.Expr, "_bucket") || !strings.Contains(tg.Expr, "le")) {
					t.Errorf("panel %q: histogram_quantile needs _bucket series by le: %s", p.Title, tg.Expr)
				}
			}
			check(p.Panels)
		}
	}
	check(d.Panels)

	used := map[string]bool{}
	for m := range dashboardMetrics(d) {
		used[baseMetric(m)] = true
	}
	for _, m := range dashboardMust {
		if !used[m] {
			t.Errorf("dashboard does not show %s", m)
		}
	}
	for _, q := range []string{
		`histogram_quantile(0.5, sum by (le, rule) (rate(sluice_dispatch_lag_seconds_bucket`,
		`histogram_quantile(0.99, sum by (le, rule) (rate(sluice_dispatch_lag_seconds_bucket`,
		`histogram_quantile(0.99, sum by (le, route) (rate(sluice_http_request_duration_seconds_bucket`,
		`rate(sluice_deliveries_total{rule=~"$rule",outcome="delivered"}[1m])`,
	} {
		if !slices.ContainsFunc(d.exprs(), func(e string) bool { return strings.Contains(e, q) }) {
			t.Errorf("dashboard has no query containing %s", q)
		}
	}
}

// apiMetrics reads the metric names of docs/metrics.md's "## Metrics" section (the core set).
func apiMetrics(t *testing.T) (names []string, path string) {
	t.Helper()
	c := "../docs/metrics.md"
	data, err := os.ReadFile(c)
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	i := strings.Index(s, "\n## Metrics")
	if i < 0 {
		t.Fatalf("%s has no \"## Metrics\" section", c)
	}
	s = s[i+1:]
	if j := strings.Index(s[3:], "\n## "); j >= 0 {
		s = s[:j+3]
	}
	seen := map[string]bool{}
	for _, m := range metricName.FindAllString(s, -1) {
		if !seen[m] {
			seen[m] = true
			names = append(names, m)
		}
	}
	if len(names) == 0 {
		t.Fatalf("%s: no sluice_ metric in the Metrics section", c)
	}
	return names, c
}

func TestDashboardMetricsExist(t *testing.T) {
	t.Parallel()
	names, path := apiMetrics(t)
	known := map[string]bool{}
	for _, m := range append(names, ingressExtras...) {
		known[m] = true
	}
	d := loadDashboard(t)
	used := dashboardMetrics(d)
	var unknown []string
	for m := range used {
		if !known[m] && !known[baseMetric(m)] {
			unknown = append(unknown, m)
		}
	}
	sort.Strings(unknown)
	if len(unknown) > 0 {
		t.Errorf("dashboard queries metrics that are neither in %s nor ingress extras: %v", path, unknown)
	}
	// The contract's metrics are all on the dashboard.
	for _, m := range names {
		if !used[m] && !used[m+"_bucket"] && !used[m+"_count"] {
			t.Errorf("%s lists %s, but the dashboard does not show it", path, m)
		}
	}
}

// --- docker compose ---

type composeService struct {
	Image string `yaml:"image"`
	Build *struct {
		Context    string `yaml:"context"`
		Dockerfile string `yaml:"dockerfile"`
		Target     string `yaml:"target"`
	} `yaml:"build"`
	Command     []string          `yaml:"command"`
	Environment map[string]string `yaml:"environment"`
	Volumes     []string          `yaml:"volumes"`
	Ports       []string          `yaml:"ports"`
	NetworkMode string            `yaml:"network_mode"`
}

type composeFile struct {
	Services map[string]composeService `yaml:"services"`
	Volumes  map[string]any            `yaml:"volumes"`
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	var c composeFile
	decodeFile(t, "docker-compose.yml", &c)
	return c
}

// flagValue returns the argument after flag in cmd.
func flagValue(cmd []string, flag string) string {
	for i, a := range cmd {
		if a == flag && i+1 < len(cmd) {
			return cmd[i+1]
		}
		if v, ok := strings.CutPrefix(a, flag+"="); ok {
			return v
		}
	}
	return ""
}

func servicesWithPrefix(c composeFile, prefix string) []string {
	var out []string
	for name := range c.Services {
		if strings.HasPrefix(name, prefix) {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func TestCompose(t *testing.T) {
	t.Parallel()
	c := loadCompose(t)

	nats := servicesWithPrefix(c, "nats-")
	if len(nats) != 3 {
		t.Fatalf("want 3 NATS services, got %v", nats)
	}
	for _, name := range nats {
		s := c.Services[name]
		if !strings.HasPrefix(s.Image, "nats:") && !strings.Contains(s.Image, ":-nats:") {
			t.Errorf("%s: image %q is not the official nats image", name, s.Image)
		}
		if !slices.Contains(s.Command, "--jetstream") && !slices.Contains(s.Command, "-js") {
			t.Errorf("%s: JetStream not enabled: %v", name, s.Command)
		}
		if flagValue(s.Command, "--name") != name {
			t.Errorf("%s: server name %q, want the service name", name, flagValue(s.Command, "--name"))
		}
		if flagValue(s.Command, "--cluster_name") == "" || flagValue(s.Command, "--cluster") == "" {
			t.Errorf("%s: no cluster listen/name: %v", name, s.Command)
		}
		routes := flagValue(s.Command, "--routes")
		for _, peer := range nats {
			if !strings.Contains(routes, "nats://"+peer+":6222") {
				t.Errorf("%s: routes %q miss %s", name, routes, peer)
			}
		}
		store := flagValue(s.Command, "--store_dir")
		if store == "" || !slices.ContainsFunc(s.Volumes, func(v string) bool { return strings.HasSuffix(v, ":"+store) }) {
			t.Errorf("%s: JetStream store %q is not on a volume (%v)", name, store, s.Volumes)
		}
		for _, v := range s.Volumes {
			if vol, _, _ := strings.Cut(v, ":"); !strings.HasPrefix(vol, ".") {
				if _, ok := c.Volumes[vol]; !ok {
					t.Errorf("%s: volume %q is not declared", name, vol)
				}
			}
		}
	}

	if r, ok := c.Services["redis"]; !ok || !strings.HasPrefix(r.Image, "redis:7") {
		t.Errorf("want a redis:7 service, got %+v", r)
	}
	for _, name := range []string{"prometheus", "grafana"} {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("no %s service", name)
		}
	}

	for _, kind := range []struct {
		prefix, target, port string
		n                    int
	}{{"ingress-", "ingress", ":8080", 2}, {"drainer-", "drainer", ":8082", 3}} {
		names := servicesWithPrefix(c, kind.prefix)
		if len(names) != kind.n {
			t.Errorf("want %d %s services, got %v", kind.n, kind.target, names)
		}
		for _, name := range names {
			s := c.Services[name]
			if s.Build == nil || s.Build.Target != kind.target || s.Build.Dockerfile != "deploy/Dockerfile" || s.Build.Context != ".." {
				t.Errorf("%s: not built from deploy/Dockerfile target %s: %+v", name, kind.target, s.Build)
			}
			env := s.Environment
			if env["SLUICE_REPLICAS"] != "3" {
				t.Errorf("%s: SLUICE_REPLICAS = %q, want 3", name, env["SLUICE_REPLICAS"])
			}
			if env["SLUICE_HTTP_ADDR"] != kind.port {
				t.Errorf("%s: SLUICE_HTTP_ADDR = %q, want %s", name, env["SLUICE_HTTP_ADDR"], kind.port)
			}
			for _, n := range nats {
				if !strings.Contains(env["SLUICE_NATS_URL"], "nats://"+n+":4222") {
					t.Errorf("%s: SLUICE_NATS_URL %q misses %s", name, env["SLUICE_NATS_URL"], n)
				}
			}
			if !strings.HasPrefix(env["SLUICE_REDIS_URL"], "redis://redis:") {
				t.Errorf("%s: SLUICE_REDIS_URL = %q", name, env["SLUICE_REDIS_URL"])
			}
			mount := "./examples:" + env["SLUICE_RULES"]
			if env["SLUICE_RULES"] == "" || !slices.ContainsFunc(s.Volumes, func(v string) bool { return strings.HasPrefix(v, mount) }) {
				t.Errorf("%s: rules %q not mounted from deploy/examples (%v)", name, env["SLUICE_RULES"], s.Volumes)
			}
			known := sluiceEnv
			if kind.target == "ingress" {
				known = append(slices.Clone(sluiceEnv), ingressEnv...)
				// The envoy rate limit service listens and is published on the host.
				if env["SLUICE_GRPC_ADDR"] != ":8081" || !slices.ContainsFunc(s.Ports, func(p string) bool { return strings.HasSuffix(p, ":8081") }) {
					t.Errorf("%s: gRPC not exposed: SLUICE_GRPC_ADDR %q, ports %v", name, env["SLUICE_GRPC_ADDR"], s.Ports)
				}
			}
			for k := range env {
				if !slices.Contains(known, k) {
					t.Errorf("%s: unknown environment variable %s", name, k)
				}
			}
			for _, k := range known {
				if _, ok := env[k]; !ok {
					t.Errorf("%s: %s not set", name, k)
				}
			}
		}
	}

	// Every sidecar sink shares a drainer's network namespace (the example rules deliver
	// to 127.0.0.1:8090).
	for _, name := range servicesWithPrefix(c, "sink-") {
		target, ok := strings.CutPrefix(c.Services[name].NetworkMode, "service:")
		if _, exists := c.Services[target]; !ok || !exists || !strings.HasPrefix(target, "drainer-") {
			t.Errorf("%s: network_mode %q is not a drainer's", name, c.Services[name].NetworkMode)
		}
	}

	// Bind mounts point at files that exist.
	for name, s := range c.Services {
		for _, v := range s.Volumes {
			src, _, _ := strings.Cut(v, ":")
			if strings.HasPrefix(src, ".") {
				if _, err := os.Stat(src); err != nil {
					t.Errorf("%s: bind mount %s: %v", name, src, err)
				}
			}
		}
	}

	// Prometheus scrapes exactly these processes.
	var prom struct {
		ScrapeConfigs []struct {
			JobName       string `yaml:"job_name"`
			MetricsPath   string `yaml:"metrics_path"`
			StaticConfigs []struct {
				Targets []string `yaml:"targets"`
			} `yaml:"static_configs"`
		} `yaml:"scrape_configs"`
	}
	decodeFile(t, "prometheus/prometheus.yml", &prom)
	scraped := map[string]bool{}
	for _, sc := range prom.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			for _, tg := range st.Targets {
				scraped[tg] = sc.MetricsPath == "" || sc.MetricsPath == "/metrics"
			}
		}
	}
	for _, n := range servicesWithPrefix(c, "ingress-") {
		if !scraped[n+":8080"] {
			t.Errorf("prometheus does not scrape %s:8080/metrics", n)
		}
	}
	for _, n := range servicesWithPrefix(c, "drainer-") {
		if !scraped[n+":8082"] {
			t.Errorf("prometheus does not scrape %s:8082/metrics", n)
		}
	}
}

func TestGrafanaProvisioning(t *testing.T) {
	t.Parallel()
	var ds struct {
		Datasources []struct {
			UID  string `yaml:"uid"`
			Type string `yaml:"type"`
			URL  string `yaml:"url"`
		} `yaml:"datasources"`
	}
	decodeFile(t, "grafana/provisioning/datasources/prometheus.yml", &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" || ds.Datasources[0].URL != "http://prometheus:9090" {
		t.Errorf("datasources = %+v", ds.Datasources)
	}
	var dp struct {
		Providers []struct {
			Options struct {
				Path string `yaml:"path"`
			} `yaml:"options"`
		} `yaml:"providers"`
	}
	decodeFile(t, "grafana/provisioning/dashboards/sluice.yml", &dp)
	if len(dp.Providers) != 1 {
		t.Fatalf("providers = %+v", dp.Providers)
	}
	// The provider reads the directory compose mounts deploy/grafana/dashboards at.
	c := loadCompose(t)
	want := "./grafana/dashboards:" + dp.Providers[0].Options.Path
	if !slices.ContainsFunc(c.Services["grafana"].Volumes, func(v string) bool { return strings.HasPrefix(v, want) }) {
		t.Errorf("grafana does not mount the dashboards at %s: %v", dp.Providers[0].Options.Path, c.Services["grafana"].Volumes)
	}
}

// TestComposeConfig runs `docker compose config`, which validates the file against the
// compose schema without an engine. Skipped where no compose client is installed.
func TestComposeConfig(t *testing.T) {
	t.Parallel()
	var cmd []string
	if exec.Command("docker", "compose", "version").Run() == nil {
		cmd = []string{"docker", "compose"}
	} else if exec.Command("docker-compose", "version").Run() == nil {
		cmd = []string{"docker-compose"}
	} else {
		t.Skip("no docker compose client (neither `docker compose` nor `docker-compose`): skipping only the compose schema check")
	}
	out, err := exec.Command(cmd[0], append(cmd[1:], "-f", "docker-compose.yml", "config", "--quiet")...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s config: %v\n%s", strings.Join(cmd, " "), err, out)
	}
}

func TestDockerfile(t *testing.T) {
	t.Parallel()
	data, err := os.ReadFile("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	s := string(data)
	for _, want := range []string{"./cmd/ingress", "./cmd/drainer", "CGO_ENABLED=0", "AS ingress", "AS drainer", "distroless/static"} {
		if !strings.Contains(s, want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	users := regexp.MustCompile(`(?m)^USER\s+(\S+)`).FindAllStringSubmatch(s, -1)
	if len(users) < 2 {
		t.Errorf("both runtime stages need a USER, found %d", len(users))
	}
	for _, u := range users {
		if id, _, _ := strings.Cut(u[1], ":"); id == "0" || id == "root" {
			t.Errorf("runtime runs as root: USER %s", u[1])
		}
	}
}

// --- Kubernetes ---

type k8sObject struct {
	APIVersion string `yaml:"apiVersion"`
	Kind       string `yaml:"kind"`
	Metadata   struct {
		Name      string `yaml:"name"`
		Namespace string `yaml:"namespace"`
	} `yaml:"metadata"`
	Data map[string]string `yaml:"data"`
	Spec struct {
		Replicas *int `yaml:"replicas"`
		Selector struct {
			MatchLabels map[string]string `yaml:"matchLabels"`
		} `yaml:"selector"`
		Template struct {
			Metadata struct {
				Labels map[string]string `yaml:"labels"`
			} `yaml:"metadata"`
			Spec podSpec `yaml:"spec"`
		} `yaml:"template"`
		// Service selector is a plain map; PDB selector uses matchLabels (above).
		ServiceSelector map[string]string `yaml:"-"`
		Ports           []servicePort     `yaml:"ports"`
		MinAvailable    any               `yaml:"minAvailable"`
		MaxUnavailable  any               `yaml:"maxUnavailable"`
	} `yaml:"spec"`
}

type servicePort struct {
	Name        string `yaml:"name"`
	Port        int    `yaml:"port"`
	TargetPort  string `yaml:"targetPort"`
	AppProtocol string `yaml:"appProtocol"`
}

type k8sPort struct {
	Name          string `yaml:"name"`
	ContainerPort int    `yaml:"containerPort"`
}

type podSpec struct {
	TerminationGracePeriodSeconds *int `yaml:"terminationGracePeriodSeconds"`
	SecurityContext               struct {
		RunAsNonRoot bool `yaml:"runAsNonRoot"`
	} `yaml:"securityContext"`
	Containers []container `yaml:"containers"`
	Volumes    []podVolume `yaml:"volumes"`
}

type podVolume struct {
	Name      string `yaml:"name"`
	ConfigMap struct {
		Name string `yaml:"name"`
	} `yaml:"configMap"`
}

type probe struct {
	HTTPGet struct {
		Path string `yaml:"path"`
		Port any    `yaml:"port"`
	} `yaml:"httpGet"`
}

type container struct {
	Name  string    `yaml:"name"`
	Image string    `yaml:"image"`
	Ports []k8sPort `yaml:"ports"`
	Env   []struct {
		Name      string `yaml:"name"`
		Value     string `yaml:"value"`
		ValueFrom *struct {
			SecretKeyRef *struct {
				Name string `yaml:"name"`
				Key  string `yaml:"key"`
			} `yaml:"secretKeyRef"`
		} `yaml:"valueFrom"`
	} `yaml:"env"`
	ReadinessProbe *probe `yaml:"readinessProbe"`
	LivenessProbe  *probe `yaml:"livenessProbe"`
	Lifecycle      struct {
		PreStop struct {
			Sleep struct {
				Seconds int `yaml:"seconds"`
			} `yaml:"sleep"`
		} `yaml:"preStop"`
	} `yaml:"lifecycle"`
	Resources struct {
		Requests map[string]string `yaml:"requests"`
		Limits   map[string]string `yaml:"limits"`
	} `yaml:"resources"`
}

func loadK8s(t *testing.T) []k8sObject {
	t.Helper()
	files, err := filepath.Glob("k8s/*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var objs []k8sObject
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		for i, doc := range documents(t, f) {
			var o k8sObject
			if err := doc.Decode(&o); err != nil {
				t.Fatalf("%s document %d: %v", f, i+1, err)
			}
			if o.APIVersion == "" || o.Kind == "" || o.Metadata.Name == "" {
				t.Errorf("%s document %d: needs apiVersion, kind and metadata.name", f, i+1)
			}
			if o.Kind == "Service" {
				var svc struct {
					Spec struct {
						Selector map[string]string `yaml:"selector"`
					} `yaml:"spec"`
				}
				if err := doc.Decode(&svc); err != nil {
					t.Fatal(err)
				}
				o.Spec.ServiceSelector = svc.Spec.Selector
			}
			objs = append(objs, o)
		}
	}
	return objs
}

func matches(selector, labels map[string]string) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

func TestK8s(t *testing.T) {
	t.Parallel()
	objs := loadK8s(t)
	byKind := map[string][]k8sObject{}
	for _, o := range objs {
		byKind[o.Kind] = append(byKind[o.Kind], o)
		if o.Kind != "Namespace" && o.Metadata.Namespace != "sluice" {
			t.Errorf("%s %s: namespace %q, want sluice", o.Kind, o.Metadata.Name, o.Metadata.Namespace)
		}
	}

	wantReplicas := map[string]int{"sluice-ingress": 2, "sluice-drainer": 3}
	wantPort := map[string]int{"sluice-ingress": 8080, "sluice-drainer": 8082}
	if len(byKind["Deployment"]) != len(wantReplicas) {
		t.Fatalf("want Deployments %v, got %d", wantReplicas, len(byKind["Deployment"]))
	}
	for _, d := range byKind["Deployment"] {
		name := d.Metadata.Name
		t.Run(name, func(t *testing.T) {
			want, ok := wantReplicas[name]
			if !ok {
				t.Fatalf("unexpected Deployment %s", name)
			}
			if d.Spec.Replicas == nil || *d.Spec.Replicas != want {
				t.Errorf("replicas = %v, want %d", d.Spec.Replicas, want)
			}
			labels := d.Spec.Template.Metadata.Labels
			if !matches(d.Spec.Selector.MatchLabels, labels) {
				t.Errorf("selector %v does not match the pod labels %v", d.Spec.Selector.MatchLabels, labels)
			}
			pod := d.Spec.Template.Spec
			if !pod.SecurityContext.RunAsNonRoot {
				t.Error("pod does not require runAsNonRoot")
			}
			if len(pod.Containers) != 1 {
				t.Fatalf("want one container, got %d", len(pod.Containers))
			}
			c := pod.Containers[0]
			known := sluiceEnv
			if name == "sluice-ingress" {
				known = append(slices.Clone(sluiceEnv), ingressEnv...)
			}
			env := map[string]string{}
			for _, e := range c.Env {
				if !slices.Contains(known, e.Name) {
					t.Errorf("unknown environment variable %s", e.Name)
				}
				env[e.Name] = e.Value
				if e.Name == "SLUICE_ADMIN_TOKEN" {
					if e.Value != "" || e.ValueFrom == nil || e.ValueFrom.SecretKeyRef == nil || e.ValueFrom.SecretKeyRef.Name == "" {
						t.Error("SLUICE_ADMIN_TOKEN must come from a Secret (secretKeyRef)")
					}
				}
			}
			for _, k := range known {
				if _, ok := env[k]; !ok {
					t.Errorf("%s not set", k)
				}
			}
			if env["SLUICE_REPLICAS"] != "3" {
				t.Errorf("SLUICE_REPLICAS = %q, want 3", env["SLUICE_REPLICAS"])
			}
			if env["SLUICE_HTTP_ADDR"] != fmt.Sprintf(":%d", wantPort[name]) {
				t.Errorf("SLUICE_HTTP_ADDR = %q", env["SLUICE_HTTP_ADDR"])
			}
			var portNames []string
			for _, p := range c.Ports {
				if p.ContainerPort == wantPort[name] {
					portNames = append(portNames, p.Name)
				}
			}
			if len(portNames) == 0 {
				t.Errorf("no containerPort %d", wantPort[name])
			}
			if name == "sluice-ingress" {
				// The envoy rate limit service: a named container port and a Service port
				// that a mesh recognises as gRPC.
				if env["SLUICE_GRPC_ADDR"] != ":8081" || !slices.ContainsFunc(c.Ports, func(p k8sPort) bool { return p.Name == "grpc" && p.ContainerPort == 8081 }) {
					t.Errorf("gRPC not exposed: SLUICE_GRPC_ADDR %q, ports %+v", env["SLUICE_GRPC_ADDR"], c.Ports)
				}
				exposed := false
				for _, o := range byKind["Service"] {
					if matches(o.Spec.ServiceSelector, labels) {
						for _, p := range o.Spec.Ports {
							exposed = exposed || (p.Name == "grpc" && p.TargetPort == "grpc" && p.AppProtocol == "grpc")
						}
					}
				}
				if !exposed {
					t.Error("no Service port grpc (targetPort grpc, appProtocol grpc) for the envoy rate limit service")
				}
			}
			okPort := func(p any) bool {
				s := fmt.Sprint(p)
				return slices.Contains(portNames, s) || s == fmt.Sprint(wantPort[name])
			}
			if c.ReadinessProbe == nil || c.ReadinessProbe.HTTPGet.Path != "/readyz" || !okPort(c.ReadinessProbe.HTTPGet.Port) {
				t.Errorf("readinessProbe = %+v, want httpGet /readyz on the HTTP port", c.ReadinessProbe)
			}
			if c.LivenessProbe == nil || c.LivenessProbe.HTTPGet.Path != "/healthz" || !okPort(c.LivenessProbe.HTTPGet.Port) {
				t.Errorf("livenessProbe = %+v, want httpGet /healthz on the HTTP port", c.LivenessProbe)
			}
			for _, r := range []string{"cpu", "memory"} {
				if c.Resources.Requests[r] == "" || c.Resources.Limits[r] == "" {
					t.Errorf("resources: %s needs a request and a limit: %+v", r, c.Resources)
				}
			}
			// The grace period covers the preStop sleep and the whole shutdown timeout.
			shutdown, err := time.ParseDuration(env["SLUICE_SHUTDOWN_TIMEOUT"])
			if err != nil {
				t.Fatalf("SLUICE_SHUTDOWN_TIMEOUT: %v", err)
			}
			need := shutdown + time.Duration(c.Lifecycle.PreStop.Sleep.Seconds)*time.Second
			grace := time.Duration(-1)
			if pod.TerminationGracePeriodSeconds != nil {
				grace = time.Duration(*pod.TerminationGracePeriodSeconds) * time.Second
			}
			if grace <= need {
				t.Errorf("terminationGracePeriodSeconds = %s, want more than preStop + shutdown timeout = %s", grace, need)
			}
			if !slices.ContainsFunc(pod.Volumes, func(v podVolume) bool { return v.ConfigMap.Name == "sluice-rules" }) {
				t.Error("rules ConfigMap sluice-rules is not mounted")
			}

			var pdb, svc bool
			for _, o := range byKind["PodDisruptionBudget"] {
				if matches(o.Spec.Selector.MatchLabels, labels) {
					pdb = true
					if o.Spec.MinAvailable == nil && o.Spec.MaxUnavailable == nil {
						t.Errorf("PDB %s sets neither minAvailable nor maxUnavailable", o.Metadata.Name)
					}
				}
			}
			for _, o := range byKind["Service"] {
				svc = svc || matches(o.Spec.ServiceSelector, labels)
			}
			if !pdb {
				t.Error("no PodDisruptionBudget selects its pods")
			}
			if !svc {
				t.Error("no Service selects its pods")
			}
		})
	}

	// The rules ConfigMap carries the example rules, byte for byte.
	var cm *k8sObject
	for i, o := range byKind["ConfigMap"] {
		if o.Metadata.Name == "sluice-rules" {
			cm = &byKind["ConfigMap"][i]
		}
	}
	if cm == nil {
		t.Fatal("no ConfigMap sluice-rules")
	}
	examples, err := filepath.Glob("examples/*.y*ml")
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range examples {
		want, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := cm.Data[filepath.Base(f)]; !ok || got != string(want) {
			t.Errorf("ConfigMap sluice-rules: %s differs from deploy/%s; copy the file into k8s/configmap-rules.yaml", filepath.Base(f), f)
		}
	}
	for name := range cm.Data {
		if _, err := os.Stat(filepath.Join("examples", name)); err != nil {
			t.Errorf("ConfigMap sluice-rules: %s is not in deploy/examples", name)
		}
	}

	// kustomization.yaml lists every manifest.
	var kz struct {
		Resources []string `yaml:"resources"`
	}
	decodeFile(t, "k8s/kustomization.yaml", &kz)
	files, _ := filepath.Glob("k8s/*.yaml")
	for _, f := range files {
		if b := filepath.Base(f); b != "kustomization.yaml" && !slices.Contains(kz.Resources, b) {
			t.Errorf("k8s/kustomization.yaml does not list %s", b)
		}
	}
}
