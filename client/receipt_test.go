package client

import (
	"strconv"
	"strings"
	"testing"
)

// A receipt's topic is shared with the previous receipt's only when the two are the same
// string: a topic whose JSON has escapes, or a value that is not a string, is decoded.
func TestReceiptTopicIsDecodedNotTakenFromThePreviousReceipt(t *testing.T) {
	for _, tc := range []struct {
		name       string
		prev, next string
		want       string
	}{
		{"null after a topic its bytes match", `{"seq":0,"topic":"ul"}`, `{"seq":1,"topic":null}`, ""},
		{"an escape reading as the previous topic's bytes", `{"seq":0,"topic":"a\\b"}`, `{"seq":1,"topic":"a\b"}`, "a\b"},
		{"the same topic", `{"seq":0,"topic":"persistent://public/default/t"}`, `{"seq":1,"topic":"persistent://public/default/t"}`, "persistent://public/default/t"},
		{"another topic", `{"seq":0,"topic":"t1"}`, `{"seq":1,"topic":"t2"}`, "t2"},
	} {
		for _, general := range []bool{false, true} {
			var w wireReceipt
			parse := w.parse
			if general {
				parse = w.parseGeneral
			}
			if err := parse([]byte(tc.prev)); err != nil {
				t.Fatalf("%s: parse(%s): %v", tc.name, tc.prev, err)
			}
			if err := parse([]byte(tc.next)); err != nil {
				t.Fatalf("%s: parse(%s): %v", tc.name, tc.next, err)
			}
			if w.topic != tc.want {
				t.Errorf("%s (general %v): topic %q after %s, want %q", tc.name, general, w.topic, tc.prev, tc.want)
			}
		}
	}
}

// The compact scanner, which reads the receipts as the bridge writes them, agrees with the
// general one on everything it accepts, and leaves the rest to it.
func TestCompactReceiptScanAgreesWithTheGeneralScanner(t *testing.T) {
	for _, tc := range []struct {
		in      string
		compact bool // read by the compact scanner
	}{
		{`{"seq":0,"status":200,"topic":"persistent://public/default/t","messageId":"7:12:-1:-1"}`, true},
		{`{"seq":3,"status":200,"topic":"t","messageId":"1:2:3:4","sequence":103,"duplicate":true}`, true},
		{`{"seq":3,"status":200,"duplicate":false,"sequence":0}`, true},
		{`{"seq":2,"seq":4,"topic":"a","topic":"b"}`, true},
		{`{"seq":007,"status":0200}`, true},
		{`{"seq":999999999999999999}`, true},
		{`{}`, true},
		{`{"seq":1}trailing`, true},
		{`{"seq":9999999999999999999}`, false},
		{`{"seq":99999999999999999999}`, false},
		{`{"seq":-1}`, false},
		{`{"seq":+1}`, false},
		{`{"seq":1.5}`, false},
		{`{"seq":}`, false},
		{`{"seq":1,}`, false},
		{`{"seq":1 }`, false},
		{`{ "seq":1}`, false},
		{`{"seq":"1"}`, false},
		{`{"status":200,"topic":"caf\u00e9"}`, false},
		{`{"status":200,"topic":"café"}`, false},
		{`{"status":200,"topic":"a\"b"}`, false},
		{`{"status":200,"topic":"a\\"}`, false},
		{`{"status":200,"topic":null}`, false},
		{`{"status":200,"topic":"t"`, false},
		{`{"status":200,"topic":"t`, false},
		{`{"duplicate":tru}`, false},
		{`{"duplicate":truex}`, false},
		{`{"duplicate":null}`, false},
		{`{"summary":true,"records":3,"status":200}`, false},
		{`{"status":413,"error":"too large"}`, false},
		{`{"sequences":1}`, false},
		{`{"seq`, false},
		{`{`, false},
		{`[]`, false},
		{``, false},
	} {
		var c, g wireReceipt
		c.seq = -1
		accepted := c.parseCompact([]byte(tc.in))
		if accepted != tc.compact {
			t.Errorf("parseCompact(%s) = %v, want %v", tc.in, accepted, tc.compact)
			continue
		}
		gerr := g.parseGeneral([]byte(tc.in))
		if !accepted {
			var w wireReceipt
			if err := w.parse([]byte(tc.in)); (err == nil) != (gerr == nil) || w != g {
				t.Errorf("parse(%s) = %+v, %v; the general scanner %+v, %v", tc.in, w, err, g, gerr)
			}
			continue
		}
		if gerr != nil {
			t.Errorf("parseCompact accepts %s, the general scanner refuses it: %v", tc.in, gerr)
			continue
		}
		if c != g {
			t.Errorf("parseCompact(%s) = %+v, the general scanner %+v", tc.in, c, g)
		}
	}
}

// A receipt of the bridge's compact form allocates its message id only: the topic, the
// same as the previous receipt's, is shared.
func TestCompactReceiptAllocatesOnlyTheMessageID(t *testing.T) {
	in := []byte(`{"seq":12,"status":200,"topic":"persistent://public/default/` + strings.Repeat("t", 40) +
		`","messageId":"7:12:-1:-1","sequence":112}`)
	var w wireReceipt
	if err := w.parse(in); err != nil {
		t.Fatal(err)
	}
	if n := testing.AllocsPerRun(100, func() { _ = w.parse(in) }); n > 1 {
		t.Errorf("%v allocations per receipt, want 1 (the message id)", n)
	}
}

// With an arena, message ids share their allocations, and each id stays what its receipt
// said however many come after it.
func TestReceiptMessageIDsFromTheArenaStayIntact(t *testing.T) {
	w := wireReceipt{ids: new(idArena)}
	receipt := func(i int) ([]byte, string) {
		id := strconv.Itoa(i) + ":" + strconv.Itoa(i*7) + ":-1:-1"
		if i%500 == 499 {
			id += strings.Repeat("x", 2*idArenaBlock) // longer than a block
		}
		return []byte(`{"seq":` + strconv.Itoa(i) + `,"status":200,"topic":"t","messageId":"` + id + `"}`), id
	}
	var got, want []string
	for i := range 3000 {
		in, id := receipt(i)
		if err := w.parse(in); err != nil {
			t.Fatal(err)
		}
		got, want = append(got, w.messageID), append(want, id)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("message id %d reads %q after more receipts, want %q", i, got[i], want[i])
		}
	}
	in, _ := receipt(12)
	if n := testing.AllocsPerRun(1000, func() { _ = w.parse(in) }); n > 0.2 {
		t.Errorf("%v allocations per receipt, want a fraction of one", n)
	}
}
