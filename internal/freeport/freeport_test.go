package freeport

import (
	"net"
	"strconv"
	"testing"
)

func TestLoopbackIsBelowTheEphemeralRangeAndFree(t *testing.T) {
	top := ephemeralStart()
	for range 20 {
		port, err := Loopback()
		if err != nil {
			t.Fatal(err)
		}
		if top-lowest >= 1000 && (port < lowest || port >= top) {
			t.Fatalf("port %d outside [%d, %d)", port, lowest, top)
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			t.Fatalf("port %d is not free: %v", port, err)
		}
		l.Close()
	}
}
