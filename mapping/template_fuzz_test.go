package mapping

import (
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"testing"
)

// FuzzTemplate: whatever the template text, the record and the header, compiling and
// rendering neither panics nor loses a literal: a template without placeholders renders
// to itself, and a rendered value is its parts in order.
func FuzzTemplate(f *testing.F) {
	for _, s := range []string{"events-{json:tenant}", "{header:X-Tenant}/{path:id}/{route}", "plain", "{json:a.b.#(c==1).d}", "{", "}", "{}", "{json:}", "a{path:nope}b"} {
		f.Add(s, []byte(`{"tenant":"acme","a":{"b":[{"c":1,"d":"x"}]}}`), "t1")
	}
	f.Fuzz(func(t *testing.T, src string, record []byte, headerValue string) {
		tpl, err := parseTemplate(src, scope{params: []string{"id"}})
		if err != nil {
			return
		}
		req := &Request{Header: http.Header{"X-Tenant": {headerValue}}, Params: map[string]string{"id": "p7"}, route: "r"}
		in := &input{req: req, data: record, json: json.Valid(record)}
		out, err := tpl.render(in, nil)
		if text, ok := tpl.static(); ok {
			if err != nil || out != text || text != src {
				t.Fatalf("static template %q rendered %q (%v), static text %q", src, out, err, text)
			}
			return
		}
		if err != nil {
			var missing *missingError
			if !errors.As(err, &missing) {
				t.Fatalf("%q: an error that is not a missing value: %v", src, err)
			}
			return
		}
		// The literal parts appear in order in the output.
		rest := out
		for _, p := range tpl.parts {
			if p.kind != literal {
				continue
			}
			i := strings.Index(rest, p.text)
			if i < 0 {
				t.Fatalf("%q rendered %q without its literal %q", src, out, p.text)
			}
			rest = rest[i+len(p.text):]
		}
	})
}
