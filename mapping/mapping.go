package mapping

import (
	"errors"
	"fmt"
	"maps"
	"mime"
	"net/http"
	"slices"
	"strings"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/internal/schema"
)

// ErrUnroutable is wrapped by every error Resolve returns: the record cannot be sent
// anywhere the route allows (a template had no value, or produced a topic outside the
// route's namespaces).
var ErrUnroutable = errors.New("record cannot be routed")

// RouteError says why a record could not be routed.
type RouteError struct {
	Route  string
	Rule   int // -1: the default target
	Reason string
}

func (e *RouteError) Error() string {
	where := "default target"
	if e.Rule >= 0 {
		where = fmt.Sprintf("rule %d", e.Rule)
	}
	return fmt.Sprintf("route %s, %s: %s", e.Route, where, e.Reason)
}

func (e *RouteError) Unwrap() error { return ErrUnroutable }

// Table is a compiled, immutable set of routes. It is safe for concurrent use.
type Table struct {
	routes  []*Route
	byName  map[string]*Route
	streams []*Stream
}

// Route is one compiled ingress route.
type Route struct {
	name         string
	segments     []string // the path split at /; ":x" captures
	params       []string
	contentTypes []string
	namespaces   []string
	headers      []string // canonical names, copied to properties
	propNames    []string // lower-case property name of each header
	props        []prop
	rules        []rule
	fallback     target
	schema       *schema.Schema // the route's; nil: none
}

type prop struct {
	name  string
	value *template
}

type rule struct {
	matcher
	target
}

type target struct {
	topic  *template
	fixed  string // the normalised topic when it has no placeholders
	key    *template
	props  []prop
	schema *schema.Schema // what the target's producers declare; nil: none
}

// Compile builds the routing table of a configuration. Its errors are config.Problems,
// one per template or topic at fault, with its place in the document.
func Compile(cfg config.Config) (*Table, error) {
	t := &Table{byName: map[string]*Route{}}
	var p config.Problems
	for i, rc := range cfg.Routes {
		r, probs := compileRoute(rc, fmt.Sprintf("routes[%d]", i))
		p = append(p, probs...)
		if r != nil {
			t.routes = append(t.routes, r)
			t.byName[r.name] = r
		}
	}
	streams, probs := compileStreams(cfg)
	p = append(p, probs...)
	t.streams = streams
	if len(p) > 0 {
		return nil, p
	}
	return t, nil
}

func compileRoute(rc config.Route, at string) (*Route, config.Problems) {
	var p config.Problems
	add := p.Addf
	r := &Route{name: rc.Name}
	for _, seg := range strings.Split(strings.Trim(rc.EffectivePath(), "/"), "/") {
		if name, ok := strings.CutPrefix(seg, ":"); ok {
			if name == "" {
				add("%s.path: %q has a : segment without a name", at, rc.Path)
			}
			r.params = append(r.params, name)
		}
		r.segments = append(r.segments, seg)
	}
	for _, ct := range rc.EffectiveContentTypes() {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil {
			add("%s.contentTypes: %q is not a media type: %v", at, ct, err)
			continue
		}
		r.contentTypes = append(r.contentTypes, mt)
	}
	for _, ns := range rc.Namespaces {
		tenant, name, ok := strings.Cut(ns, "/")
		if !ok || tenant == "" || name == "" || strings.Contains(name, "/") || tenant == "*" {
			add("%s.namespaces: %q is not tenant/namespace or tenant/*", at, ns)
			continue
		}
		r.namespaces = append(r.namespaces, ns)
	}
	for _, h := range rc.Headers {
		if h == "" || strings.ContainsAny(h, " :\t") {
			add("%s.headers: %q is not a header name", at, h)
			continue
		}
		r.headers = append(r.headers, http.CanonicalHeaderKey(h))
		r.propNames = append(r.propNames, strings.ToLower(h))
	}
	var err error
	if r.schema, err = schema.Compile(rc.Schema); err != nil {
		add("%s.schema: %v", at, err)
	}
	sc := scope{params: r.params, schema: r.schema}
	r.props = compileProps(rc.Properties, sc, at+".properties", &p)
	routeAt := at
	compileTarget := func(tc config.Target, at string) target {
		var tg target
		if tc.Topic == "" {
			return tg // reported by config.Validate
		}
		tmpl, err := parseTemplate(tc.Topic, sc)
		tg.topic = tmpl
		if err != nil {
			add("%s.topic: %v", at, err)
		} else if s, ok := tmpl.static(); ok {
			topic, err := NormalizeTopic(s)
			if err != nil {
				add("%s.topic: %v", at, err)
			} else if err := r.allowed(topic); err != nil {
				add("%s.topic: %v", at, err)
			}
			tg.fixed = topic
		} else if len(r.namespaces) == 0 {
			add("%s.topic: %q is a template; list the namespaces it may reach in %s.namespaces", at, tc.Topic, routeAt)
		}
		if tc.Key != "" {
			if tg.key, err = parseTemplate(tc.Key, sc); err != nil {
				add("%s.key: %v", at, err)
			}
		}
		tg.props = compileProps(tc.Properties, sc, at+".properties", &p)
		return tg
	}
	for j, rl := range rc.Rules {
		rat := fmt.Sprintf("%s.rules[%d]", at, j)
		var cr rule
		cr.matcher = compileMatch(rl.Match, r.schema, rat+".match", &p)
		cr.target = compileTarget(rl.Target, rat)
		cr.target.schema = r.schema
		if rl.Schema != nil {
			if cr.target.schema, err = schema.Compile(rl.Schema); err != nil {
				add("%s.schema: %v", rat, err)
			}
		}
		r.rules = append(r.rules, cr)
	}
	if rc.Default != nil {
		r.fallback = compileTarget(*rc.Default, at+".default")
		r.fallback.schema = r.schema
	}
	return r, p
}

