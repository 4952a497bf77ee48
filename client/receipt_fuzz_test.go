package client

import (
	"bytes"
	"encoding/json"
	"strconv"
	"testing"
)

// FuzzReceiptParseAgreesWithEncodingJSON holds the hand-written receipt scanner to
// encoding/json: on a JSON object whose fields have the receipt's types, it decodes the
// same values (the last of a repeated key, as encoding/json keeps), and it never panics.
func FuzzReceiptParseAgreesWithEncodingJSON(f *testing.F) {
	for _, s := range []string{
		`{"seq":0,"status":200,"topic":"persistent://public/default/t","messageId":"1:2:-1:-1","sequence":7}`,
		`{"seq":3,"status":200,"topic":"t","sequence":103,"duplicate":true}`,
		`{"seq":1,"status":413,"error":"record of 5 bytes \"too\" large\n","sequence":8}`,
		`{"summary":true,"records":3,"published":2,"failed":1,"status":503,"error":"x","retryAfter":5,"duplicates":0,"resumeSequence":9}`,
		`{"status":409,"error":"busy"}`,
		` { "seq" : 1 , "extra" : {"a":[1,{"b":"}"}]} , "status":200 } `,
		`{"topic":"caf\u00e9","seq":2,"seq":4}`,
		`{}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var w wireReceipt
		err := w.parse(b)
		if !json.Valid(b) {
			return
		}
		var m map[string]json.RawMessage
		d := json.NewDecoder(bytes.NewReader(b))
		if d.Decode(&m) != nil {
			return // not an object
		}
		var want wireReceipt
		want.seq = -1
		ok := true
		str := func(k string, dst *string) {
			if raw, has := m[k]; has {
				if string(raw) == "null" {
					return
				}
				ok = ok && json.Unmarshal(raw, dst) == nil
			}
		}
		num := func(k string, set func(string) error) {
			if raw, has := m[k]; has {
				ok = ok && set(string(raw)) == nil
			}
		}
		str("topic", &want.topic)
		str("messageId", &want.messageID)
		str("error", &want.err)
		num("seq", func(s string) (e error) { want.seq, e = strconv.ParseInt(s, 10, 64); return })
		num("status", func(s string) (e error) { want.status, e = strconv.Atoi(s); return })
		num("retryAfter", func(s string) (e error) { want.retryAfter, e = strconv.Atoi(s); return })
		num("sequence", func(s string) (e error) {
			want.sequence, e = strconv.ParseUint(s, 10, 64)
			want.hasSequence = e == nil
			return
		})
		num("resumeSequence", func(s string) (e error) {
			want.resume, e = strconv.ParseInt(s, 10, 64)
			want.hasResume = e == nil
			return
		})
		want.summary = string(m["summary"]) == "true"
		want.duplicate = string(m["duplicate"]) == "true"
		if !ok {
			return // a field of another type: the scanner may refuse it
		}
		if err != nil {
			t.Fatalf("parse(%q): %v; encoding/json reads it", b, err)
		}
		w.lastTopic, want.lastTopic = "", ""
		if w != want {
			t.Fatalf("parse(%q) = %+v, encoding/json %+v", b, w, want)
		}
	})
}
