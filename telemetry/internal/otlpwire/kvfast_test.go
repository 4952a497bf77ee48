package otlpwire

import (
	"bytes"
	"math"
	"strings"
	"testing"

	"go.opentelemetry.io/otel/attribute"
)

// appendKeyValue's fast path for string, int64, bool and float64 values writes exactly
// the bytes of the general one: empty keys and values, invalid UTF-8 (replaced), lengths
// of one, two and three varint bytes (a KeyValue under 128 bytes takes a path of its
// own), negative and large ints.
func TestKeyValueFastPath(t *testing.T) {
	var kvs []attribute.KeyValue
	keys := []string{"", "k", "messaging.message.id", "bad\xffkey", strings.Repeat("k", 130)}
	for _, k := range keys {
		for _, v := range []string{"", "v", "123:456:-1:0", "\xc3\x28bad", "ok\xe2\x82", strings.Repeat("v", 127), strings.Repeat("v", 128),
			strings.Repeat("é", 100), strings.Repeat("v", 16384), strings.Repeat("\xff", 200)} {
			kvs = append(kvs, attribute.String(k, v))
		}
		for _, n := range []int64{0, 1, -1, 127, 128, 1 << 40, -1 << 62} {
			kvs = append(kvs, attribute.Int64(k, n))
		}
		for _, f := range []float64{0, -1.5, math.Inf(-1), math.NaN(), math.SmallestNonzeroFloat64} {
			kvs = append(kvs, attribute.Float64(k, f))
		}
		kvs = append(kvs, attribute.Bool(k, true), attribute.Bool(k, false))
	}
	for _, kv := range kvs {
		got := appendKeyValue([]byte{7}, fSpanAttributes, &kv)
		want := appendKeyValueGeneral([]byte{7}, fSpanAttributes, kv)
		if !bytes.Equal(got, want) {
			t.Fatalf("%q=%q: fast path %x, general %x", kv.Key, kv.Value.Emit(), got, want)
		}
	}
}
