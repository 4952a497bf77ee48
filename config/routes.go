package config

import (
	"fmt"

	"go.yaml.in/yaml/v3"
)

// Route is one ingress endpoint: where records are POSTed and how each is sent on.
// Rules are tried in order and the first that matches routes the record; a record no
// rule matches goes to Default. Templates ({json:PATH}, {header:NAME}, {path:NAME},
// {route}) are checked and compiled by the mapping package.
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
	Rules      []Rule            `yaml:"rules"`
	Default    *Target           `yaml:"default"` // required
}

// Rule sends the records it matches to its target.
type Rule struct {
	Match  Match `yaml:"match"`
	Target `yaml:",inline"`
}

// Match holds conditions that must all hold; each lists the values allowed. An empty
// Match matches every record.
type Match struct {
	ContentType StringList            `yaml:"contentType"` // the record's media type
	JSON        map[string]StringList `yaml:"json"`        // gjson path -> values (the field's text)
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
		for j, rule := range r.Rules {
			if rule.Topic == "" {
				add("%s.rules[%d].topic: missing", at, j)
			}
		}
	}
	return p
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
