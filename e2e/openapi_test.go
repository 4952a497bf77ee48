package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/pb33f/libopenapi"
	validator "github.com/pb33f/libopenapi-validator"
	"github.com/pb33f/libopenapi-validator/config"
	liberrors "github.com/pb33f/libopenapi-validator/errors"
	"github.com/pb33f/libopenapi-validator/paths"
	"github.com/pb33f/libopenapi-validator/schema_validation"
	v3 "github.com/pb33f/libopenapi/datamodel/high/v3"

	"github.com/recordio-bridge/bridge/e2e/broker"
	"github.com/recordio-bridge/bridge/internal/oidctest"
	"github.com/recordio-bridge/bridge/recordio"
)

// specPath is the machine-readable HTTP contract; OPENAPI_SPEC points the test at another
// copy (to see it fail on a spec that disagrees with the bridge).
func specPath() string {
	if p := os.Getenv("OPENAPI_SPEC"); p != "" {
		return p
	}
	return "../docs/api/openapi.yaml"
}

// contract validates real exchanges with a bridge against the OpenAPI document and
// records which operation and status each one exercised.
type contract struct {
	v       validator.Validator
	model   *v3.Document
	schemas schema_validation.SchemaValidator
	opts    *config.ValidationOptions

	mu   sync.Mutex
	seen map[string]bool // "METHOD /path/{template} STATUS"
}

func loadContract(t *testing.T, spec []byte) *contract {
	t.Helper()
	doc, err := libopenapi.NewDocument(spec)
	if err != nil {
		t.Fatal(err)
	}
	m, err := doc.BuildV3Model()
	if err != nil {
		t.Fatalf("building the model of %s: %v", specPath(), err)
	}
	opts := []config.Option{config.WithFormatAssertions()}
	v, errs := validator.NewValidator(doc, opts...)
	if len(errs) > 0 {
		t.Fatalf("validator: %v", errs)
	}
	if ok, verrs := v.ValidateDocument(); !ok {
		for _, e := range verrs {
			t.Errorf("the document is not valid OpenAPI: %s (%s)", e.Message, e.Reason)
		}
		t.FailNow()
	}
	return &contract{v: v, model: &m.Model, schemas: schema_validation.NewSchemaValidator(opts...),
		opts: config.NewValidationOptions(opts...), seen: map[string]bool{}}
}

// exchange is one request to a bridge and what came back.
type exchange struct {
	req    *http.Request
	resp   *http.Response
	body   []byte // the response body as read (a stream's first records)
	reqRaw []byte // the request body, for request validation (nil: not validated)
}

