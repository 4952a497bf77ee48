package pulsar

import (
	"encoding/hex"
	"fmt"
	"hash/crc32"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// TopicsPattern selects the persistent topics of one namespace by a regular expression,
// with the Java client's semantics: the expression is matched against the whole topic
// name without its scheme and without a partition's "-partition-N" suffix, so
// "persistent://tenant/ns/orders-.*" matches persistent://tenant/ns/orders-eu and every
// partition of it, and never persistent://tenant/ns/eu-orders-x. System topics
// (__change_events, transaction internals, the pulsar/system namespace) never match.
// The syntax is Go's RE2 (the broker evaluates the same pattern with its own engine).
type TopicsPattern struct {
	raw       string
	namespace string
	re        *regexp.Regexp
}

// ParseTopicsPattern parses "persistent://tenant/namespace/<regex>". The tenant and
// namespace are literal: one pattern discovers the topics of one namespace.
func ParseTopicsPattern(s string) (*TopicsPattern, error) {
	const scheme = "persistent://"
	if !strings.HasPrefix(s, scheme) {
		return nil, fmt.Errorf("%w: topics pattern %q: want persistent://tenant/namespace/<regex>", ErrInvalidTopic, s)
	}
	parts := strings.SplitN(s[len(scheme):], "/", 3)
	if len(parts) != 3 || parts[2] == "" {
		return nil, fmt.Errorf("%w: topics pattern %q: want persistent://tenant/namespace/<regex>", ErrInvalidTopic, s)
	}
	for _, name := range parts[:2] {
		if !plainName(name) {
			return nil, fmt.Errorf("%w: topics pattern %q: the tenant and namespace must be literal names (one namespace per pattern), not %q",
				ErrInvalidTopic, s, name)
		}
	}
	// Java strips the scheme from the pattern and matches what is left, tenant and
	// namespace included, against the whole name (Matcher.matches).
	re, err := regexp.Compile(`^(?:` + s[len(scheme):] + `)$`)
	if err != nil {
		return nil, fmt.Errorf("%w: topics pattern %q does not compile: %w", ErrInvalidTopic, s, err)
	}
	return &TopicsPattern{raw: s, namespace: parts[0] + "/" + parts[1], re: re}, nil
}

// plainName reports whether s is a tenant or namespace name with no regular-expression
// syntax in it ('.' is allowed in names and matches itself).
func plainName(s string) bool {
	if s == "" {
		return false
	}
	for _, r := range s {
		switch {
		case r >= 'a' && r <= 'z', r >= 'A' && r <= 'Z', r >= '0' && r <= '9', r == '-', r == '_', r == '.', r == '=', r == ':':
		default:
			return false
		}
	}
	return true
}

// String returns the pattern as configured.
func (p *TopicsPattern) String() string { return p.raw }

// Namespace returns the pattern's "tenant/namespace".
func (p *TopicsPattern) Namespace() string { return p.namespace }

// Matches reports whether the fully qualified topic (or partition) name matches.
func (p *TopicsPattern) Matches(topic string) bool {
	base, _ := splitPartition(topic)
	rest, ok := strings.CutPrefix(base, "persistent://")
	if !ok || isSystemTopic(rest) {
		return false
	}
	return p.re.MatchString(rest)
}

// splitPartition returns the topic a partition belongs to and its index (-1 for a name
// that is not a partition's).
func splitPartition(name string) (string, int) {
	i := strings.LastIndex(name, "-partition-")
	if i < 0 {
		return name, -1
	}
	n, err := strconv.Atoi(name[i+len("-partition-"):])
	if err != nil || n < 0 || strconv.Itoa(n) != name[i+len("-partition-"):] {
		return name, -1
	}
	return name[:i], n
}

// isSystemTopic reports whether "tenant/ns/local" is one of the broker's own topics, as
// the Java client's SystemTopicNames has them: never consumed by a pattern.
func isSystemTopic(name string) bool {
	parts := strings.SplitN(name, "/", 3)
	if len(parts) != 3 {
		return false
	}
	if parts[0] == "pulsar" && parts[1] == "system" {
		return true
	}
	local := parts[2]
	return strings.HasPrefix(local, "__") || strings.Contains(local, "-__transaction")
}

// topicsHash is the hash the broker gives a topic list (PIP-145's topics_hash): CRC32C
// of the sorted names joined by commas, as Guava prints it (the sum's bytes, lowest
// first, in hex).
func topicsHash(topics []string) string {
	sorted := slices.Clone(topics)
	slices.Sort(sorted)
	sum := crc32.Checksum([]byte(strings.Join(sorted, ",")), crc32.MakeTable(crc32.Castagnoli))
	return hex.EncodeToString([]byte{byte(sum), byte(sum >> 8), byte(sum >> 16), byte(sum >> 24)})
}