func compileProps(m map[string]string, sc scope, at string, p *config.Problems) []prop {
	var out []prop
	for _, name := range sortedKeys(m) {
		if name == "" {
			p.Addf("%s: a property needs a name", at)
			continue
		}
		t, err := parseTemplate(m[name], sc)
		if err != nil {
			*p = append(*p, config.Problem{Path: config.MapKeyPath(at, name), Message: err.Error()})
			continue
		}
		out = append(out, prop{name: name, value: t})
	}
	return out
}

// gjsonPathOK refuses the paths gjson would read as something else than a field lookup
// (modifiers and empty components).
func gjsonPathOK(path string) bool {
	return !strings.HasPrefix(path, "@") && !strings.Contains(path, "..") && !strings.HasSuffix(path, ".") && !strings.HasPrefix(path, ".")
}

// allowed checks a normalised topic against the route's namespaces.
func (r *Route) allowed(topic string) error {
	if len(r.namespaces) == 0 {
		return nil
	}
	_, rest, _ := strings.Cut(topic, "://")
	parts := strings.SplitN(rest, "/", 3)
	for _, ns := range r.namespaces {
		tenant, name, _ := strings.Cut(ns, "/")
		if parts[0] == tenant && (name == "*" || parts[1] == name) {
			return nil
		}
	}
	return fmt.Errorf("topic %s is outside the route's namespaces (%s)", topic, strings.Join(r.namespaces, ", "))
}

// Routes lists the compiled routes in configuration order.
func (t *Table) Routes() []*Route { return t.routes }

// Lookup returns the route a path belongs to, with its path parameters.
func (t *Table) Lookup(path string) (*Route, map[string]string, bool) {
	segs := strings.Split(strings.Trim(path, "/"), "/")
	for _, r := range t.routes {
		if params, ok := r.match(segs); ok {
			return r, params, true
		}
	}
	return nil, nil, false
}

// Route returns the route of that name.
func (t *Table) Route(name string) (*Route, bool) {
	r, ok := t.byName[name]
	return r, ok
}

// Topics lists the topics the table names without templates.
func (t *Table) Topics() []string {
	seen := map[string]bool{}
	var out []string
	for _, r := range t.routes {
		for _, tg := range append([]target{r.fallback}, r.targets()...) {
			if tg.fixed != "" && !seen[tg.fixed] {
				seen[tg.fixed] = true
				out = append(out, tg.fixed)
			}
		}
	}
	return out
}

func (r *Route) targets() []target {
	out := make([]target, len(r.rules))
	for i, rl := range r.rules {
		out[i] = rl.target
	}
	return out
}

func (r *Route) match(segs []string) (map[string]string, bool) {
	if len(segs) != len(r.segments) {
		return nil, false
	}
	var params map[string]string
	for i, s := range r.segments {
		if name, ok := strings.CutPrefix(s, ":"); ok {
			if segs[i] == "" {
				return nil, false
			}
			if params == nil {
				params = map[string]string{}
			}
			params[name] = segs[i]
			continue
		}
		if s != segs[i] {
			return nil, false
		}
	}
	return params, true
}

// Name is the route's name.
func (r *Route) Name() string { return r.name }

// ContentTypes are the record media types the route accepts.
func (r *Route) ContentTypes() []string { return r.contentTypes }

// Request is what the HTTP request contributes to routing. Build it once per request;
// it is not safe for concurrent use (Resolve caches in it).
type Request struct {
	ContentType string // the media type of each record
	Header      http.Header
	Params      map[string]string // path parameters, from Lookup
	route       string
	json        bool
	proto       bool
	headerProps map[string]string
	// The last templated topic and its normalised form: records of a stream mostly go
	// to the same few topics. A Request belongs to one stream, so no lock is needed.
	lastRaw, lastTopic string
	lastRoute          *Route    // the cache is only good for the route (snapshot) that filled it
	lastTemplate       *template // the template lastRaw was rendered from
}

// NewRequest prepares the routing facts of one request for this route.
func (r *Route) NewRequest(contentType string, h http.Header, params map[string]string) *Request {
	req := &Request{ContentType: contentType, Header: h, Params: params, route: r.name,
		json:  contentType == "application/json" || strings.HasSuffix(contentType, "+json"),
		proto: contentType == "application/x-protobuf"}
	for i, name := range r.headers {
		if v := h.Get(name); v != "" {
			if req.headerProps == nil {
				req.headerProps = map[string]string{}
			}
			req.headerProps[r.propNames[i]] = v
		}
	}
	return req
}

