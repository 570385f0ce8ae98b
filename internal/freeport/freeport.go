// Package freeport picks loopback TCP ports for servers that tests start: redis-server,
// nats-server, the processes of the integration suites.
//
// A port the kernel hands out for ":0" comes from the ephemeral range, the same range it
// takes the local port of every outgoing connection from. Between closing the probe and the
// server binding the port, any connection the tests open (thousands under make test) may
// take it, and the server then fails to listen — an embedded nats-server silently, waiting
// out its readiness timeout. Ports are therefore picked below the ephemeral range, where the
// kernel never assigns one on its own; only another picker can collide, and a random pick
// from twenty thousand ports makes that rare (callers that start a server retry anyway).
package freeport

import (
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"strings"
)

// lowest is the lowest port picked: above the ports well-known services and the dev stack
// use.
const lowest = 10000

// Loopback returns a port on 127.0.0.1 that was free a moment ago, below the kernel's
// ephemeral range when that range leaves room, else one the kernel picks.
func Loopback() (int, error) {
	if top := ephemeralStart(); top-lowest >= 1000 {
		for range 64 {
			port := lowest + rand.IntN(top-lowest)
			if l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port)); err == nil {
				l.Close()
				return port, nil
			}
		}
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("freeport: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ephemeralStart is the first port of the kernel's ephemeral range (Linux), or 0 when it
// cannot be read.
func ephemeralStart() int {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	n, err := strconv.Atoi(f[0])
	if err != nil {
		return 0
	}
	return n
}
