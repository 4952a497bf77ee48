package client

import "testing"

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
		for _, general := range []bool{false} {
			var w wireReceipt
			parse := w.parse
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
