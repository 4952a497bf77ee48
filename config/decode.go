package config

import (
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"go.yaml.in/yaml/v3"
)

// decoder decodes a YAML node tree into the configuration's types key by key, so that
// every key whose value is wrong is reported (with its full path and line) and every
// other key is still decoded: a file is checked whole in one run.
type decoder struct {
	lines map[string]int // key path -> line it is written on
	probs Problems
	// left is how many more values decode may visit: aliases make a small document
	// visit the values they name again and again (a list of aliases of a list of
	// aliases...), so the visits are bounded by the document's size, as the YAML
	// decoder bounds its own alias expansion.
	left int
}

// aliasFactor bounds the values decode visits: this many per node of the document,
// plus aliasSlack. Configurations that merge a few anchored defaults stay far below.
const (
	aliasFactor = 100
	aliasSlack  = 10000
)

// countNodes counts a document's nodes as written (aliases not followed).
func countNodes(n *yaml.Node) int {
	c := 1
	for _, k := range n.Content {
		c += countNodes(k)
	}
	return c
}

func (d *decoder) add(path string, line int, format string, args ...any) {
	d.probs = append(d.probs, Problem{Path: path, Line: line, Message: fmt.Sprintf(format, args...)})
}

var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// linePrefix is what this package's own UnmarshalYAML errors start with.
var linePrefix = regexp.MustCompile(`^(yaml: )?line \d+: `)

func join(path, key string) string {
	if path == "" {
		return key
	}
	return path + "." + key
}

// MapKeyPath is the path of a key of a free-form mapping (properties, match.json): quoted
// when it is not a plain name, since a gjson path has dots of its own.
func MapKeyPath(path, key string) string {
	if key != "" && keyPath.MatchString(key) && !strings.ContainsAny(key, ".[") {
		return join(path, key)
	}
	return path + "[" + strconv.Quote(key) + "]"
}

// describe names what a node holds, for "want X, not Y".
func describe(n *yaml.Node) string {
	switch n.Kind {
	case yaml.MappingNode:
		return "a mapping"
	case yaml.SequenceNode:
		return "a list"
	}
	return strconv.Quote(n.Value)
}

// want names what a Go kind takes, in the configuration's words.
func want(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Bool:
		return "true or false"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return "a whole number"
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "a whole number, zero or more"
	case reflect.Float32, reflect.Float64:
		return "a number"
	case reflect.String:
		return "a string"
	case reflect.Slice:
		return "a list"
	case reflect.Map, reflect.Struct:
		return "a mapping"
	}
	return "a value"
}

// fields are a struct's keys (its yaml tags, inline structs' included) in order.
func fields(v reflect.Value) (names []string, byName map[string]reflect.Value) {
	byName = map[string]reflect.Value{}
	var walk func(v reflect.Value)
	walk = func(v reflect.Value) {
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, opts, _ := strings.Cut(f.Tag.Get("yaml"), ",")
			if name == "-" {
				continue
			}
			if opts == "inline" && f.Type.Kind() == reflect.Struct {
				walk(v.Field(i))
				continue
			}
			if name == "" {
				name = strings.ToLower(f.Name)
			}
			names = append(names, name)
			byName[name] = v.Field(i)
		}
	}
	walk(v)
	return names, byName
}