// Target is where one record goes.
type Target struct {
	Topic      string // normalised: persistent://tenant/namespace/name
	Key        string // "" for none
	Properties map[string]string
	Rule       int            // index of the rule that matched; -1 for the default
	Schema     *schema.Schema // what the topic's producer declares; nil: none
}

// MaxTopicName bounds a topic name a template makes from a request or a record (as
// rendered, before the persistent://tenant/namespace/ prefix a bare name gets): the broker
// keeps every topic's name in its metadata store and in every lookup, so a client must
// not be able to make one of hundreds of kilobytes.
const MaxTopicName = 255

// Resolve routes one record. data is the record, or nil when it is streamed (then JSON
// conditions do not match and JSON placeholders have no value).
func (r *Route) Resolve(req *Request, data []byte) (Target, error) {
	in := input{req: req, data: data, json: req.json, proto: req.proto}
	idx, tg := -1, &r.fallback
	for i := range r.rules {
		if r.rules[i].matches(&in) {
			idx, tg = i, &r.rules[i].target
			break
		}
	}
	fail := func(reason string) (Target, error) {
		return Target{}, &RouteError{Route: r.name, Rule: idx, Reason: reason}
	}
	out := Target{Rule: idx, Topic: tg.fixed, Schema: tg.schema}
	if data != nil {
		if err := tg.schema.Check(data); err != nil {
			return Target{}, fmt.Errorf("route %s: %w", r.name, err)
		}
	}
	if out.Topic == "" && tg.topic.perRequest && req.lastTemplate == tg.topic && req.lastRoute == r && req.lastTopic != "" {
		// Made of the request alone, and made for this request already: the same
		// topic, not rendered, looked up in the headers and checked again per record.
		out.Topic = req.lastTopic
	}
	if out.Topic == "" {
		raw, err := tg.topic.render(&in, checkTopicPart)
		if err != nil {
			return fail("topic " + tg.topic.src + ": " + err.Error())
		}
		if len(raw) > MaxTopicName {
			return fail(fmt.Sprintf("topic %s: the name made is %d bytes long, more than %d", tg.topic.src, len(raw), MaxTopicName))
		}
		if raw == req.lastRaw && req.lastRoute == r && req.lastTopic != "" {
			out.Topic = req.lastTopic
		} else {
			if out.Topic, err = NormalizeTopic(raw); err != nil {
				return fail(err.Error())
			}
			if err := r.allowed(out.Topic); err != nil {
				return fail(err.Error())
			}
			req.lastRaw, req.lastTopic, req.lastRoute = raw, out.Topic, r
		}
		req.lastTemplate = tg.topic
	}
	if tg.key != nil {
		out.Key, _ = tg.key.render(&in, nil) // no value: no key
	}
	n := len(req.headerProps) + len(r.props) + len(tg.props)
	if n > 0 {
		out.Properties = make(map[string]string, n)
		for k, v := range req.headerProps {
			out.Properties[k] = v
		}
		for _, list := range [][]prop{r.props, tg.props} {
			for _, p := range list {
				if v, err := p.value.render(&in, nil); err == nil {
					out.Properties[p.name] = v
				}
			}
		}
	}
	return out, nil
}

// checkTopicPart keeps substituted values from changing a topic's structure.
func checkTopicPart(p part, v string) error {
	if v == "" {
		return fmt.Errorf("%s is empty", p)
	}
	for i := 0; i < len(v); i++ {
		c := v[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_' || c == '.' || c == '=') {
			shown := v
			if len(shown) > 64 {
				shown = shown[:64] + "..."
			}
			return fmt.Errorf("%s is %q, which is not a topic name part (letters, digits, - _ . = only)", p, shown)
		}
	}
	return nil
}

// NormalizeTopic expands a topic name to persistent://tenant/namespace/name: a bare
// name is in public/default, tenant/namespace/name is persistent.
func NormalizeTopic(name string) (string, error) {
	scheme, rest, ok := strings.Cut(name, "://")
	if !ok {
		scheme, rest = "persistent", name
	}
	if scheme != "persistent" && scheme != "non-persistent" {
		return "", fmt.Errorf("topic %q: domain %q is neither persistent nor non-persistent", name, scheme)
	}
	parts := strings.Split(rest, "/")
	switch len(parts) {
	case 1:
		parts = []string{"public", "default", parts[0]}
	case 3:
	default:
		return "", fmt.Errorf("topic %q is neither a name nor tenant/namespace/name", name)
	}
	for _, p := range parts {
		if p == "" {
			return "", fmt.Errorf("topic %q has an empty part", name)
		}
	}
	return scheme + "://" + strings.Join(parts, "/"), nil
}

func contains(list []string, s string) bool { return slices.Contains(list, s) }

func sortedKeys[V any](m map[string]V) []string { return slices.Sorted(maps.Keys(m)) }
