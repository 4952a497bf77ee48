package mapping

import (
	"crypto/sha256"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"os"
	"slices"
	"strings"

	"github.com/recordio-bridge/bridge/config"
)

// Authorization errors; the HTTP layer answers them with 401 and 403.
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
	name    string
	hash    [32]byte
	routes  []string
	streams []string
}

func compileTokens(a config.Auth) ([]token, config.Problems) {
	var out []token
	var p config.Problems
	for i, t := range a.Tokens {
		ct := token{name: t.Name, routes: t.Routes, streams: t.Streams}
		if t.SHA256 != "" {
			b, err := hex.DecodeString(t.SHA256)
			if err != nil || len(b) != 32 {
				p = append(p, fmt.Sprintf("auth.tokens[%d].sha256: not 64 hex digits (value not shown)", i))
				continue
			}
			copy(ct.hash[:], b)
		} else {
			b, err := os.ReadFile(t.File)
			if err != nil {
				p = append(p, fmt.Sprintf("auth.tokens[%d].file: %v", i, err))
				continue
			}
			ct.hash = sha256.Sum256([]byte(strings.TrimSpace(string(b))))
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

// Authenticate checks that bearer is a configured token (any token is fine when none are
// configured); its error wraps ErrUnauthenticated.
func (t *Table) Authenticate(bearer string) error {
	_, err := t.Authorize(bearer, Read, "")
	if errors.Is(err, ErrUnauthenticated) {
		return err
	}
	return nil
}

// AuthRequired reports whether requests must carry a bearer token.
func (t *Table) AuthRequired() bool { return len(t.tokens) > 0 }

// Authorize checks the bearer token of a request wanting access to the named route or
// stream. It returns the token's name (for logs) or an error wrapping ErrUnauthenticated
// or ErrForbidden. Tokens are compared by their SHA-256 in constant time, every
// configured token each time. Without configured tokens everything is allowed.
func (t *Table) Authorize(bearer string, access Access, name string) (string, error) {
	if len(t.tokens) == 0 {
		return "", nil
	}
	if bearer == "" {
		return "", fmt.Errorf("%w: send Authorization: Bearer <token>", ErrUnauthenticated)
	}
	h := sha256.Sum256([]byte(bearer))
	found := -1
	for i := range t.tokens {
		if subtle.ConstantTimeCompare(h[:], t.tokens[i].hash[:]) == 1 && found < 0 {
			found = i
		}
	}
	if found < 0 {
		return "", fmt.Errorf("%w: the token is not known", ErrUnauthenticated)
	}
	tk := &t.tokens[found]
	grants, what := tk.routes, "route"
	if access == Read {
		grants, what = tk.streams, "stream"
	}
	if slices.Contains(grants, "*") || slices.Contains(grants, name) {
		return tk.name, nil
	}
	verb := map[Access]string{Write: "publish to", Read: "read"}[access]
	return tk.name, fmt.Errorf("%w: token %s may not %s %s %s", ErrForbidden, tk.name, verb, what, name)
}