// check validates the response (status, headers, JSON body) and, for a RecordIO body, each
// record against the component record(i, n, rec) names, which must be one the media type
// lists in x-recordio-records. With reqRaw set the request is validated too. It returns
// the template path the exchange matched.
func (c *contract) check(t *testing.T, x exchange, record func(i, n int, rec []byte) string) {
	t.Helper()
	what := fmt.Sprintf("%s %s -> %d", x.req.Method, x.req.URL.RequestURI(), x.resp.StatusCode)
	if x.reqRaw != nil {
		r := x.req.Clone(context.Background())
		r.Body = io.NopCloser(bytes.NewReader(x.reqRaw))
		if ok, errs := c.v.ValidateHttpRequestSync(r); !ok {
			for _, e := range errs {
				t.Errorf("%s: request: %s", what, describe(e))
			}
		}
	}
	resp := *x.resp
	resp.Body = io.NopCloser(bytes.NewReader(x.body))
	if ok, errs := c.v.ValidateHttpResponse(x.req, &resp); !ok {
		for _, e := range errs {
			t.Errorf("%s: response: %s; body %.300s", what, describe(e), x.body)
		}
	}
	item, _, tmpl := paths.FindPath(x.req, c.model, c.opts)
	if item == nil {
		t.Errorf("%s: no path of the spec matches", what)
		return
	}
	c.mu.Lock()
	c.seen[fmt.Sprintf("%s %s %d", x.req.Method, tmpl, x.resp.StatusCode)] = true
	c.mu.Unlock()
	ct := x.resp.Header.Get("Content-Type")
	if ct != recordio.MediaRecordIO {
		return
	}
	if record == nil {
		t.Errorf("%s: a RecordIO body and no record schemas to check it against", what)
		return
	}
	var listed []string
	if op := item.GetOperations().GetOrZero(strings.ToLower(x.req.Method)); op != nil {
		if r := op.Responses.Codes.GetOrZero(strconv.Itoa(x.resp.StatusCode)); r != nil {
			if mt := r.Content.GetOrZero(recordio.MediaRecordIO); mt != nil {
				if n := mt.Extensions.GetOrZero("x-recordio-records"); n != nil {
					_ = n.Decode(&listed)
				}
			}
		}
	}
	recs := decodeRecords(t, x.body)
	if len(recs) == 0 {
		t.Errorf("%s: no record in the RecordIO body", what)
	}
	for i, rec := range recs {
		name := record(i, len(recs), rec)
		if name == "" {
			continue // a record the spec gives no schema (a payload as stored)
		}
		if !slices.Contains(listed, name) {
			t.Errorf("%s: record %d should be a %s, which the spec's x-recordio-records (%v) does not list", what, i, name, listed)
			continue
		}
		proxy := c.model.Components.Schemas.GetOrZero(name)
		if proxy == nil {
			t.Errorf("%s: no component schema %s", what, name)
			continue
		}
		if ok, errs := c.schemas.ValidateSchemaBytes(proxy.Schema(), rec); !ok {
			for _, e := range errs {
				t.Errorf("%s: record %d %s is not a %s: %s", what, i, rec, name, describe(e))
			}
		}
	}
}

// describe says what a validation error found, down to the failing schema keywords.
func describe(e *liberrors.ValidationError) string {
	s := e.Message + ": " + e.Reason
	for _, se := range e.SchemaValidationErrors {
		s += "; " + se.Reason + " at " + se.FieldPath + " (" + se.KeywordLocation + ")"
	}
	return s
}

// operations lists every "METHOD path status" the spec documents.
func (c *contract) operations() []string {
	var out []string
	for p, item := range c.model.Paths.PathItems.FromOldest() {
		for method, op := range item.GetOperations().FromOldest() {
			for code := range op.Responses.Codes.KeysFromOldest() {
				out = append(out, fmt.Sprintf("%s %s %s", strings.ToUpper(method), p, code))
			}
		}
	}
	slices.Sort(out)
	return out
}

func decodeRecords(t *testing.T, b []byte) [][]byte {
	t.Helper()
	rd := recordio.NewReader(bytes.NewReader(b))
	var out [][]byte
	for {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			return out
		}
		if err != nil {
			t.Errorf("decoding the RecordIO body: %v (%.200q)", err, b)
			return out
		}
		out = append(out, bytes.Clone(rec))
	}
}

// unprovoked are the documented answers this test cannot cause on a shared broker, with
// the reason; every other documented operation and status must be exercised.
var unprovoked = map[string]string{
	"POST /v1/publish/{route} 500":       "a record failing with an error the bridge has no status for: no such error is known",
	"POST /v1/streams/{stream}/ack 408":  "the /ack body timeout is 30 s and not configurable",
	"POST /v1/streams/{stream}/nack 408": "the /nack body timeout is 30 s and not configurable",
	"POST /v1/streams/{stream}/ack 503":  "the broker failing an acknowledgement needs the shared broker to fail",
	"POST /v1/streams/{stream}/nack 503": "only before a configuration is loaded, which no started bridge shows",
	"POST /v1/streams/{stream}/seek 502": "the broker refusing a seek needs the shared broker to refuse one",
	"POST /v1/streams/{stream}/seek 503": "the broker unreachable or the consumer reconnecting during a seek needs the shared broker to fail",
}

