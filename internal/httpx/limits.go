package httpx

import "time"

// Limits of sluice's HTTP listeners (the ingress's and the drainer's; docs/security.md,
// "Hostile input"): what a slow or hostile client can hold of a connection.
const (
	ReadHeaderTimeout = 5 * time.Second   // headers of a request, from its first byte or the end of the previous one (the ingress's -read-header-timeout)
	ReadTimeout       = 30 * time.Second  // a whole request, body included
	WriteTimeout      = 30 * time.Second  // an answer
	IdleTimeout       = 120 * time.Second // a keep-alive connection between requests
	MaxHeaderBytes    = 64 << 10          // request line and headers; more is 431
)
