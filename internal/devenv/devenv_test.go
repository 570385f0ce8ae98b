package devenv_test

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/redis/go-redis/v9"
	"github.com/sluice-io/sluice/internal/devenv"
)

func TestDevEnvironment(t *testing.T) {
	n, err := devenv.StartNATS(t.TempDir(), "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	nc, err := nats.Connect(n.URL())
	if err != nil {
		t.Fatal(err)
	}
	nc.Close()

	r, err := devenv.StartRedis()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	opts, err := redis.ParseURL(r.URL())
	if err != nil {
		t.Fatal(err)
	}
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	ctx := context.Background()
	// The scripts sluice runs use ZADD/ZRANGE and cjson; make sure Lua works here.
	got, err := rdb.Eval(ctx, "redis.call('ZADD', KEYS[1], 1, 'a'); return redis.call('ZCARD', KEYS[1])", []string{"sl:{x}:due"}).Int()
	if err != nil || got != 1 {
		t.Fatalf("lua: %v %v", got, err)
	}

	s, err := devenv.StartSink("127.0.0.1:0", slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close(ctx)
	resp, err := http.Post(s.URL()+"/sink/orders", "application/json", strings.NewReader(`{"a":1}`))
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("%v %v", resp, err)
	}
	resp.Body.Close()
	if s.Count() != 1 {
		t.Fatal("delivery not counted")
	}
}
