package mapping

import (
	"fmt"
	"net/http"
	"strings"

	"github.com/tidwall/gjson"

	"github.com/recordio-bridge/bridge/internal/schema"
)

// A template is text with placeholders: {json:PATH} (a field of a JSON record, PATH in
// gjson syntax), {proto:PATH} (a field of a protobuf record of the route's message type),
// {header:NAME} (a request header), {path:NAME} (a :NAME segment of the
// route's path) and {route} (the route's name).
type template struct {
	src   string
	parts []part
	// perRequest: no part comes from the record (only literals, headers, path
	// parameters and the route's name), so the template renders the same for every
	// record of a request.
	perRequest bool
}

type partKind uint8

const (
	literal partKind = iota
	jsonField
	protoField
	header
	pathParam
	routeName
)

type part struct {
	kind  partKind
	text  string       // the literal, JSON or proto path, canonical header name or parameter name
	proto *schema.Path // protoField: the compiled path
}

// scope is what a route's templates may refer to: its path parameters and the message
// type of its protobuf records (nil: none).
type scope struct {
	params []string
	schema *schema.Schema
}

func (p part) String() string {
	switch p.kind {
	case jsonField:
		return "json field " + p.text
	case protoField:
		return "proto field " + p.text
	case header:
		return "header " + p.text
	case pathParam:
		return "path parameter " + p.text
	case routeName:
		return "route name"
	}
	return "literal"
}

// parseTemplate compiles src in the route's scope.
func parseTemplate(src string, sc scope) (*template, error) {
	t := &template{src: src}
	rest := src
	for rest != "" {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			if strings.IndexByte(rest, '}') >= 0 {
				return nil, fmt.Errorf("%q has a } without its {", src)
			}
			t.parts = append(t.parts, part{kind: literal, text: rest})
			break
		}
		if open > 0 {
			if strings.IndexByte(rest[:open], '}') >= 0 {
				return nil, fmt.Errorf("%q has a } without its {", src)
			}
			t.parts = append(t.parts, part{kind: literal, text: rest[:open]})
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return nil, fmt.Errorf("%q has a { without its }", src)
		}
		ph := rest[open+1 : open+end]
		rest = rest[open+end+1:]
		kind, arg, _ := strings.Cut(ph, ":")
		switch {
		case kind == "json" && arg != "":
			t.parts = append(t.parts, part{kind: jsonField, text: arg})
		case kind == "proto" && arg != "":
			path, err := sc.schema.Path(arg)
			if err != nil {
				return nil, fmt.Errorf("%q: %v", src, err)
			}
			t.parts = append(t.parts, part{kind: protoField, text: arg, proto: path})
		case kind == "header" && arg != "":
			t.parts = append(t.parts, part{kind: header, text: http.CanonicalHeaderKey(arg)})
		case kind == "path" && arg != "":
			found := false
			for _, p := range sc.params {
				found = found || p == arg
			}
			if !found {
				return nil, fmt.Errorf("%q uses {path:%s} but the route's path has no :%s segment", src, arg, arg)
			}
			t.parts = append(t.parts, part{kind: pathParam, text: arg})
		case ph == "route":
			t.parts = append(t.parts, part{kind: routeName})
		default:
			return nil, fmt.Errorf("%q: {%s} is not a placeholder (write {json:PATH}, {proto:PATH}, {header:NAME}, {path:NAME} or {route})", src, ph)
		}
	}
	t.perRequest = true
	for _, p := range t.parts {
		if p.kind == jsonField || p.kind == protoField {
			t.perRequest = false
		}
	}
	return t, nil
}

// static reports whether the template has no placeholders, and its text if so.
func (t *template) static() (string, bool) {
	switch len(t.parts) {
	case 0:
		return "", true
	case 1:
		if t.parts[0].kind == literal {
			return t.parts[0].text, true
		}
	}
	for _, p := range t.parts {
		if p.kind != literal {
			return "", false
		}
	}
	return t.src, true
}

func (t *template) usesJSON() bool {
	for _, p := range t.parts {
		if p.kind == jsonField {
			return true
		}
	}
	return false
}

// missingError names the placeholder that had no value.
type missingError struct{ part part }

func (e *missingError) Error() string {
	switch e.part.kind {
	case jsonField:
		return fmt.Sprintf("the record has no JSON field %s", e.part.text)
	case protoField:
		return fmt.Sprintf("the record has no protobuf field %s", e.part.text)
	case header:
		return fmt.Sprintf("the request has no %s header", e.part.text)
	}
	return fmt.Sprintf("no value for %s", e.part)
}

// render fills the template in. check, when given, vets each substituted value.
func (t *template) render(in *input, check func(part, string) error) (string, error) {
	if len(t.parts) == 1 {
		v, err := in.value(t.parts[0])
		if err == nil && check != nil && t.parts[0].kind != literal {
			err = check(t.parts[0], v)
		}
		return v, err
	}
	var b strings.Builder
	for _, p := range t.parts {
		v, err := in.value(p)
		if err != nil {
			return "", err
		}
		if check != nil && p.kind != literal {
			if err := check(p, v); err != nil {
				return "", err
			}
		}
		b.WriteString(v)
	}
	return b.String(), nil
}

// input is what a record is routed by.
type input struct {
	req   *Request // nil for a stored message (a stream's filter)
	data  []byte   // nil for a streamed record
	json  bool     // data is JSON
	proto bool     // data is protobuf (of the route's message type)
	key   string   // a stored message's
	props map[string]string
}

func (in *input) contentType() string {
	if in.req == nil {
		return ""
	}
	return in.req.ContentType
}

func (in *input) value(p part) (string, error) {
	switch p.kind {
	case literal:
		return p.text, nil
	case jsonField:
		if !in.json || in.data == nil {
			return "", &missingError{p}
		}
		r := gjson.GetBytes(in.data, p.text)
		if !r.Exists() || r.Type == gjson.Null {
			return "", &missingError{p}
		}
		return r.String(), nil
	case protoField:
		if !in.proto || in.data == nil {
			return "", &missingError{p}
		}
		v, ok := p.proto.Value(in.data)
		if !ok {
			return "", &missingError{p}
		}
		return v, nil
	case header:
		v := in.req.Header.Get(p.text)
		if v == "" {
			return "", &missingError{p}
		}
		return v, nil
	case pathParam:
		return in.req.Params[p.text], nil
	case routeName:
		return in.req.route, nil
	}
	return "", &missingError{p}
}
