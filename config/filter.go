package config

import "fmt"

// Filter keeps the messages of a stream that match one of its alternatives; the others
// are acknowledged without being written. It belongs to the stream (its subscription),
// never to one client of it.
type Filter struct {
	// Match lists the alternatives: a message is delivered when it matches at least one.
	Match []FilterMatch `yaml:"match"`
	// Schema is the protobuf message type proto conditions read (protobuf_native), as a
	// route's schema.
	Schema *Schema `yaml:"schema"`
}

// FilterMatch is one alternative of a Filter: a route rule's match (json and proto
// fields) plus the message's key and properties. All its conditions must hold.
type FilterMatch struct {
	Match      `yaml:",inline"`
	Key        StringList            `yaml:"key"`        // the message's key
	Properties map[string]StringList `yaml:"properties"` // property name -> values
}

func validateFilter(f *Filter, at string, add func(string, ...any)) {
	if f == nil {
		return
	}
	if len(f.Match) == 0 {
		add("%s.match: missing; list at least one alternative (a message matching none is acknowledged without being written)", at)
	}
	for i, m := range f.Match {
		mat := fmt.Sprintf("%s.match[%d]", at, i)
		if len(m.ContentType) > 0 {
			add("%s.contentType: a stream's filter reads stored messages, which carry no media type; match json or proto fields", mat)
		}
		if len(m.Headers) > 0 {
			add("%s.headers: a stream's filter reads stored messages, not requests; match their properties instead", mat)
		}
		if len(m.JSON) == 0 && len(m.Proto) == 0 && len(m.Key) == 0 && len(m.Properties) == 0 {
			add("%s: an alternative without conditions matches every message; remove the filter instead", mat)
		}
		if len(m.Proto) > 0 && (f.Schema == nil || f.Schema.Type != "protobuf_native") {
			add("%s.proto: name the message type the fields belong to in %s.schema (type protobuf_native)", mat, at)
		}
		for name, vs := range m.Properties {
			if name == "" {
				add("%s.properties: a property needs a name", mat)
			}
			if len(vs) == 0 {
				add("%s.properties.%s: list the values to match", mat, name)
			}
		}
	}
	validateSchema(f.Schema, at+".schema", add)
}
