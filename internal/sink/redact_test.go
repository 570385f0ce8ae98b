package sink

import (
	"context"
	"net"
	"net/http"
	"strings"
	"testing"
)

// TestDeliveryErrorsNeverShowTheSinkURLsSecrets: the error of a failed delivery becomes the
// message's last_error (GET /v1/messages/{id}, dead letters, logs); the sink URL's user
// info and query string must not be in it, whatever way the delivery failed.
func TestDeliveryErrorsNeverShowTheSinkURLsSecrets(t *testing.T) {
	// A port nothing listens on: the transport's error quotes the URL.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	redirect, _ := recordingServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, "https://elsewhere.example/hook?sig=redirsecret", http.StatusFound)
	})
	h, err := NewHTTP(HTTPConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range []string{
		"http://hookuser:hookpassword@" + closed + "/hook?api_key=querysecret",
		"http://tokenuser@" + closed + "/hook?api_key=querysecret",
		"http://%zz:hookpassword@" + closed + "/hook?api_key=querysecret", // does not parse: dead at once
		redirect.URL + "/hook?api_key=querysecret",
	} {
		out := h.Deliver(context.Background(), testRule(u), testMessage())
		if out.Err == "" {
			t.Fatalf("%s: no error", u)
		}
		for _, secret := range []string{"hookpassword", "tokenuser", "querysecret", "redirsecret"} {
			if strings.Contains(out.Err, secret) {
				t.Errorf("delivery error shows %q: %s", secret, out.Err)
			}
		}
		t.Logf("%s", out.Err)
	}
}
