package integration_test

import (
	"net"
	"sync"
	"testing"
)

// tcpProxy forwards TCP connections to a target and can stop forwarding without closing
// anything: a process behind it is cut off from the target but alive, its connections
// open and silent, as behind a network partition (no RST, no FIN). Resume closes every
// connection that existed before it, dropping whatever was held (a partition that heals
// kills the connections that timed out across it), and forwards new ones again.
type tcpProxy struct {
	ln     net.Listener
	target string

	mu    sync.Mutex
	cond  *sync.Cond
	cut   bool
	gen   int // raised by Cut and Resume: a connection of an older generation is closed when it next moves bytes
	conns map[net.Conn]struct{}
}

func startProxy(t testing.TB, target string) *tcpProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	p.cond = sync.NewCond(&p.mu)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

func (p *tcpProxy) Addr() string { return p.ln.Addr().String() }

// Cut stops forwarding: bytes read from either side are held, nothing is closed.
func (p *tcpProxy) Cut() {
	p.mu.Lock()
	p.cut, p.gen = true, p.gen+1
	p.mu.Unlock()
}

// Resume forwards new connections again and closes the ones that were open across the cut.
func (p *tcpProxy) Resume() {
	p.mu.Lock()
	p.cut, p.gen = false, p.gen+1
	for c := range p.conns {
		c.Close()
	}
	p.cond.Broadcast()
	p.mu.Unlock()
}

func (p *tcpProxy) close() {
	p.ln.Close()
	p.Resume()
}

func (p *tcpProxy) accept() {
	for {
		in, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.mu.Lock()
		gen := p.gen
		// A connection made while cut is held too (its dial succeeds, nothing answers).
		p.conns[in] = struct{}{}
		p.mu.Unlock()
		go func() {
			out, err := net.Dial("tcp", p.target)
			if err != nil {
				in.Close()
				return
			}
			p.mu.Lock()
			p.conns[out] = struct{}{}
			p.mu.Unlock()
			go p.pipe(in, out, gen)
			p.pipe(out, in, gen)
		}()
	}
}

// pipe copies src to dst while the proxy forwards; bytes read while cut are held until
// Resume, which closes both ends instead of delivering them late.
func (p *tcpProxy) pipe(src, dst net.Conn, gen int) {
	defer func() {
		src.Close()
		dst.Close()
		p.mu.Lock()
		delete(p.conns, src)
		delete(p.conns, dst)
		p.mu.Unlock()
	}()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			p.mu.Lock()
			for p.cut {
				p.cond.Wait()
			}
			stale := p.gen != gen // it lived across a cut
			p.mu.Unlock()
			if stale {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}
