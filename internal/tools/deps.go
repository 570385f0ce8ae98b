//go:build tools

// Package tools pins modules the project uses before (or only in) code that needs them,
// so `go mod tidy` run by one part of the tree never drops another part's dependency.
package tools

import (
	_ "github.com/chromedp/chromedp"
	_ "github.com/envoyproxy/go-control-plane/envoy/service/ratelimit/v3"
	_ "github.com/go-redis/redis_rate/v10"
	_ "github.com/google/uuid"
	_ "github.com/nats-io/nats-server/v2/server"
	_ "github.com/nats-io/nats.go/jetstream"
	_ "github.com/prometheus/client_golang/prometheus"
	_ "github.com/redis/go-redis/v9"
	_ "golang.org/x/time/rate"
	_ "google.golang.org/grpc"
	_ "google.golang.org/grpc/health"
	_ "google.golang.org/grpc/reflection"
	_ "gopkg.in/yaml.v3"
)
