package ingress

import "github.com/sluice-io/sluice/internal/httpx"

// Limits of the HTTP listener (README "Hostile input"): what a slow or hostile client can
// hold of a connection. The drainer's listener has the same (httpx).
const (
	DefaultReadHeaderTimeout = httpx.ReadHeaderTimeout // -read-header-timeout
	ReadTimeout              = httpx.ReadTimeout
	WriteTimeout             = httpx.WriteTimeout
	IdleTimeout              = httpx.IdleTimeout
	MaxHeaderBytes           = httpx.MaxHeaderBytes // more is 431; also bounds the gRPC listener's header list
)
