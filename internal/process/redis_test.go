package process_test

import (
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/sluice-io/sluice/internal/process"
)

func TestParseRedisURL(t *testing.T) {
	t.Parallel()
	cases := []struct {
		url  string
		kind process.RedisKind
		// addrs: the server (single), seed nodes (cluster) or sentinels
		addrs  []string
		check  func(t *testing.T, c *process.RedisConfig)
		client string // type of NewClient's result
	}{
		{url: "redis://127.0.0.1:6379", kind: process.RedisSingle, addrs: []string{"127.0.0.1:6379"}, client: "*redis.Client",
			check: func(t *testing.T, c *process.RedisConfig) {
				o := c.Single
				if o.DialTimeout != 500*time.Millisecond || o.ReadTimeout != 500*time.Millisecond || o.MaxRetries != 1 ||
					o.DialerRetries != 1 || o.PoolSize != 256 || o.MinIdleConns != 8 || !o.ContextTimeoutEnabled || o.TLSConfig != nil {
					t.Errorf("defaults not applied: %+v", o)
				}
			}},
		{url: "redis://:secret@db.example:6380/3?dial_timeout=2s&pool_size=1000", kind: process.RedisSingle, addrs: []string{"db.example:6380"}, client: "*redis.Client",
			check: func(t *testing.T, c *process.RedisConfig) {
				o := c.Single
				if o.Password != "secret" || o.DB != 3 || o.DialTimeout != 2*time.Second || o.ReadTimeout != 500*time.Millisecond || o.PoolSize != 1000 {
					t.Errorf("URL options lost: %+v", o)
				}
			}},
		{url: "rediss://db.example:6380", kind: process.RedisSingle, addrs: []string{"db.example:6380"}, client: "*redis.Client",
			check: func(t *testing.T, c *process.RedisConfig) {
				if c.Single.TLSConfig == nil || c.Single.TLSConfig.ServerName != "db.example" {
					t.Errorf("rediss:// without TLS: %+v", c.Single.TLSConfig)
				}
			}},
		{url: "unix:///run/redis/redis.sock?db=2", kind: process.RedisSingle, addrs: []string{"/run/redis/redis.sock"}, client: "*redis.Client",
			check: func(t *testing.T, c *process.RedisConfig) {
				if c.Single.Network != "unix" || c.Single.DB != 2 {
					t.Errorf("unix: %+v", c.Single)
				}
			}},
		{url: "redis://10.0.0.1:7000?addr=10.0.0.2:7000&addr=10.0.0.3:7000", kind: process.RedisCluster,
			addrs: []string{"10.0.0.1:7000", "10.0.0.2:7000", "10.0.0.3:7000"}, client: "*redis.ClusterClient",
			check: func(t *testing.T, c *process.RedisConfig) {
				o := c.Cluster
				if o.ReadTimeout != 500*time.Millisecond || o.MaxRetries != 1 || o.PoolSize != 256 || !o.ContextTimeoutEnabled || o.ClusterStateReloadInterval != time.Second || o.MinRetryBackoff != -1 {
					t.Errorf("defaults not applied: %+v", o)
				}
			}},
		{url: "rediss+cluster://user:pw@10.0.0.1:7000?read_timeout=1s", kind: process.RedisCluster, addrs: []string{"10.0.0.1:7000"}, client: "*redis.ClusterClient",
			check: func(t *testing.T, c *process.RedisConfig) {
				o := c.Cluster
				if o.Username != "user" || o.Password != "pw" || o.TLSConfig == nil || o.ReadTimeout != time.Second {
					t.Errorf("cluster options: %+v", o)
				}
			}},
		{url: "redis+sentinel://10.0.0.1:26379?master_name=sluice&addr=10.0.0.2:26379&addr=10.0.0.3:26379&password=mpw",
			kind: process.RedisSentinel, addrs: []string{"10.0.0.1:26379", "10.0.0.2:26379", "10.0.0.3:26379"}, client: "*redis.Client",
			check: func(t *testing.T, c *process.RedisConfig) {
				o := c.Failover
				if o.MasterName != "sluice" || o.Password != "mpw" || o.ReadTimeout != 500*time.Millisecond || o.MaxRetries != 1 || !o.ContextTimeoutEnabled {
					t.Errorf("failover options: %+v", o)
				}
			}},
		{url: "redis://10.0.0.1:26379?master_name=sluice", kind: process.RedisSentinel, addrs: []string{"10.0.0.1:26379"}, client: "*redis.Client"},
	}
	for _, c := range cases {
		t.Run(c.url, func(t *testing.T) {
			rc, err := process.ParseRedisURL(c.url, 0)
			if err != nil {
				t.Fatal(err)
			}
			if rc.Kind != c.kind {
				t.Fatalf("kind %s, want %s", rc.Kind, c.kind)
			}
			var addrs []string
			switch rc.Kind {
			case process.RedisSingle:
				addrs = []string{rc.Single.Addr}
			case process.RedisCluster:
				addrs = rc.Cluster.Addrs
			case process.RedisSentinel:
				addrs = rc.Failover.SentinelAddrs
			}
			if !reflect.DeepEqual(addrs, c.addrs) {
				t.Errorf("addresses %q, want %q", addrs, c.addrs)
			}
			if c.check != nil {
				c.check(t, rc)
			}
			cl := rc.NewClient()
			defer cl.Close()
			if got := reflect.TypeOf(cl).String(); got != c.client {
				t.Errorf("client %s, want %s", got, c.client)
			}
		})
	}
}

func TestParseRedisURLErrors(t *testing.T) {
	t.Parallel()
	cases := []struct{ url, want string }{
		{"", "empty URL"},
		{"127.0.0.1:6379", "first path segment in URL cannot contain colon"},
		{"localhost:6379", "invalid URL scheme: localhost"},
		{"http://127.0.0.1:6379", "invalid URL scheme: http"},
		{"redis+ring://127.0.0.1:6379", `unknown scheme "redis+ring"`},
		{"unix+cluster:///tmp/r.sock", `unknown scheme "unix+cluster"`},
		{"redis://127.0.0.1:6379?dial_timout=1s", "unexpected option: dial_timout"},
		{"redis://127.0.0.1:6379?read_timeout=soon", "read_timeout"},
		{"redis://127.0.0.1:6379/x", "invalid database number"},
		{"redis+sentinel://127.0.0.1:26379", "without master_name"},
		{"redis+sentinel://127.0.0.1:26379?master_name=m&addr=nohost", "unable to parse addr param: nohost"},
		{"redis+cluster:///", "no host"},
		{"redis://127.0.0.1:7000/2?addr=127.0.0.1:7001", "only database 0"},
		{"redis://:hunter2@127.0.0.1:7000?bogus=1", "unexpected option: bogus"},
		{"redis+sentinel://127.0.0.1:26379?master_name=m&password=hunter2&bogus=1", "unexpected option: bogus"},
		{"redis://[::1", "missing ']'"},
	}
	for _, c := range cases {
		t.Run(c.url, func(t *testing.T) {
			_, err := process.ParseRedisURL(c.url, 0)
			if err == nil {
				t.Fatal("accepted")
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, "-redis ") || !strings.Contains(msg, c.want) {
				t.Errorf("error %q: want it to start with -redis and contain %q", msg, c.want)
			}
			if strings.Contains(msg, "hunter2") {
				t.Errorf("error repeats the password: %q", msg)
			}
		})
	}
}

// The client type is what the rest of sluice takes: every kind is a UniversalClient.
var _ = []redis.UniversalClient{(*redis.Client)(nil), (*redis.ClusterClient)(nil)}
