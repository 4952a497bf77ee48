package config

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Duration is a time.Duration written as "30s", "5m", "1h30m".
type Duration time.Duration

func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil || v < 0 {
		return fmt.Errorf("line %d: %q is not a duration (write it like 30s, 5m or 1h)", n.Line, n.Value)
	}
	*d = Duration(v)
	return nil
}

// D returns the duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// Size is a byte count written as 4096, "64KiB", "4MiB" or "1GiB".
type Size int64

func (s *Size) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseSize(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*s = Size(v)
	return nil
}

// ParseSize reads a byte count with an optional KiB, MiB or GiB suffix.
func ParseSize(s string) (int64, error) {
	t := strings.TrimSpace(s)
	mult := int64(1)
	for _, u := range []struct {
		suffix string
		mult   int64
	}{{"GiB", 1 << 30}, {"MiB", 1 << 20}, {"KiB", 1 << 10}, {"B", 1}} {
		if strings.HasSuffix(t, u.suffix) {
			t, mult = strings.TrimSpace(strings.TrimSuffix(t, u.suffix)), u.mult
			break
		}
	}
	v, err := strconv.ParseInt(t, 10, 64)
	if err != nil || v < 0 || v > (1<<62)/mult {
		return 0, fmt.Errorf("%q is not a size (write it like 4096, 64KiB, 4MiB or 1GiB)", s)
	}
	return v * mult, nil
}

// Secret is a reference to a secret: "env:NAME" or "file:/path". The value itself is
// never written in the configuration, so it cannot leak through it.
type Secret string

// Resolve reads the secret. An empty reference resolves to "".
func (s Secret) Resolve() (string, error) {
	ref := string(s)
	switch {
	case ref == "":
		return "", nil
	case strings.HasPrefix(ref, "env:"):
		name := strings.TrimPrefix(ref, "env:")
		v, ok := os.LookupEnv(name)
		if !ok || v == "" {
			return "", fmt.Errorf("environment variable %s is not set", name)
		}
		return v, nil
	case strings.HasPrefix(ref, "file:"):
		path := strings.TrimPrefix(ref, "file:")
		b, err := os.ReadFile(path)
		if err != nil {
			return "", fmt.Errorf("reading %s: %w", path, err)
		}
		v := strings.TrimSpace(string(b))
		if v == "" {
			return "", fmt.Errorf("%s is empty", path)
		}
		return v, nil
	}
	// The value is not echoed: it may be the secret itself, written inline by mistake.
	return "", errors.New("not a secret reference (value not shown): write env:NAME or file:/path, never the secret itself")
}

// File returns the path of a file: reference ("" otherwise), so a caller can re-read it.
func (s Secret) File() string {
	if p, ok := strings.CutPrefix(string(s), "file:"); ok {
		return p
	}
	return ""
}
