package pulsar

import (
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// Properties are encoded as repeated KeyValue in key order, whatever the map's order,
// with few (on the stack) or many of them.
func TestPropertiesAreEncodedInKeyOrder(t *testing.T) {
	for _, n := range []int{0, 1, 3, 8, 9, 40} {
		props := map[string]string{}
		for i := range n {
			props[fmt.Sprintf("k%03d", (i*7919)%1000)] = fmt.Sprintf("v%d", i)
		}
		b := appendProperties(nil, 1, props, Property{})
		var keys []string
		for len(b) > 0 {
			num, typ, l := protowire.ConsumeTag(b)
			if num != 1 || typ != protowire.BytesType {
				t.Fatalf("n=%d: field %d type %d", n, num, typ)
			}
			b = b[l:]
			kv, l := protowire.ConsumeBytes(b)
			if l < 0 {
				t.Fatalf("n=%d: bad KeyValue", n)
			}
			b = b[l:]
			var k, v string
			for len(kv) > 0 {
				f, _, l := protowire.ConsumeTag(kv)
				kv = kv[l:]
				s, l := protowire.ConsumeString(kv)
				kv = kv[l:]
				if f == 1 {
					k = s
				} else {
					v = s
				}
			}
			if props[k] != v {
				t.Fatalf("n=%d: %q=%q, want %q", n, k, v, props[k])
			}
			keys = append(keys, k)
		}
		if len(keys) != n || !slices.IsSorted(keys) {
			t.Fatalf("n=%d: keys %v not all there in order", n, keys)
		}
	}
}

// decodeProperties reads repeated KeyValue field 1 back, in the order written.
func decodeProperties(t *testing.T, b []byte) (keys, values []string) {
	t.Helper()
	for len(b) > 0 {
		num, typ, l := protowire.ConsumeTag(b)
		if num != 1 || typ != protowire.BytesType {
			t.Fatalf("field %d type %d", num, typ)
		}
		b = b[l:]
		kv, l := protowire.ConsumeBytes(b)
		if l < 0 {
			t.Fatal("bad KeyValue")
		}
		b = b[l:]
		var k, v string
		for len(kv) > 0 {
			f, _, l := protowire.ConsumeTag(kv)
			kv = kv[l:]
			s, l := protowire.ConsumeString(kv)
			if l < 0 {
				t.Fatal("bad KeyValue field")
			}
			kv = kv[l:]
			if f == 1 {
				k = s
			} else {
				v = s
			}
		}
		keys, values = append(keys, k), append(values, v)
	}
	return keys, values
}

// An Extra property is encoded among the map's in key order (first, between, last, or
// alone), replaces a pair of the map with its key, and the same by both encoders: the
// batch entry's and a single message's metadata.
func TestAnExtraPropertyIsEncodedInKeyOrderAndReplacesTheMapsPair(t *testing.T) {
	tp := []byte("00-0123456789abcdef0123456789abcdef-0123456789abcdef-01")
	for _, tc := range []struct {
		name  string
		props map[string]string
	}{
		{"alone", nil},
		{"first", map[string]string{"x": "1", "y": "2"}},
		{"between", map[string]string{"a": "1", "z": "2"}},
		{"last", map[string]string{"a": "1", "b": "2"}},
		{"replacing", map[string]string{"a": "1", "traceparent": "00-stale", "z": "2"}},
		{"many", func() map[string]string {
			m := map[string]string{"traceparent": "00-stale"}
			for i := range 12 {
				m[fmt.Sprintf("k%02d", i)] = fmt.Sprint(i)
			}
			return m
		}()},
	} {
		t.Run(tc.name, func(t *testing.T) {
			want := map[string]string{}
			for k, v := range tc.props {
				want[k] = v
			}
			want["traceparent"] = string(tp)
			m := &ProducerMessage{Properties: tc.props, Extra: Property{Key: "traceparent", Value: tp}}
			keys, values := decodeProperties(t, appendProperties(nil, 1, m.Properties, m.Extra))
			if len(keys) != len(want) || !slices.IsSorted(keys) {
				t.Fatalf("batch entry: keys %v, want the %d of %v in order", keys, len(want), want)
			}
			for i, k := range keys {
				if want[k] != values[i] {
					t.Fatalf("batch entry: %s=%q, want %q", k, values[i], want[k])
				}
			}
			md := &pb.MessageMetadata{}
			setMessageFields(md, m)
			if len(md.Properties) != len(keys) {
				t.Fatalf("metadata: %d properties, the batch entry %d", len(md.Properties), len(keys))
			}
			for i, kv := range md.Properties {
				if kv.GetKey() != keys[i] || kv.GetValue() != values[i] {
					t.Fatalf("metadata property %d: %s=%q, the batch entry's %s=%q", i, kv.GetKey(), kv.GetValue(), keys[i], values[i])
				}
			}
			tp[len(tp)-1] = '0' // the caller reuses its buffer: the metadata kept a copy
			if v := md.Properties[slices.Index(keys, "traceparent")].GetValue(); v != string(want["traceparent"]) {
				t.Fatalf("the metadata's traceparent changed with the caller's buffer: %q", v)
			}
			tp[len(tp)-1] = '1'
		})
	}
}