// TestOpenAPIContractMatchesTheRunningBridge provokes every status code the HTTP contract
// (docs/api/openapi.yaml) documents on real bridges on the shared broker, validates each
// request and answer against it (RecordIO bodies record by record against their named
// components), and fails if the spec documents an answer the test did not see.
func TestOpenAPIContractMatchesTheRunningBridge(t *testing.T) {
	spec, err := os.ReadFile(specPath())
	if err != nil {
		t.Fatal(err)
	}
	c := loadContract(t, spec)
	b := broker.Get(t)
	ev, named, gone := b.Topic(t, "oa-ev"), b.Topic(t, "oa-named"), "persistent://no-such-tenant-"+broker.Name("t")+"/ns/t"
	p := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
ingress:
  maxRecordBytes: 1024
  idleTimeout: 1s
routes:
  - name: ev
    default: {topic: %s}
  - name: named
    default: {topic: %s}
  - name: bytopic
    namespaces: [public/default]
    default: {topic: "oa-{json:kind}"}
  - name: refused
    default: {topic: %s}
streams:
  - name: s
    topics: [%s]
    position: earliest
    type: shared
    ack: client
    envelope: json
    overrides: [ack, envelope, subscription, position]
  - name: x
    topics: [%s]
    type: exclusive
    position: earliest
  - name: gone
    topics: [%s]
`, b.URL, ev, named, gone, ev, ev, gone))

	client := &http.Client{Transport: &http.Transport{DisableCompression: true}}
	// send makes one request and reads its whole answer.
	send := func(method, url string, h map[string]string, body []byte, validReq bool) exchange {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		var rd io.Reader
		if body != nil {
			rd = bytes.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, url, rd)
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		got, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatalf("%s %s: reading the answer: %v", method, url, err)
		}
		x := exchange{req: req, resp: resp, body: got}
		if validReq {
			x.reqRaw = body
			if x.reqRaw == nil {
				x.reqRaw = []byte{}
			}
		}
		return x
	}
	expect := func(x exchange, status int) {
		t.Helper()
		if x.resp.StatusCode != status {
			t.Errorf("%s %s: status %d, want %d: %s", x.req.Method, x.req.URL.RequestURI(), x.resp.StatusCode, status, x.body)
		}
	}
	ingressRecords := func(i, n int, rec []byte) string {
		if i == n-1 {
			return "IngressSummary"
		}
		if bytes.Contains(rec, []byte(`"status":200`)) {
			return "IngressReceipt"
		}
		return "IngressFailure"
	}
	rio := recordio.AppendRecord
	stream := map[string]string{"Content-Type": "application/recordio", "Message-Content-Type": "application/json"}
	streamed := map[string]string{"Content-Type": "application/recordio", "Message-Content-Type": "application/json", "Accept": "application/recordio"}
	with := func(h map[string]string, kv ...string) map[string]string {
		out := map[string]string{}
		for k, v := range h {
			out[k] = v
		}
		for i := 0; i+1 < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	publish := p.DataURL + "/v1/publish/"

	t.Run("ingress", func(t *testing.T) {
		// Streamed receipts: four records published, one too large (413 in its receipt).
		var body []byte
		for i := range 4 {
			body = rio(body, []byte(fmt.Sprintf(`{"n":%d}`, i)))
		}
		body = rio(body, []byte(`{"big":"`+strings.Repeat("x", 1100)+`"}`))
		x := send("POST", publish+"ev", with(streamed, "Message-Accept", "application/json"), body, true)
		expect(x, 200)
		c.check(t, x, ingressRecords)
		if recs := decodeRecords(t, x.body); len(recs) != 6 || !bytes.Contains(recs[4], []byte(`"status":413`)) {
			t.Errorf("streamed receipts: want 4 receipts, a 413 and a summary, got %q", recs)
		}
		// A named stream's receipts carry sequence numbers, its summary duplicates and resumeSequence.
		x = send("POST", publish+"named", with(streamed, "Stream-Name", "oa-"+broker.Name("n"), "Stream-Sequence", "10"),
			rio(rio(nil, []byte(`{"a":1}`)), []byte(`{"a":2}`)), true)
		expect(x, 200)
		c.check(t, x, ingressRecords)
		// One answer: every record published.
		expect(c.recorded(t, send("POST", publish+"ev", map[string]string{"Content-Type": "application/json"}, []byte(`{"one":1}`), true)), 200)
		expect(c.recorded(t, send("POST", publish+"ev", stream, rio(nil, []byte(`{"one":2}`)), true)), 200)
		// 400: no Content-Type (refused before the stream); a malformed length prefix (one answer).
		expect(c.recorded(t, send("POST", publish+"ev", nil, []byte(`{}`), false)), 400)
		x = c.recorded(t, send("POST", publish+"ev", stream, []byte("12x\n{}"), true))
		expect(x, 400)
		if !bytes.Contains(x.body, []byte(`"summary":true`)) {
			t.Errorf("a framing error's one answer is a summary: %s", x.body)
		}
		expect(c.recorded(t, send("POST", publish+"nope", stream, rio(nil, []byte(`{}`)), true)), 404)
		expect(c.recorded(t, send("POST", publish+"ev", with(streamed, "Message-Accept", "text/plain"), rio(nil, []byte(`{}`)), false)), 406)
		expect(c.recorded(t, send("POST", publish+"ev", map[string]string{"Content-Type": "application/json"}, []byte(`{"big":"`+strings.Repeat("x", 1100)+`"}`), true)), 413)
		expect(c.recorded(t, send("POST", publish+"ev", map[string]string{"Content-Type": "text/plain"}, []byte(`hello`), false)), 415)
		expect(c.recorded(t, send("POST", publish+"bytopic", stream, rio(nil, []byte(`{"no":"kind"}`)), true)), 422)
		expect(c.recorded(t, send("POST", publish+"refused", stream, rio(nil, []byte(`{}`)), true)), 502)

		// 409: a second request on a stream name in use.
		name := "oa-" + broker.Name("busy")
		held := openStream(t, h1Client, publish+"named", map[string]string{"Message-Content-Type": "application/json", "Stream-Name": name})
		if err := held.send([]byte(`{"held":1}`)); err != nil {
			t.Fatal(err)
		}
		expect(c.recorded(t, send("POST", publish+"named", with(stream, "Stream-Name", name), rio(nil, []byte(`{}`)), true)), 409)
		if _, _, err := held.finish(30 * time.Second); err != nil {
			t.Fatal(err)
		}

		// 408: a body silent for ingress.idleTimeout (1s) in the middle of a record.
		pr, pw := io.Pipe()
		defer pw.Close()
		req, _ := http.NewRequest("POST", publish+"ev", pr)
		for k, v := range stream {
			req.Header.Set(k, v)
		}
		go func() { _, _ = pw.Write([]byte("20\n{\"half")) }()
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		got, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		_ = pw.Close()
		x = exchange{req: req, resp: resp, body: got}
		expect(x, 408)
		c.check(t, x, nil)
	})

	var envelopes [][]byte
	t.Run("egress", func(t *testing.T) {
		streams := p.DataURL + "/v1/streams/"
		sub := broker.Name("oa-sub")
		g := openGet(t, streams+"s?subscription="+sub, nil, 6)
		c.check(t, g.exchange, func(int, int, []byte) string { return "EgressEnvelope" })
		envelopes = decodeRecords(t, g.body)
		if len(envelopes) < 6 {
			t.Fatalf("want the 6 records published to %s, got %d", ev, len(envelopes))
		}
		sid := g.resp.Header.Get("Stream-Id")
		ack, nack := streams+"s/ack", streams+"s/nack"
		js := func(h ...string) map[string]string {
			return with(map[string]string{"Content-Type": "application/json", "Stream-Id": sid}, h...)
		}
		var ids []string
		for _, e := range envelopes {
			var env struct {
				MessageID string `json:"messageId"`
			}
			_ = json.Unmarshal(e, &env)
			ids = append(ids, env.MessageID)
		}
		// Every position known: unknown is an empty array, not null.
		x := c.recorded(t, send("GET", ack+"?positions=0,1", js(), nil, true))
		expect(x, 200)
		x = c.recorded(t, send("GET", ack+"?positions=0,99", js(), nil, true))
		expect(x, 200)
		if !bytes.Contains(x.body, []byte(`"unknown":["99"]`)) {
			t.Errorf("lookup: %s", x.body)
		}
		expect(c.recorded(t, send("GET", ack, js(), nil, false)), 400)
		// A Stream-Id no stream of this process has open: another process may serve it (409).
		expect(c.recorded(t, send("GET", ack+"?positions=0", js("Stream-Id", "0123"), nil, true)), 409)
		// ids and positions mixed; one unknown: the others are acknowledged.
		x = c.recorded(t, send("POST", ack, js(), []byte(`["1:2:3:4", 0]`), true))
		expect(x, 400)
		if !bytes.Contains(x.body, []byte(`"acked":1`)) {
			t.Errorf("ack with an unknown id: %s", x.body)
		}
		expect(c.recorded(t, send("POST", nack, js(), []byte(`[1]`), true)), 200)
		expect(c.recorded(t, send("POST", nack, js(), []byte(`["9:9:9:9"]`), true)), 400)
		expect(c.recorded(t, send("POST", ack, js("Content-Type", "application/recordio"), rio(nil, []byte(ids[2])), true)), 200)
		x = c.recorded(t, send("POST", ack+"?through=5", js("Content-Type", ""), nil, true))
		expect(x, 200)
		if !bytes.Contains(x.body, []byte(`"cumulative":`)) {
			t.Errorf("through: %s", x.body)
		}
		expect(c.recorded(t, send("POST", ack, map[string]string{"Content-Type": "application/json"}, []byte(`[0]`), false)), 400)
		expect(c.recorded(t, send("POST", ack, js("Stream-Id", "0123"), []byte(`[0]`), true)), 409)
		expect(c.recorded(t, send("POST", nack, js("Stream-Id", "0123"), []byte(`[0]`), true)), 409)
		many := []byte("[0" + strings.Repeat(",0", 10000) + "]")
		expect(c.recorded(t, send("POST", ack, js(), many, false)), 413)
		expect(c.recorded(t, send("POST", nack, js(), many, false)), 413)
		expect(c.recorded(t, send("POST", nack, js("Content-Type", "text/plain"), []byte(`0`), false)), 400)
		// /seek: a shared subscription without allowSeekShared (409), a Stream-Id not open
		// here (409), none at all (400), a GET (405).
		seek, at := streams+"s/seek", []byte(`{"time":"2026-12-06T10:00:00Z"}`)
		expect(c.recorded(t, send("POST", seek, js(), at, true)), 409)
		expect(c.recorded(t, send("POST", seek, js("Stream-Id", "0123"), at, true)), 409)
		expect(c.recorded(t, send("POST", seek, map[string]string{"Content-Type": "application/json"}, at, false)), 400)
		expect(c.recorded(t, send("GET", seek, nil, nil, true)), 405)
		g.close()

		// 409 on the acknowledgement endpoints of an ack=auto response.
		auto := openGet(t, streams+"s?ack=auto&position=earliest&subscription="+broker.Name("oa-auto"), nil, 1)
		c.check(t, auto.exchange, func(int, int, []byte) string { return "EgressEnvelope" })
		aid := auto.resp.Header.Get("Stream-Id")
		expect(c.recorded(t, send("POST", ack, js("Stream-Id", aid), []byte(`[0]`), true)), 409)
		expect(c.recorded(t, send("POST", nack, js("Stream-Id", aid), []byte(`[0]`), true)), 409)
		auto.close()

		expect(c.recorded(t, send("GET", streams+"s?bogus=1", nil, nil, false)), 400)
		expect(c.recorded(t, send("GET", streams+"nope", nil, nil, true)), 404)
		expect(c.recorded(t, send("GET", streams+"s", map[string]string{"Accept": "application/json"}, nil, true)), 406)
		expect(c.recorded(t, send("GET", streams+"s/nack", nil, nil, true)), 405)
		expect(c.recorded(t, send("GET", streams+"gone", nil, nil, true)), 502)
		// 409: an Exclusive subscription has its consumer already.
		first := openGet(t, streams+"x", nil, 1)
		c.check(t, first.exchange, func(int, int, []byte) string { return "" })
		expect(c.recorded(t, send("GET", streams+"x", nil, nil, true)), 409)
		// 404: the Stream-Id of another stream open here, on s's paths.
		other := first.resp.Header.Get("Stream-Id")
		sj := map[string]string{"Content-Type": "application/json", "Stream-Id": other}
		expect(c.recorded(t, send("GET", streams+"s/ack?positions=0", sj, nil, true)), 404)
		expect(c.recorded(t, send("POST", streams+"s/ack", sj, []byte(`[0]`), true)), 404)
		expect(c.recorded(t, send("POST", streams+"s/nack", sj, []byte(`[0]`), true)), 404)
		expect(c.recorded(t, send("POST", streams+"s/seek", sj, []byte(`{"time":"2026-12-06T10:00:00Z"}`), true)), 404)
		// /seek on the exclusive stream: a time that is not RFC 3339 (400), then a move (200).
		xseek := streams + "x/seek"
		expect(c.recorded(t, send("POST", xseek, sj, []byte(`{"time":"yesterday"}`), false)), 400)
		x = c.recorded(t, send("POST", xseek, sj, []byte(`{"time":"2026-12-06T10:00:00Z"}`), true))
		expect(x, 200)
		first.close()
	})

	t.Run("ops", func(t *testing.T) {
		for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
			expect(c.recorded(t, send("GET", p.OpsURL+path, nil, nil, true)), 200)
		}
	})

	t.Run("access and limits", func(t *testing.T) {
		sum := func(s string) string { h := sha256.Sum256([]byte(s)); return hex.EncodeToString(h[:]) }
		topic := b.Topic(t, "oa-auth")
		// An issuer whose identity provider cannot be reached (nothing listens on port 1),
		// and a token naming it: the bridge cannot judge it.
		const downIssuer = "http://127.0.0.1:1/"
		key, err := rsa.GenerateKey(rand.Reader, 2048)
		if err != nil {
			t.Fatal(err)
		}
		downJWT, err := oidctest.SignWith(key, "k1", jose.RS256, map[string]any{"iss": downIssuer, "aud": "bridge", "sub": "svc",
			"exp": time.Now().Add(time.Hour).Unix(), "scope": "publish:ev read:s"})
		if err != nil {
			t.Fatal(err)
		}
		q := startBridge(t, fmt.Sprintf(`
pulsar:
  url: %s
ingress: {maxStreams: 1}
egress: {maxStreams: 1}
auth:
  tokens:
    - {name: writer, sha256: %s, routes: [ev]}
    - {name: reader, sha256: %s, streams: [s]}
  jwt:
    - {name: down-idp, issuer: "%s", audience: bridge}
routes:
  - name: ev
    default: {topic: %s}
streams:
  - name: s
    topics: [%s]
    position: earliest
    ack: client
`, b.URL, sum("tok-w"), sum("tok-r"), downIssuer, topic, topic))
		bearer := func(tok string) map[string]string { return map[string]string{"Authorization": "Bearer " + tok} }
		one := func(tok string) map[string]string {
			return with(bearer(tok), "Content-Type", "application/json")
		}
		pub, get := q.DataURL+"/v1/publish/ev", q.DataURL+"/v1/streams/s"
		expect(c.recorded(t, send("POST", pub, one(""), []byte(`{}`), false)), 401)
		expect(c.recorded(t, send("POST", pub, one("tok-r"), []byte(`{}`), true)), 403)
		expect(c.recorded(t, send("POST", pub, one("tok-w"), []byte(`{"w":1}`), true)), 200)
		expect(c.recorded(t, send("GET", get, nil, nil, false)), 401)
		expect(c.recorded(t, send("GET", get, bearer("tok-w"), nil, true)), 403)
		for ep, body := range map[string]string{get + "/ack": `[0]`, get + "/nack": `[0]`, get + "/seek": `{"time":"2026-12-06T10:00:00Z"}`} {
			expect(c.recorded(t, send("POST", ep, with(one(""), "Stream-Id", "0123"), []byte(body), false)), 401)
			expect(c.recorded(t, send("POST", ep, with(one("tok-w"), "Stream-Id", "0123"), []byte(body), true)), 403)
		}
		expect(c.recorded(t, send("GET", get+"/ack?positions=0", with(bearer(""), "Stream-Id", "0123"), nil, false)), 401)
		expect(c.recorded(t, send("GET", get+"/ack?positions=0", with(bearer("tok-w"), "Stream-Id", "0123"), nil, true)), 403)
		// 503: the JWT's identity provider is unreachable; /readyz names it (and stays 200).
		expect(c.recorded(t, send("GET", get+"/ack?positions=0", with(bearer(downJWT), "Stream-Id", "0123"), nil, true)), 503)
		expect(c.recorded(t, send("POST", pub, one(downJWT), []byte(`{}`), true)), 503)
		expect(c.recorded(t, send("GET", q.OpsURL+"/readyz", nil, nil, true)), 200)
		if _, ok := q.readyz(t)["identityProviders"]; !ok {
			t.Errorf("/readyz does not name the unreachable identity provider: %v", q.readyz(t))
		}

		// 429: one stream each way is all these limits admit.
		held := openStream(t, h1Client, pub, map[string]string{"Message-Content-Type": "application/json", "Authorization": "Bearer tok-w"})
		if err := held.send([]byte(`{"held":1}`)); err != nil {
			t.Fatal(err)
		}
		waitFor(t, func() bool { return q.readyz(t)["streams"] == float64(1) })
		x := c.recorded(t, send("POST", pub, one("tok-w"), []byte(`{}`), true))
		expect(x, 429)
		if x.resp.Header.Get("Retry-After") == "" {
			t.Errorf("429 without Retry-After")
		}
		if _, _, err := held.finish(30 * time.Second); err != nil {
			t.Fatal(err)
		}
		g := openGet(t, get, bearer("tok-r"), 1)
		c.check(t, g.exchange, func(int, int, []byte) string { return "" })
		expect(c.recorded(t, send("GET", get, bearer("tok-r"), nil, true)), 429)
		g.close()
	})

	t.Run("broker unreachable", func(t *testing.T) {
		port, err := broker.FreePorts(1)
		if err != nil {
			t.Fatal(err)
		}
		d := launchBridge(t, fmt.Sprintf(`
pulsar:
  url: pulsar://127.0.0.1:%d
ingress: {publishTimeout: 2s}
routes:
  - name: ev
    default: {topic: t}
streams:
  - name: s
    topics: [t]
`, port[0]), nil)
		var x exchange
		waitFor(t, func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", d.OpsURL+"/readyz", nil)
			resp, err := client.Do(req)
			if err != nil {
				return false
			}
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			x = exchange{req: req, resp: resp, body: body, reqRaw: []byte{}}
			return true
		})
		expect(c.recorded(t, x), 503)
		x = c.recorded(t, send("POST", d.DataURL+"/v1/publish/ev", map[string]string{"Content-Type": "application/json"}, []byte(`{}`), true))
		expect(x, 503)
		if x.resp.Header.Get("Retry-After") == "" || !bytes.Contains(x.body, []byte(`"retryAfter"`)) {
			t.Errorf("503 without Retry-After or retryAfter: %v %s", x.resp.Header, x.body)
		}
		expect(c.recorded(t, send("GET", d.DataURL+"/v1/streams/s", nil, nil, true)), 503)
	})

	// Every documented answer was seen, or is listed with the reason it cannot be.
	for _, op := range c.operations() {
		reason, skip := unprovoked[op]
		switch {
		case c.seen[op] && skip:
			t.Errorf("%s is exercised: remove it from unprovoked", op)
		case !c.seen[op] && !skip:
			t.Errorf("the spec documents %s and no exchange of this test exercised it", op)
		case skip && reason == "":
			t.Errorf("%s is listed as unprovoked without a reason", op)
		}
	}
	for op := range unprovoked {
		if !slices.Contains(c.operations(), op) {
			t.Errorf("unprovoked lists %s, which the spec does not document", op)
		}
	}
	for op := range c.seen {
		if !slices.Contains(c.operations(), op) {
			t.Errorf("the bridge answered %s, which the spec does not document", op)
		}
	}
}

// recorded checks x with no RecordIO body expected and returns it.
func (c *contract) recorded(t *testing.T, x exchange) exchange {
	t.Helper()
	c.check(t, x, nil)
	return x
}

// openGet opens an egress GET, reads n records, and keeps the response open until close.
type getStream struct {
	exchange
	cancel context.CancelFunc
}

func (g *getStream) close() { g.cancel(); g.resp.Body.Close() }

func openGet(t *testing.T, url string, h map[string]string, n int) *getStream {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	for k, v := range h {
		req.Header.Set(k, v)
	}
	resp, err := h1Client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		body, _ := io.ReadAll(resp.Body)
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, body)
	}
	// net/http moves the Trailer header's names into resp.Trailer; put it back for the check.
	var declared []string
	for k := range resp.Trailer {
		declared = append(declared, k)
	}
	if len(declared) > 0 {
		slices.Sort(declared)
		resp.Header.Set("Trailer", strings.Join(declared, ", "))
	}
	var raw bytes.Buffer
	rd := recordio.NewReader(io.TeeReader(resp.Body, &raw))
	timer := time.AfterFunc(30*time.Second, cancel)
	defer timer.Stop()
	for i := 0; i < n; i++ {
		if _, err := rd.Next(); err != nil {
			t.Fatalf("GET %s: record %d: %v", url, i, err)
		}
	}
	// What the reader buffered past the n-th record is cut off: only whole records are kept.
	recs := decodeRecords(t, trimToRecords(raw.Bytes(), n))
	var whole []byte
	for _, r := range recs {
		whole = recordio.AppendRecord(whole, r)
	}
	return &getStream{exchange: exchange{req: req, resp: resp, body: whole, reqRaw: []byte{}}, cancel: cancel}
}

// trimToRecords returns the first n whole records of b.
func trimToRecords(b []byte, n int) []byte {
	off := 0
	for i := 0; i < n; i++ {
		nl := bytes.IndexByte(b[off:], '\n')
		if nl < 0 {
			return b[:off]
		}
		size, err := strconv.Atoi(string(b[off : off+nl]))
		if err != nil || off+nl+1+size > len(b) {
			return b[:off]
		}
		off += nl + 1 + size
	}
	return b[:off]
}

func waitFor(t *testing.T, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatal("condition not met within 30s")
		}
		time.Sleep(50 * time.Millisecond)
	}
}
