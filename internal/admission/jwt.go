package admission

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"github.com/recordio-bridge/bridge/config"
)

// TokenError is an ErrUnauthenticated for a bearer token that was given but is not
// valid (RFC 6750's invalid_token); Description says why, without the token.
type TokenError struct{ Description string }

func (e *TokenError) Error() string { return ErrUnauthenticated.Error() + ": " + e.Description }
func (e *TokenError) Unwrap() error { return ErrUnauthenticated }

// Challenge is the WWW-Authenticate value answering err (an ErrUnauthenticated): with
// error="invalid_token" and its description when a token was given and refused.
func Challenge(err error) string {
	var te *TokenError
	if errors.As(err, &te) {
		return fmt.Sprintf(`Bearer realm="recordio-bridge", error="invalid_token", error_description=%q`, strings.ReplaceAll(te.Description, `"`, `'`))
	}
	return `Bearer realm="recordio-bridge"`
}

// jwtLeeway is the clock skew allowed on exp, nbf and iat.
const jwtLeeway = 30 * time.Second

// jwtIssuer verifies the JWTs of one configured issuer.
type jwtIssuer struct {
	cfg  config.JWTIssuer
	algs []jose.SignatureAlgorithm
	keys *keySource
}

func compileJWT(a config.Auth) []jwtIssuer {
	out := make([]jwtIssuer, 0, len(a.JWT))
	for _, j := range a.JWT {
		ji := jwtIssuer{cfg: j, keys: sourceFor(j)}
		for _, alg := range j.EffectiveAlgorithms() {
			ji.algs = append(ji.algs, jose.SignatureAlgorithm(alg))
		}
		out = append(out, ji)
	}
	return out
}

// looksLikeJWT reports whether a bearer token has a JWS's three parts.
func looksLikeJWT(s string) bool { return strings.Count(s, ".") == 2 }

// verifiedJWT is what a valid token says.
type verifiedJWT struct {
	issuer  *jwtIssuer
	subject string
	grants  grants
}

// verifyJWT checks raw against the configured issuers: the one its (unverified) iss
// names verifies the signature with its JWKS, then iss, aud, exp, nbf and iat (with
// jwtLeeway). Its errors are *TokenError, or *ProviderError when the issuer's keys
// cannot be had.
func verifyJWT(ctx context.Context, issuers []jwtIssuer, raw string, now time.Time) (*verifiedJWT, error) {
	var all []jose.SignatureAlgorithm
	for i := range issuers {
		all = append(all, issuers[i].algs...)
	}
	tok, err := jwt.ParseSigned(raw, all)
	if err != nil {
		return nil, &TokenError{Description: "not a JWT signed with an accepted algorithm: " + err.Error()}
	}
	var unverified jwt.Claims
	if err := tok.UnsafeClaimsWithoutVerification(&unverified); err != nil {
		return nil, &TokenError{Description: "its claims do not parse"}
	}
	var is *jwtIssuer
	for i := range issuers {
		if issuers[i].cfg.Issuer == unverified.Issuer {
			is = &issuers[i]
			break
		}
	}
	if is == nil {
		return nil, &TokenError{Description: fmt.Sprintf("issuer %q is not trusted", unverified.Issuer)}
	}
	alg := jose.SignatureAlgorithm(tok.Headers[0].Algorithm)
	if !containsAlg(is.algs, alg) {
		return nil, &TokenError{Description: fmt.Sprintf("algorithm %s is not accepted for issuer %s", alg, is.cfg.Name)}
	}
	payload, err := is.keys.VerifySignature(ctx, raw)
	if errors.Is(err, errSignature) {
		return nil, &TokenError{Description: fmt.Sprintf("issuer %s: signature not verified: %v", is.cfg.Name, err)}
	}
	if err != nil {
		return nil, &ProviderError{Issuer: is.cfg.Name, Err: err}
	}
	var claims jwt.Claims
	var rest map[string]json.RawMessage
	if json.Unmarshal(payload, &claims) != nil || json.Unmarshal(payload, &rest) != nil {
		return nil, &TokenError{Description: "its claims do not parse"}
	}
	if claims.Expiry == nil {
		return nil, &TokenError{Description: "it has no exp"}
	}
	if err := claims.ValidateWithLeeway(jwt.Expected{Issuer: is.cfg.Issuer, AnyAudience: jwt.Audience{is.cfg.Audience}, Time: now}, jwtLeeway); err != nil {
		return nil, &TokenError{Description: fmt.Sprintf("issuer %s: %v", is.cfg.Name, describeClaimsError(err, is.cfg.Audience))}
	}
	g, err := parseGrants(rest[is.cfg.EffectiveGrantsClaim()])
	if err != nil {
		return nil, &TokenError{Description: fmt.Sprintf("claim %s: %v", is.cfg.EffectiveGrantsClaim(), err)}
	}
	return &verifiedJWT{issuer: is, subject: claims.Subject, grants: g}, nil
}

func containsAlg(algs []jose.SignatureAlgorithm, a jose.SignatureAlgorithm) bool {
	for _, x := range algs {
		if x == a {
			return true
		}
	}
	return false
}

func describeClaimsError(err error, audience string) string {
	switch {
	case errors.Is(err, jwt.ErrExpired):
		return "the token has expired"
	case errors.Is(err, jwt.ErrNotValidYet):
		return "the token is not valid yet (nbf)"
	case errors.Is(err, jwt.ErrIssuedInTheFuture):
		return "the token is issued in the future (iat)"
	case errors.Is(err, jwt.ErrInvalidAudience):
		return fmt.Sprintf("the token is not for audience %s", audience)
	case errors.Is(err, jwt.ErrInvalidIssuer):
		return "the token's issuer does not match"
	}
	return err.Error()
}

// parseGrants reads a grants claim: a space-separated string or an array of strings,
// each publish:<route> or read:<stream> (others, such as an identity provider's own
// scopes, are ignored). A missing claim grants nothing.
func parseGrants(raw json.RawMessage) (grants, error) {
	var g grants
	if len(raw) == 0 {
		return g, nil
	}
	var items []string
	var s string
	if err := json.Unmarshal(raw, &s); err == nil {
		items = strings.Fields(s)
	} else if err := json.Unmarshal(raw, &items); err != nil {
		return g, errors.New("neither a string nor an array of strings")
	}
	for _, it := range items {
		if r, ok := strings.CutPrefix(it, "publish:"); ok && r != "" {
			g.routes = append(g.routes, r)
		} else if st, ok := strings.CutPrefix(it, "read:"); ok && st != "" {
			g.streams = append(g.streams, st)
		}
	}
	return g, nil
}
