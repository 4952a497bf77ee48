package config

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// Route is one ingress endpoint: where records are POSTed and how each is sent on.
// Rules are tried in order and the first that matches routes the record; a record no
// rule matches goes to Default. Templates ({json:PATH}, {proto:PATH}, {header:NAME},
// {path:NAME}, {route}) are checked and compiled by the mapping package.
type Route struct {
	Name string `yaml:"name"` // required; unique
	// Path of the endpoint [/v1/publish/<name>]; a segment written :NAME captures that
	// part of the URL for {path:NAME}.
	Path string `yaml:"path"`
	// ContentTypes are the record types the route accepts [application/json, application/x-protobuf].
	ContentTypes []string `yaml:"contentTypes"`
	// Namespaces (tenant/namespace or tenant/*) the route may publish to; required when a
	// topic is a template, checked for every topic when given.
	Namespaces []string `yaml:"namespaces"`
	// Headers are request headers copied into every message's properties (an allow list;
	// the property is named like the header, in lower case).
	Headers []string `yaml:"headers"`
	// Properties are added to every message (values may be templates).
	Properties map[string]string `yaml:"properties"`
	// Schema is what the route's producers declare to the broker [none: bytes]; a rule
	// may declare its own topic's.
	Schema  *Schema `yaml:"schema"`
	Rules   []Rule  `yaml:"rules"`
	Default *Target `yaml:"default"` // required
}

// Rule sends the records it matches to its target.
type Rule struct {
	Match  Match `yaml:"match"`
	Target `yaml:",inline"`
	// Schema replaces the route's for this rule's topic.
	Schema *Schema `yaml:"schema"`
}

// Schema is the Pulsar schema a route's (or a rule's) producers declare, so the broker
// registers it for the topic or checks it against the topic's (and typed consumers read
// fields). The schema package compiles it.
type Schema struct {
	// Type is none, string, json, avro or protobuf_native [none].
	Type string `yaml:"type"`
	// Message is the protobuf message type (protobuf_native): a built-in Mesos type
	// (mesos.v1.scheduler.Event...) or a message of DescriptorSet.
	Message string `yaml:"message"`
	// DescriptorSet is a FileDescriptorSet file (protoc --include_imports
	// --descriptor_set_out) holding Message (protobuf_native).
	DescriptorSet string `yaml:"descriptorSet"`
	// Definition is the Avro record definition (json, avro), inline; File names a file
	// holding it instead.
	Definition string `yaml:"definition"`
	File       string `yaml:"file"`
	// Validate refuses (422) each record that does not decode as the schema [false].
	Validate bool `yaml:"validate"`
}

// SchemaTypes are the values of Schema.Type.
var SchemaTypes = []string{"none", "string", "json", "avro", "protobuf_native"}

// validateSchema checks a schema's fields against its type (the schema package reads
// the files and definitions).
func validateSchema(s *Schema, at string, add func(string, ...any)) {
	if s == nil {
		return
	}
	typ := s.Type
	if typ == "" {
		typ = "none"
	}
	if !slices.Contains(SchemaTypes, typ) {
		add("%s.type: %q is not a schema type (%s)", at, s.Type, strings.Join(SchemaTypes, ", "))
		return
	}
	if typ == "protobuf_native" {
		if s.Message == "" {
			add("%s.message: missing; a protobuf_native schema names its message type", at)
		}
	} else {
		if s.Message != "" {
			add("%s.message: only a protobuf_native schema has a message type", at)
		}
		if s.DescriptorSet != "" {
			add("%s.descriptorSet: only a protobuf_native schema has a descriptor set", at)
		}
	}
	if typ == "json" || typ == "avro" {
		switch {
		case s.Definition == "" && s.File == "":
			add("%s: a %s schema needs its Avro record definition, in definition or file", at, typ)
		case s.Definition != "" && s.File != "":
			add("%s: give the definition inline or in a file, not both", at)
		}
		if typ == "avro" && s.Validate {
			add("%s.validate: records of an avro schema are not validated by the bridge; set validate: false", at)
		}
	} else if s.Definition != "" || s.File != "" {
		add("%s: only json and avro schemas have a definition", at)
	}
	if typ == "none" && s.Validate {
		add("%s.validate: a schema of type none has nothing to validate", at)
	}
}

// Match holds conditions that must all hold; each lists the values allowed. An empty
// Match matches every record.
type Match struct {
	ContentType StringList            `yaml:"contentType"` // the record's media type
	JSON        map[string]StringList `yaml:"json"`        // gjson path -> values (the field's text)
	Proto       map[string]StringList `yaml:"proto"`       // protobuf field path -> values (enums by name)
	Headers     map[string]StringList `yaml:"headers"`     // request header -> values
}

