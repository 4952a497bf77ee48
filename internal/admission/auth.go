package admission

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/internal/reread"
)

// Authorization errors (Identify's, Authorize's); the HTTP layer answers them with 401
// and 403. (ErrIdentityProviderUnavailable is neither: the token could not be judged.)
var (
	ErrUnauthenticated = errors.New("a valid bearer token is required")
	ErrForbidden       = errors.New("the token does not grant this")
)

// Access is what a request wants to do.
type Access int

const (
	Write Access = iota // publish to a route
	Read                // read (and acknowledge) a stream
)

type token struct {
	name string
	hash [32]byte // of a sha256 token
	// file is a file token's: read again at most every tokenRecheck when a request
	// needs it, so a rotated token is in effect within that time without a restart or
	// a reload.
	file   *reread.Every[[32]byte]
	grants grants
}

// grants are what a token may do, a static token's or a JWT's: publish to the routes,
// read the streams ("*": all of them).
type grants struct {
	routes  []string
	streams []string
}

// allows reports whether the grants cover access to name.
func (g grants) allows(access Access, name string) bool {
	list := g.routes
	if access == Read {
		list = g.streams
	}
	return slices.Contains(list, "*") || slices.Contains(list, name)
}

// forbidden is the ErrForbidden of who (a token's name, a JWT's subject) wanting access to name.
func forbidden(who string, access Access, name string) error {
	verb, what := "publish to", "route"
	if access == Read {
		verb, what = "read", "stream"
	}
	return fmt.Errorf("%w: %s may not %s %s %s", ErrForbidden, who, verb, what, name)
}

// current returns the token's SHA-256 as of now.
func (t *token) current(now time.Time) [32]byte {
	if t.file == nil {
		return t.hash
	}
	return t.file.Get(now)
}

// tokenRecheck is how often a token file is read again; a variable for tests.
var tokenRecheck = time.Second

// maxTokenFile bounds what is read of a token file.
const maxTokenFile = 64 << 10

// readToken reads the token a file holds (a mounted Secret), as its SHA-256.
func readToken(path string) ([32]byte, error) {
	fh, err := os.Open(path)
	if err != nil {
		return [32]byte{}, err
	}
	defer fh.Close()
	b, err := io.ReadAll(io.LimitReader(fh, maxTokenFile+1))
	switch {
	case err != nil:
		return [32]byte{}, err
	case len(b) > maxTokenFile:
		return [32]byte{}, fmt.Errorf("%s is larger than %d bytes; it is not a token", path, maxTokenFile)
	}
	v := strings.TrimSpace(string(b))
	if v == "" {
		return [32]byte{}, fmt.Errorf("%s is empty", path)
	}
	return sha256.Sum256([]byte(v)), nil
}

// Tokens are the compiled auth section: the static tokens and the JWT issuers a request's
// bearer token is checked against. A nil *Tokens, like one with neither, allows
// everything. It is safe for concurrent use.
type Tokens struct {
	tokens []token
	jwt    []jwtIssuer // auth.jwt
}

// Compile compiles the auth section: every problem (a token file that cannot be read, a
// hash that is not one) is reported.
func Compile(a config.Auth) (*Tokens, error) {
	tokens, p := compileTokens(a)
	if len(p) > 0 {
		return nil, p
	}
	return &Tokens{tokens: tokens, jwt: compileJWT(a)}, nil
}

func compileTokens(a config.Auth) ([]token, config.Problems) {
	var out []token
	var p config.Problems
	now := time.Now()
	for i, t := range a.Tokens {
		ct := token{name: t.Name, grants: grants{routes: t.Routes, streams: t.Streams}}
		if t.SHA256 != "" {
			b, err := hex.DecodeString(t.SHA256)
			if err != nil || len(b) != 32 {
				p.Addf("auth.tokens[%d].sha256: not 64 hex digits (value not shown)", i)
				continue
			}
			copy(ct.hash[:], b)
		} else {
			path := t.File
			f, err := reread.New(tokenRecheck, now, func() ([32]byte, error) { return readToken(path) })
			if err != nil {
				p.Addf("auth.tokens[%d].file: %v", i, err)
				continue
			}
			ct.file = f
		}
		out = append(out, ct)
	}
	return out, p
}

