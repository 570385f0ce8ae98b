package ingress_test

import (
	"bytes"
	"io"
	"net/http"
	"os"
	"testing"
)

// TestOpenAPIServed: GET /openapi.yaml answers the repository's api/openapi.yaml byte
// for byte, as application/yaml, without a token.
func TestOpenAPIServed(t *testing.T) {
	t.Parallel()
	base := startForRoutes(t)
	want, err := os.ReadFile("../../api/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.Get(base + "/openapi.yaml")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/yaml" || !bytes.Equal(got, want) {
		t.Errorf("%d %q, %d bytes (want 200 application/yaml, the %d bytes of api/openapi.yaml)",
			resp.StatusCode, resp.Header.Get("Content-Type"), len(got), len(want))
	}
}
