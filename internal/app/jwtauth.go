package app

import (
	"github.com/recordio-bridge/bridge/internal/admission"
	"github.com/recordio-bridge/bridge/telemetry"
)

// identityProvidersDetail adds to /readyz's detail the JWT issuers (auth.jwt) whose
// keys could not be had at the last attempt, with why. It does not make the bridge
// unready: the attempts are made by requests, so a replica taken out of its load
// balancer would never see its provider back, and every replica would be taken out at
// once with it, refusing the static tokens' requests too. Their JWTs are answered 503.
func identityProvidersDetail(auth *admission.Tokens, detail map[string]any) {
	if down := auth.IdentityProviders(); len(down) > 0 {
		detail["identityProviders"] = down
	}
}

// jwksStats are the JWT issuers' key set counters, for the metrics.
func jwksStats() []telemetry.JWKSStats {
	var out []telemetry.JWKSStats
	for _, s := range admission.JWKSStats() {
		out = append(out, telemetry.JWKSStats{Issuer: s.Issuer, Fetches: s.Fetches, FetchErrors: s.FetchErrors,
			RefreshesRefused: s.RefreshesRefused, Verifications: s.Verifications})
	}
	return out
}
