package egress

import (
	"net/http"
	"testing"

	"github.com/recordio-bridge/bridge/recordio"
)

// A stream is all egress serves, so what curl sends by default (*/*), no Accept at all,
// and application/* each accept it; a range that rules RecordIO out is still 406.
func TestEgressStreamAcceptsWildcardsAndAMissingAccept(t *testing.T) {
	f := &fakeSub{feed: make(chan *Delivery, 10)}
	url := serveStreams(t, f, "streams:\n  - name: s\n    topics: [t]\n")
	for _, tc := range []struct {
		accept string
		status int
	}{
		{"*/*", http.StatusOK},
		{"", http.StatusOK},
		{"application/*", http.StatusOK},
		{"text/html, */*;q=0.8", http.StatusOK},
		{"application/json", http.StatusNotAcceptable},
		{"application/recordio;q=0, */*", http.StatusNotAcceptable},
	} {
		req, _ := http.NewRequest(http.MethodGet, url+"/v1/streams/s", nil)
		if tc.accept != "" {
			req.Header.Set("Accept", tc.accept)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		ct := resp.Header.Get("Content-Type")
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Fatalf("Accept %q: status %d, want %d", tc.accept, resp.StatusCode, tc.status)
		}
		if tc.status == http.StatusOK && ct != recordio.MediaRecordIO {
			t.Fatalf("Accept %q: Content-Type %q, want %q", tc.accept, ct, recordio.MediaRecordIO)
		}
	}
}
