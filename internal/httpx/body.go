package httpx

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
)

// Bodies reads request bodies of at most Max bytes into pooled buffers: the submission and
// check handlers read every body whole before decoding it. The zero value reads into
// fresh buffers up to 1 MiB.
type Bodies struct {
	Max  int64
	pool sync.Pool
}

// Read reads r's body; a body larger than Max is a 413. Give the returned buffer back with
// Release once the body is no longer used.
func (b *Bodies) Read(w http.ResponseWriter, r *http.Request) ([]byte, *[]byte, *Problem) {
	max := b.Max
	if max <= 0 {
		max = 1 << 20
	}
	if r.ContentLength > max {
		p := TooLarge("the body is larger than " + strconv.FormatInt(max, 10) + " bytes")
		return nil, nil, &p
	}
	bp, _ := b.pool.Get().(*[]byte)
	if bp == nil {
		s := make([]byte, 0, 4096)
		bp = &s
	}
	buf := (*bp)[:0]
	body := http.MaxBytesReader(w, r.Body, max)
	for {
		if len(buf) == cap(buf) {
			buf = append(buf, 0)[:len(buf)]
		}
		n, err := body.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		if err == io.EOF {
			break
		}
		if err != nil {
			*bp = buf
			b.pool.Put(bp)
			var mbe *http.MaxBytesError
			if errors.As(err, &mbe) {
				p := TooLarge("the body is larger than " + strconv.FormatInt(max, 10) + " bytes")
				return nil, nil, &p
			}
			p := BadRequest("", "could not read the body: "+err.Error())
			return nil, nil, &p
		}
	}
	*bp = buf
	return buf, bp, nil
}

// Release gives a buffer of Read back to the pool (a buffer grown past 1 MiB is dropped).
func (b *Bodies) Release(bp *[]byte) {
	if bp != nil && cap(*bp) <= 1<<20 {
		b.pool.Put(bp)
	}
}

// Bearer is the token of r's Authorization header: the scheme "Bearer" in any case (RFC
// 9110 11.1: auth schemes are case-insensitive), one or more spaces, the token.
func Bearer(r *http.Request) (string, bool) {
	scheme, got, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	got = strings.TrimLeft(got, " ")
	return got, ok && strings.EqualFold(scheme, "Bearer") && got != ""
}

// WriteUnauthorized answers 401 with the Bearer challenge; a token that was sent but is
// not known adds error="invalid_token" (RFC 6750 §3.1).
func WriteUnauthorized(w http.ResponseWriter, r *http.Request, detail string) {
	challenge := `Bearer realm="sluice"`
	if _, sent := Bearer(r); sent {
		challenge += `, error="invalid_token"`
	}
	w.Header().Set("WWW-Authenticate", challenge)
	WriteProblem(w, Unauthorized(detail))
}
