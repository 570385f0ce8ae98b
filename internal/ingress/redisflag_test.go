package ingress_test

import (
	"io"
	"strings"
	"testing"

	"github.com/sluice-io/sluice/internal/process/ingress"
)

// -redis takes every form app.ParseRedisURL does, from the flag or SLUICE_REDIS_URL, and
// a bad one fails at start naming the flag.
func TestRedisFlag(t *testing.T) {
	t.Parallel()
	for _, u := range []string{
		"redis://127.0.0.1:6379", "rediss://db:6380/1", "unix:///run/redis.sock",
		"redis://10.0.0.1:7000?addr=10.0.0.2:7000&addr=10.0.0.3:7000",
		"redis+sentinel://10.0.0.1:26379?master_name=sluice&addr=10.0.0.2:26379",
	} {
		c, err := ingress.ParseFlags([]string{"-rules", "x", "-redis", u}, func(string) string { return "" }, io.Discard)
		if err != nil || c.RedisURL != u {
			t.Errorf("-redis %s: %q, %v", u, c.RedisURL, err)
		}
		c, err = ingress.ParseFlags([]string{"-rules", "x"}, func(k string) string {
			return map[string]string{"SLUICE_REDIS_URL": u}[k]
		}, io.Discard)
		if err != nil || c.RedisURL != u {
			t.Errorf("SLUICE_REDIS_URL=%s: %q, %v", u, c.RedisURL, err)
		}
	}
	_, err := ingress.ParseFlags([]string{"-rules", "x", "-redis", "redis+sentinel://10.0.0.1:26379"}, func(string) string { return "" }, io.Discard)
	if err == nil || !strings.HasPrefix(err.Error(), "-redis ") || !strings.Contains(err.Error(), "master_name") {
		t.Errorf("Sentinel URL without master_name: %v", err)
	}
}