// Target says where a record goes.
type Target struct {
	Topic      string            `yaml:"topic"`      // required; may be a template
	Key        string            `yaml:"key"`        // template; an empty result sends no key
	Properties map[string]string `yaml:"properties"` // added to the route's, values may be templates
}

// StringList is a list of strings that may be written as a single string.
type StringList []string

func (s *StringList) UnmarshalYAML(n *yaml.Node) error {
	switch n.Kind {
	case yaml.ScalarNode:
		*s = StringList{n.Value}
		return nil
	case yaml.SequenceNode:
		out := make(StringList, 0, len(n.Content))
		for _, c := range n.Content {
			if c.Kind != yaml.ScalarNode {
				return fmt.Errorf("line %d: a list of strings holds only strings", c.Line)
			}
			out = append(out, c.Value)
		}
		*s = out
		return nil
	}
	return fmt.Errorf("line %d: write a string or a list of strings", n.Line)
}

// validateRoutes checks what can be checked without compiling the templates (the mapping
// package does that): names, paths, required targets.
func validateRoutes(routes []Route) Problems {
	var p Problems
	add := p.Addf
	names := map[string]int{}
	paths := map[string]int{}
	for i, r := range routes {
		at := fmt.Sprintf("routes[%d]", i)
		if r.Name == "" {
			add("%s.name: missing; every route needs a name", at)
		} else if j, dup := names[r.Name]; dup {
			add("%s.name: %q is also the name of routes[%d]", at, r.Name, j)
		} else {
			names[r.Name] = i
		}
		path := r.EffectivePath()
		if path != "" && path[0] != '/' {
			add("%s.path: %q must start with /", at, r.Path)
		} else if j, dup := paths[path]; dup && path != "" {
			add("%s.path: %q is also the path of routes[%d]", at, path, j)
		} else {
			paths[path] = i
		}
		if r.Default == nil {
			add("%s.default: missing; a route needs a default target for records no rule matches", at)
		} else if r.Default.Topic == "" {
			add("%s.default.topic: missing", at)
		}
		validateSchema(r.Schema, at+".schema", add)
		for j, rule := range r.Rules {
			if rule.Topic == "" {
				add("%s.rules[%d].topic: missing", at, j)
			}
			validateSchema(rule.Schema, fmt.Sprintf("%s.rules[%d].schema", at, j), add)
		}
		checkCredentialCopies(r, at, add)
	}
	return p
}

// CredentialHeaders are the request headers that carry a caller's credentials: a route
// may not copy them into what it publishes, where every reader of the topic would get
// them.
var CredentialHeaders = []string{"Authorization", "Proxy-Authorization", "Cookie"}

// credentialHeader is the credential header a header name is (any case), or "".
func credentialHeader(name string) string {
	for _, h := range CredentialHeaders {
		if strings.EqualFold(strings.TrimSpace(name), h) {
			return h
		}
	}
	return ""
}

// checkCredentialCopies refuses a route that copies a credential header into messages:
// listed in headers (copied into every message's properties), or as {header:NAME} in a
// topic, key or property template (the mapping package's placeholder syntax).
func checkCredentialCopies(r Route, at string, add func(string, ...any)) {
	const why = "a caller's credentials would be published to every reader of the topic"
	for i, h := range r.Headers {
		if c := credentialHeader(h); c != "" {
			add("%s.headers[%d]: %q copies the request's %s header into every message's properties: %s", at, i, h, c, why)
		}
	}
	template := func(key, v string) {
		for rest := v; ; {
			i := strings.Index(rest, "{header:")
			if i < 0 {
				return
			}
			rest = rest[i+len("{header:"):]
			name, _, ok := strings.Cut(rest, "}")
			if !ok {
				return // not a template; the mapping package reports it
			}
			if c := credentialHeader(name); c != "" {
				add("%s: %q copies the request's %s header into every message: %s", key, v, c, why)
				return
			}
		}
	}
	props := func(at string, m map[string]string) {
		for _, k := range slices.Sorted(maps.Keys(m)) {
			template(MapKeyPath(at+".properties", k), m[k])
		}
	}
	target := func(at string, t Target) {
		template(at+".topic", t.Topic)
		template(at+".key", t.Key)
		props(at, t.Properties)
	}
	props(at, r.Properties)
	if r.Default != nil {
		target(at+".default", *r.Default)
	}
	for j, rl := range r.Rules {
		target(fmt.Sprintf("%s.rules[%d]", at, j), rl.Target)
	}
}

// EffectivePath is the route's path with its default applied.
func (r Route) EffectivePath() string {
	if r.Path != "" {
		return r.Path
	}
	if r.Name == "" {
		return ""
	}
	return "/v1/publish/" + r.Name
}

// EffectiveContentTypes are the record types the route accepts, default applied.
func (r Route) EffectiveContentTypes() []string {
	if len(r.ContentTypes) > 0 {
		return r.ContentTypes
	}
	return []string{"application/json", "application/x-protobuf"}
}