func (d *decoder) decode(n *yaml.Node, v reflect.Value, path string) {
	if d.left--; d.left < 0 {
		if d.left == -1 {
			d.add(path, n.Line, "the document's aliases expand it too far (more than %d values decoded); write the values out", aliasFactor)
		}
		return
	}
	for n.Kind == yaml.AliasNode && n.Alias != nil {
		n = n.Alias
	}
	if n.Kind == yaml.ScalarNode && n.ShortTag() == "!!null" {
		switch v.Kind() { // as the YAML decoder does: null empties these, leaves the rest
		case reflect.Pointer, reflect.Map, reflect.Slice, reflect.Interface:
			v.Set(reflect.Zero(v.Type()))
		}
		return
	}
	if reflect.PointerTo(v.Type()).Implements(unmarshalerType) {
		if err := n.Decode(v.Addr().Interface()); err != nil {
			d.add(path, n.Line, "%s", linePrefix.ReplaceAllString(err.Error(), ""))
		}
		return
	}
	switch v.Kind() {
	case reflect.Pointer:
		if v.IsNil() {
			v.Set(reflect.New(v.Type().Elem()))
		}
		d.decode(n, v.Elem(), path)
	case reflect.Struct:
		names, byName := fields(v)
		if n.Kind != yaml.MappingNode {
			d.add(path, n.Line, "want a mapping (keys %s), not %s", strings.Join(names, ", "), describe(n))
			return
		}
		d.pairs(n, path, join, func(k, val *yaml.Node, p string) {
			f, ok := byName[k.Value]
			if !ok {
				where := "here"
				if path != "" {
					where = "under " + path
				}
				d.add(p, k.Line, "unknown key; the keys %s are %s", where, strings.Join(names, ", "))
				return
			}
			d.decode(val, f, p)
		})
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			d.add(path, n.Line, "want a mapping, not %s", describe(n))
			return
		}
		if v.IsNil() {
			v.Set(reflect.MakeMap(v.Type()))
		}
		d.pairs(n, path, MapKeyPath, func(k, val *yaml.Node, p string) {
			key := reflect.New(v.Type().Key()).Elem()
			if err := k.Decode(key.Addr().Interface()); err != nil {
				d.add(p, k.Line, "the key %s is not %s", describe(k), want(key.Type()))
				return
			}
			elem := reflect.New(v.Type().Elem()).Elem()
			d.decode(val, elem, p)
			v.SetMapIndex(key, elem)
		})
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			d.add(path, n.Line, "want a list, not %s", describe(n))
			return
		}
		s := reflect.MakeSlice(v.Type(), len(n.Content), len(n.Content))
		for i, c := range n.Content {
			p := fmt.Sprintf("%s[%d]", path, i)
			d.lines[p] = c.Line
			d.decode(c, s.Index(i), p)
		}
		v.Set(s)
	default:
		if n.Kind != yaml.ScalarNode {
			d.add(path, n.Line, "want %s, not %s", want(v.Type()), describe(n))
			return
		}
		if err := n.Decode(v.Addr().Interface()); err != nil || cut(n, v) {
			d.add(path, n.Line, "%s is not %s", describe(n), want(v.Type()))
		}
	}
}

// cut reports whether the YAML decoder cut a number with a fraction (1.5) to fit the
// whole number v.
func cut(n *yaml.Node, v reflect.Value) bool {
	if n.ShortTag() != "!!float" || (!v.CanInt() && !v.CanUint()) {
		return false
	}
	f, err := strconv.ParseFloat(n.Value, 64)
	if err != nil {
		return false
	}
	if v.CanInt() {
		return float64(v.Int()) != f
	}
	return float64(v.Uint()) != f
}

// pairs walks a mapping's keys, reporting a key written twice, then the keys of merged
// mappings (<<: *anchor) that the mapping does not write itself, and calls each with the
// key's path.
func (d *decoder) pairs(n *yaml.Node, path string, name func(path, key string) string, each func(k, v *yaml.Node, path string)) {
	seen := map[string]int{}
	var walk func(n *yaml.Node, merged bool)
	walk = func(n *yaml.Node, merged bool) {
		var merges []*yaml.Node
		for i := 0; i+1 < len(n.Content); i += 2 {
			k, val := n.Content[i], n.Content[i+1]
			if k.ShortTag() == "!!merge" {
				merges = append(merges, val)
				continue
			}
			p := name(path, k.Value)
			if line, dup := seen[k.Value]; dup {
				if !merged {
					d.add(p, k.Line, "written twice (first on line %d)", line)
				}
				continue
			}
			seen[k.Value] = k.Line
			d.lines[p] = k.Line
			each(k, val, p)
		}
		for _, val := range merges {
			for val.Kind == yaml.AliasNode && val.Alias != nil {
				val = val.Alias
			}
			list := []*yaml.Node{val}
			if val.Kind == yaml.SequenceNode {
				list = val.Content
			}
			for _, m := range list {
				for m.Kind == yaml.AliasNode && m.Alias != nil {
					m = m.Alias
				}
				if m.Kind == yaml.MappingNode {
					walk(m, true)
				} else {
					d.add(path, m.Line, "<< merges a mapping or a list of mappings, not %s", describe(m))
				}
			}
		}
	}
	walk(n, false)
}

// decodeFile decodes one YAML document over cfg, returning the line of every key it
// writes and what could not be decoded. A syntax error stops it (nothing after it can be
// read); anything else is reported and decoding goes on.
func decodeFile(data []byte, cfg *Config) (map[string]int, Problems) {
	d := &decoder{lines: map[string]int{}}
	var doc yaml.Node
	if err := yaml.Unmarshal(data, &doc); err != nil {
		msg := strings.TrimPrefix(err.Error(), "yaml: ")
		line := 0
		if m := lineRef.FindStringSubmatch(msg); m != nil {
			line, _ = strconv.Atoi(m[1])
			msg = strings.Replace(msg, m[0], "", 1)
		}
		return d.lines, Problems{{Line: line, Message: msg}}
	}
	if len(doc.Content) == 0 {
		return d.lines, nil
	}
	d.left = aliasFactor*countNodes(&doc) + aliasSlack
	d.decode(doc.Content[0], reflect.ValueOf(cfg).Elem(), "")
	sort.SliceStable(d.probs, func(i, j int) bool { return d.probs[i].Line < d.probs[j].Line })
	return d.lines, d.probs
}