// BearerToken returns the token of an "Authorization: Bearer <token>" header, or "".
func BearerToken(h http.Header) string {
	v := h.Get("Authorization")
	if len(v) > 7 && strings.EqualFold(v[:7], "bearer ") {
		return strings.TrimSpace(v[7:])
	}
	return ""
}

// AuthRequired reports whether requests must carry a bearer token.
func (t *Tokens) AuthRequired() bool { return t != nil && (len(t.tokens) > 0 || len(t.jwt) > 0) }

// Caller is who a request's bearer token is and what it may do: found once per
// request by Identify (the JWT's signature verified once), then asked for each access.
type Caller struct {
	who    string // a token's name, a JWT's issuer name and subject; "" when auth is off
	open   bool   // no auth configured: everything is allowed
	static bool   // a configured token (not a JWT)
	grants grants
}

// Who is the caller for logs: a token's name, or a JWT's subject and issuer name.
func (c *Caller) Who() string { return c.who }

// Authorize checks that the caller may have access to the named route or stream; its
// error wraps ErrForbidden.
func (c *Caller) Authorize(access Access, name string) error {
	if c.open || c.grants.allows(access, name) {
		return nil
	}
	if c.static {
		return forbidden("token "+c.who, access, name)
	}
	return forbidden("the token of "+c.who, access, name)
}

// Identify finds who the bearer token is: a configured token or a JWT of a configured
// issuer (auth.jwt), whose signature and claims are verified. Its error wraps
// ErrUnauthenticated (a *TokenError when a token was given and is not valid), or is a
// *ProviderError (ErrIdentityProviderUnavailable) when the issuer's keys cannot be had.
// Tokens are compared by their SHA-256 in constant time, every configured token each
// time. Without tokens or issuers everyone is allowed everything.
func (t *Tokens) Identify(bearer string) (*Caller, error) {
	if !t.AuthRequired() {
		return &Caller{open: true}, nil
	}
	if bearer == "" {
		return nil, fmt.Errorf("%w: send Authorization: Bearer <token>", ErrUnauthenticated)
	}
	h := sha256.Sum256([]byte(bearer))
	found := -1
	now := time.Now()
	for i := range t.tokens {
		th := t.tokens[i].current(now)
		if subtle.ConstantTimeCompare(h[:], th[:]) == 1 && found < 0 {
			found = i
		}
	}
	if found >= 0 {
		tk := &t.tokens[found]
		return &Caller{who: tk.name, static: true, grants: tk.grants}, nil
	}
	if len(t.jwt) == 0 || !looksLikeJWT(bearer) {
		return nil, &TokenError{Description: "the token is not known"}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	v, err := verifyJWT(ctx, t.jwt, bearer, now)
	if err != nil {
		return nil, err
	}
	return &Caller{who: fmt.Sprintf("subject %q of issuer %s", v.subject, v.issuer.cfg.Name), grants: v.grants}, nil
}

// Authorize is Identify and Caller.Authorize: who the token is (for logs) or the
// error of either.
func (t *Tokens) Authorize(bearer string, access Access, name string) (string, error) {
	c, err := t.Identify(bearer)
	if err != nil {
		return "", err
	}
	return c.who, c.Authorize(access, name)
}

// IdentityProviders reports, by issuer name, the issuers whose keys could not be had
// at the last attempt, with why (URLs included: for /readyz and logs, not for callers).
func (t *Tokens) IdentityProviders() map[string]string {
	if t == nil {
		return nil
	}
	var out map[string]string
	for i := range t.jwt {
		if err := t.jwt[i].keys.status(); err != nil {
			if out == nil {
				out = map[string]string{}
			}
			out[t.jwt[i].cfg.Name] = err.Error()
		}
	}
	return out
}
