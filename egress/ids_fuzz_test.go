package egress

import (
	"bytes"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"slices"
	"testing"

	"github.com/recordio-bridge/bridge/recordio"
)

// FuzzReadIDs: the message ids a client posts to acknowledge (RecordIO, one id per
// record, or a JSON array) are read without panicking, none longer than 256 bytes from
// RecordIO, and what readIDs returns reads back the same once encoded again.
func FuzzReadIDs(f *testing.F) {
	f.Add(true, recordio.AppendRecord(recordio.AppendRecord(nil, []byte("7:42:-1:-1")), []byte("7:43:0:3")))
	f.Add(false, []byte(`["7:42:-1:-1","7:43:0:3"]`))
	f.Add(true, []byte("99999999999999999999\n"))
	f.Add(false, []byte(`[1, "x"]`))
	f.Fuzz(func(t *testing.T, rio bool, body []byte) {
		ct := recordio.MediaJSON
		if rio {
			ct = recordio.MediaRecordIO
		}
		read := func(body []byte) ([]string, error) {
			req := httptest.NewRequest(http.MethodPost, "/s/ack", bytes.NewReader(body))
			req.Header.Set("Content-Type", ct)
			return readIDs(req)
		}
		ids, err := read(body)
		if err != nil {
			return
		}
		var again []byte
		if rio {
			for _, id := range ids {
				if len(id) > 256 {
					t.Fatalf("a %d-byte id from RecordIO", len(id))
				}
				again = recordio.AppendRecord(again, []byte(id))
			}
		} else {
			again, _ = json.Marshal(ids)
		}
		back, err := read(again)
		if err != nil || !slices.Equal(back, ids) && !(len(back) == 0 && len(ids) == 0) {
			t.Fatalf("ids %q encoded again read as %q, %v", ids, back, err)
		}
	})
}
