package pulsar

import (
	"fmt"
	"slices"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
)

// Properties are encoded as repeated KeyValue in key order, whatever the map's order,
// with few (on the stack) or many of them.
func TestPropertiesAreEncodedInKeyOrder(t *testing.T) {
	for _, n := range []int{0, 1, 3, 8, 9, 40} {
		props := map[string]string{}
		for i := range n {
			props[fmt.Sprintf("k%03d", (i*7919)%1000)] = fmt.Sprintf("v%d", i)
		}
		b := appendProperties(nil, 1, props)
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
