package deploy_test

import (
	"os"
	"os/exec"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/internal/process"
)

// The Sentinel variant (docker-compose.sentinel.yml on top of docker-compose.yml): a
// replica of `redis`, three sentinels watching it, and every sluice process of the base
// file pointed at the sentinels with a URL sluice parses as Sentinel.
func TestComposeSentinel(t *testing.T) {
	t.Parallel()
	base := loadCompose(t)
	var over struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Command     []string          `yaml:"command"`
			Entrypoint  []string          `yaml:"entrypoint"`
			Environment map[string]string `yaml:"environment"`
			Volumes     []string          `yaml:"volumes"`
			DependsOn   map[string]any    `yaml:"depends_on"`
		} `yaml:"services"`
		Volumes map[string]any `yaml:"volumes"`
	}
	decodeFile(t, "docker-compose.sentinel.yml", &over)

	var sentinels []string
	for name, s := range over.Services {
		if !strings.HasPrefix(name, "sentinel-") {
			continue
		}
		sentinels = append(sentinels, name)
		if !strings.HasPrefix(s.Image, "redis:7") || !strings.Contains(strings.Join(s.Entrypoint, " "), "--sentinel") ||
			!slices.Contains(s.Volumes, "./redis/sentinel.conf:/etc/redis/sentinel.conf:ro") {
			t.Errorf("%s: not a redis:7 sentinel running redis/sentinel.conf: %+v", name, s)
		}
	}
	sort.Strings(sentinels)
	if len(sentinels) != 3 {
		t.Fatalf("want 3 sentinels, got %v", sentinels)
	}

	conf, err := os.ReadFile("redis/sentinel.conf")
	if err != nil {
		t.Fatal(err)
	}
	master := ""
	for _, line := range strings.Split(string(conf), "\n") {
		if f := strings.Fields(line); len(f) == 6 && f[0] == "sentinel" && f[1] == "monitor" {
			master = f[2]
			if f[3] != "redis" || f[4] != "6379" || f[5] != "2" {
				t.Errorf("sentinel.conf monitors %s:%s with quorum %s, want the redis service on 6379 with quorum 2", f[3], f[4], f[5])
			}
		}
	}
	if master == "" {
		t.Fatal("sentinel.conf monitors nothing")
	}
	if _, ok := base.Services["redis"]; !ok {
		t.Fatal("the base file has no redis service to monitor")
	}
	r := over.Services["redis-replica"]
	if !strings.Contains(strings.Join(r.Command, " "), "--replicaof redis 6379") {
		t.Errorf("redis-replica does not replicate the redis service: %v", r.Command)
	}
	for _, v := range r.Volumes {
		if vol, _, _ := strings.Cut(v, ":"); !strings.HasPrefix(vol, ".") {
			if _, ok := over.Volumes[vol]; !ok {
				t.Errorf("redis-replica: volume %q is not declared", vol)
			}
		}
	}

	// Every sluice process of the base file uses the sentinels.
	procs := append(servicesWithPrefix(base, "ingress-"), servicesWithPrefix(base, "drainer-")...)
	for _, name := range procs {
		s, ok := over.Services[name]
		if !ok {
			t.Errorf("%s keeps the base file's Redis URL", name)
			continue
		}
		u := s.Environment["SLUICE_REDIS_URL"]
		rc, err := process.ParseRedisURL(u, 0)
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		if rc.Kind != process.RedisSentinel || rc.Failover.MasterName != master {
			t.Errorf("%s: SLUICE_REDIS_URL %s is %s of master %q, want Sentinel of %q", name, u, rc.Kind, rc.Failover.MasterName, master)
			continue
		}
		var want []string
		for _, sn := range sentinels {
			want = append(want, sn+":26379")
		}
		got := slices.Clone(rc.Failover.SentinelAddrs)
		sort.Strings(got)
		if !slices.Equal(got, want) {
			t.Errorf("%s: sentinels %v, want %v", name, got, want)
		}
		for _, sn := range sentinels {
			if _, ok := s.DependsOn[sn]; !ok {
				t.Errorf("%s does not wait for %s", name, sn)
			}
		}
	}

	// With a compose client, the two files must also merge under the compose schema.
	var cmd []string
	if exec.Command("docker", "compose", "version").Run() == nil {
		cmd = []string{"docker", "compose"}
	} else if exec.Command("docker-compose", "version").Run() == nil {
		cmd = []string{"docker-compose"}
	} else {
		t.Log("no docker compose client: the merged files are not checked against the compose schema")
		return
	}
	out, err := exec.Command(cmd[0], append(cmd[1:], "-f", "docker-compose.yml", "-f", "docker-compose.sentinel.yml", "config", "--quiet")...).CombinedOutput()
	if err != nil {
		t.Fatalf("%s config: %v\n%s", strings.Join(cmd, " "), err, out)
	}
}
