package egress

import (
	"bytes"
	"slices"
	"strings"
	"testing"
)

// TestAStreamFilterDeliversWhatItCannotRead: a filter whose conditions read payloads
// cannot read a message larger than a conversion reads (streamed as a Body) nor one
// delivered still encrypted. Such a message may well be one the filter keeps (here a
// large UPDATE, and an encrypted one), so it is delivered, never acknowledged unseen;
// the messages the filter can read are still filtered.
func TestAStreamFilterDeliversWhatItCannotRead(t *testing.T) {
	doc := strings.Replace(filterDoc, "    envelope: json\n", "", 1)
	f := &fakeSub{feed: make(chan *Delivery, 8)}
	obs := &countingObs{}
	_, url := filterServer(t, f, obs, doc)
	big := []byte(`{"type":"UPDATE","pad":"` + strings.Repeat("x", maxConvertBytes) + `"}`)
	secret := []byte("\x8a\x01not readable without the key")
	f.feed <- &Delivery{ID: "5:0:-1:-1", Body: bytes.NewReader(big), Size: int64(len(big))}
	f.feed <- &Delivery{ID: "5:1:-1:-1", Payload: secret, Encryption: &Encryption{}}
	f.feed <- &Delivery{ID: "5:2:-1:-1", Payload: []byte(`{"type":"OFFERS"}`)}
	f.feed <- &Delivery{ID: "5:3:-1:-1", Payload: []byte(`{"type":"UPDATE"}`)}
	resp, rd := get(t, url+"/v1/streams/s")
	defer resp.Body.Close()
	for i, want := range [][]byte{big, secret, []byte(`{"type":"UPDATE"}`)} {
		rec, err := rd.Next()
		if err != nil {
			t.Fatalf("record %d: %v", i, err)
		}
		if !bytes.Equal(rec, want) {
			t.Fatalf("record %d: %.60q (%d bytes), want %.60q (%d bytes): a message the filter could not read was left out", i, rec, len(rec), want, len(want))
		}
	}
	f.mu.Lock()
	acked := slices.Clone(f.acked)
	f.mu.Unlock()
	if !slices.Equal(acked, []string{"5:2:-1:-1"}) {
		t.Fatalf("acknowledged unseen %v, want only the OFFERS message 5:2:-1:-1", acked)
	}
}
