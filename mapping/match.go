package mapping

import (
	"fmt"
	"mime"
	"net/http"

	"github.com/tidwall/gjson"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/internal/schema"
)

// matcher is a compiled match: conditions that must all hold, each listing the values
// allowed. Route rules match records with it (media type, fields, request headers) and
// stream filters match stored messages (fields, key, properties): one grammar, one
// matcher.
type matcher struct {
	contentTypes []string
	json         []fieldMatch
	proto        []protoMatch
	headers      []headerMatch
	key          []string // a stream filter's: the message's key
	props        []fieldMatch
}

type protoMatch struct {
	path   *schema.Path
	values []string
}

type fieldMatch struct {
	path   string
	values []string
}

type headerMatch struct {
	name   string
	values []string
}

// compileMatch compiles m, reading proto paths against sc (nil: none); at places its
// problems in the document.
func compileMatch(m config.Match, sc *schema.Schema, at string, p *config.Problems) matcher {
	var cm matcher
	for _, ct := range m.ContentType {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil {
			p.Addf("%s.contentType: %q is not a media type", at, ct)
			continue
		}
		cm.contentTypes = append(cm.contentTypes, mt)
	}
	for _, path := range sortedKeys(m.JSON) {
		if path == "" || !gjsonPathOK(path) {
			p.Addf("%s.json: %q is not a JSON path", at, path)
		}
		cm.json = append(cm.json, fieldMatch{path: path, values: m.JSON[path]})
	}
	for _, path := range sortedKeys(m.Proto) {
		pp, err := sc.Path(path)
		if err != nil {
			p.Addf("%s.proto: %v", at, err)
			continue
		}
		for _, v := range m.Proto[path] {
			if err := pp.CheckValue(v); err != nil {
				p.Addf("%s.proto.%s: %v", at, path, err)
			}
		}
		cm.proto = append(cm.proto, protoMatch{path: pp, values: m.Proto[path]})
	}
	for _, h := range sortedKeys(m.Headers) {
		cm.headers = append(cm.headers, headerMatch{name: http.CanonicalHeaderKey(h), values: m.Headers[h]})
	}
	return cm
}

// matches reports whether every condition holds for in. A JSON condition holds only
// for a JSON record, a proto condition only for a protobuf one, and neither for a
// record streamed (not held whole).
func (m *matcher) matches(in *input) bool {
	if len(m.contentTypes) > 0 && !contains(m.contentTypes, in.contentType()) {
		return false
	}
	for _, f := range m.json {
		if !in.json || in.data == nil {
			return false
		}
		res := gjson.GetBytes(in.data, f.path)
		if !res.Exists() || !contains(f.values, res.String()) {
			return false
		}
	}
	for _, f := range m.proto {
		if !in.proto || in.data == nil {
			return false
		}
		v, ok := f.path.Value(in.data)
		if !ok || !contains(f.values, v) {
			return false
		}
	}
	for _, h := range m.headers {
		if in.req == nil || !contains(h.values, in.req.Header.Get(h.name)) {
			return false
		}
	}
	if len(m.key) > 0 && !contains(m.key, in.key) {
		return false
	}
	for _, f := range m.props {
		v, ok := in.props[f.path]
		if !ok || !contains(f.values, v) {
			return false
		}
	}
	return true
}

// Filter is a stream's compiled filter: a message is delivered when it matches one of
// the alternatives. It is immutable and safe for concurrent use.
type Filter struct {
	alts   []matcher
	schema *schema.Schema
	reads  bool // some alternative reads the payload
}

// Message is what a stream's filter sees of a stored message.
type Message struct {
	Key        string
	Properties map[string]string
	// Payload is the record, whole; nil when it is not at hand (then json and proto
	// conditions do not hold).
	Payload []byte
}

// ReadsPayload reports whether the filter looks into payloads (json or proto
// conditions), so a caller holding a message as a stream reads it whole first.
func (f *Filter) ReadsPayload() bool { return f != nil && f.reads }

// Keeps reports whether m is delivered: it matches at least one alternative. A nil
// Filter keeps every message. A payload that is valid JSON is matched by json
// conditions, any other by proto conditions (read as the filter's message type).
func (f *Filter) Keeps(m Message) bool {
	if f == nil {
		return true
	}
	in := input{data: m.Payload, key: m.Key, props: m.Properties}
	if f.reads && m.Payload != nil {
		in.json = gjson.ValidBytes(m.Payload)
		in.proto = !in.json && f.schema.Message() != nil
	}
	for i := range f.alts {
		if f.alts[i].matches(&in) {
			return true
		}
	}
	return false
}

func compileFilter(fc *config.Filter, at string, p *config.Problems) *Filter {
	if fc == nil {
		return nil
	}
	f := &Filter{}
	var err error
	if f.schema, err = schema.Compile(fc.Schema); err != nil {
		p.Addf("%s.schema: %v", at, err)
	}
	for i, m := range fc.Match {
		mat := fmt.Sprintf("%s.match[%d]", at, i)
		cm := compileMatch(m.Match, f.schema, mat, p)
		cm.key = m.Key
		for _, name := range sortedKeys(m.Properties) {
			cm.props = append(cm.props, fieldMatch{path: name, values: m.Properties[name]})
		}
		f.reads = f.reads || len(cm.json) > 0 || len(cm.proto) > 0
		f.alts = append(f.alts, cm)
	}
	return f
}
