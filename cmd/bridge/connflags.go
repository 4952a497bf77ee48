package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"net/url"
	"os"
	"strings"

	"github.com/recordio-bridge/bridge/client"
)

// defaultURL is the bridge's data listener as listen.data leaves it by default.
const defaultURL = "http://127.0.0.1:8080"

// urlEnv names the environment variable that replaces defaultURL, for a shell or a pod
// that always talks to the same bridge.
const urlEnv = "BRIDGE_URL"

// tokenEnv names the environment variable holding a bearer token when -token-file is
// not given: a token on the command line would show in every process listing.
const tokenEnv = "BRIDGE_TOKEN"

// connFlags are the flags bridge publish and bridge tail share: where the bridge is and
// how to present oneself to it.
type connFlags struct {
	url       string
	caFile    string
	certFile  string
	keyFile   string
	tokenFile string
	header    headerFlag
}

func (c *connFlags) register(fs *flag.FlagSet, getenv func(string) string) {
	def := defaultURL
	if v := strings.TrimSpace(getenv(urlEnv)); v != "" {
		def = v
	}
	fs.StringVar(&c.url, "url", def, "the bridge's data listener, https:// with TLS; $"+urlEnv+" replaces the default")
	fs.StringVar(&c.caFile, "ca-file", "", "PEM CA bundle trusted for the bridge's certificate (default: the system's roots)")
	fs.StringVar(&c.certFile, "cert-file", "", "PEM client certificate, with -key-file, for a bridge that asks for one")
	fs.StringVar(&c.keyFile, "key-file", "", "PEM private key of -cert-file")
	fs.StringVar(&c.tokenFile, "token-file", "", "file holding a bearer token, read again before each request (default: $"+tokenEnv+")")
	fs.Var(&c.header, "H", "a request header 'Name: value' (repeatable), e.g. one a route maps to message properties")
}

// newCommandFlags is the flag set of a subcommand that talks to the bridge: its flag
// errors and -h go to stderr, -h with usage, and the connection flags are registered
// into conn.
func newCommandFlags(name, usage string, conn *connFlags, stderr io.Writer, getenv func(string) string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, usage); fs.PrintDefaults() }
	conn.register(fs, getenv)
	return fs
}

// parseCommandFlags parses args as parseInterspersed does. When the command cannot go
// on it returns ok false and the exit status: exitOK after -h, exitUsage after a flag
// error (the flag set has already reported either).
func parseCommandFlags(fs *flag.FlagSet, args []string) (pos []string, exit int, ok bool) {
	pos, err := parseInterspersed(fs, args)
	if errors.Is(err, flag.ErrHelp) {
		return nil, exitOK, false
	}
	if err != nil {
		return nil, exitUsage, false
	}
	return pos, exitOK, true
}

// usageError is a subcommand's report of bad arguments: "bridge NAME: " and the
// problem, then the short usage line synopsis, on stderr; it returns exitUsage.
func usageError(stderr io.Writer, name, synopsis string) func(format string, a ...any) int {
	return func(format string, a ...any) int {
		fmt.Fprintf(stderr, "bridge "+name+": "+format+"\n", a...)
		fmt.Fprintln(stderr, synopsis)
		return exitUsage
	}
}

// endpoint is the URL of path on the bridge: base + "/v1/<kind>/<name>", or base + name
// when name is a path of its own (routes[].path, streams[].path).
func (c *connFlags) endpoint(kind, name string) (string, error) {
	base, err := url.Parse(c.url)
	if err != nil || (base.Scheme != "http" && base.Scheme != "https") || base.Host == "" {
		return "", fmt.Errorf("-url %q: want http://HOST:PORT or https://HOST:PORT", c.url)
	}
	if base.RawQuery != "" || base.Fragment != "" {
		return "", fmt.Errorf("-url %q: the bridge's address only, without a query", c.url)
	}
	if name == "" {
		return "", fmt.Errorf("the %s name is empty", strings.TrimSuffix(kind, "s"))
	}
	prefix := strings.TrimSuffix(base.String(), "/")
	if strings.HasPrefix(name, "/") {
		return prefix + name, nil
	}
	return prefix + "/v1/" + kind + "/" + url.PathEscape(name), nil
}

// credentials are the TLS configuration and bearer token source the flags ask for.
func (c *connFlags) credentials(getenv func(string) string) (*tls.Config, client.TokenSource, error) {
	conf, err := c.tlsConfig()
	if err != nil {
		return nil, nil, err
	}
	tok, err := c.token(getenv)
	if err != nil {
		return nil, nil, err
	}
	return conf, tok, nil
}

// tlsConfig is the TLS the flags ask for, nil when they ask for none (the package's
// default then applies to an https URL).
func (c *connFlags) tlsConfig() (*tls.Config, error) {
	if c.caFile == "" && c.certFile == "" && c.keyFile == "" {
		return nil, nil
	}
	conf := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.caFile != "" {
		pem, err := os.ReadFile(c.caFile)
		if err != nil {
			return nil, fmt.Errorf("-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("-ca-file %s: no PEM certificate in it", c.caFile)
		}
		conf.RootCAs = pool
	}
	if (c.certFile == "") != (c.keyFile == "") {
		return nil, errors.New("-cert-file and -key-file go together")
	}
	if c.certFile != "" {
		pair, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
		if err != nil {
			return nil, fmt.Errorf("-cert-file %s, -key-file %s: %w", c.certFile, c.keyFile, err)
		}
		conf.Certificates = []tls.Certificate{pair}
	}
	return conf, nil
}

// token is the bearer token source the flags ask for: -token-file, read again before
// every request (so a renewed token is used at once), else $BRIDGE_TOKEN, else none.
func (c *connFlags) token(getenv func(string) string) (client.TokenSource, error) {
	if c.tokenFile != "" {
		path := c.tokenFile
		read := func(context.Context) (string, error) {
			b, err := os.ReadFile(path)
			if err != nil {
				return "", fmt.Errorf("-token-file: %w", err)
			}
			tok := strings.TrimSpace(string(b))
			if tok == "" {
				return "", fmt.Errorf("-token-file %s is empty", path)
			}
			return tok, nil
		}
		if _, err := read(context.Background()); err != nil {
			return nil, err
		}
		return client.TokenFunc(read), nil
	}
	if tok := strings.TrimSpace(getenv(tokenEnv)); tok != "" {
		return client.StaticToken(tok), nil
	}
	return nil, nil
}

// headerFlag collects repeated -H 'Name: value' flags.
type headerFlag struct{ h http.Header }

func (f *headerFlag) String() string { return "" }

func (f *headerFlag) Set(s string) error {
	name, value, ok := strings.Cut(s, ":")
	name = strings.TrimSpace(name)
	if !ok || name == "" || strings.ContainsAny(name, " \t") {
		return fmt.Errorf("%q is not 'Name: value'", s)
	}
	if f.h == nil {
		f.h = http.Header{}
	}
	f.h.Add(textproto.CanonicalMIMEHeaderKey(name), strings.TrimSpace(value))
	return nil
}

// parseInterspersed parses fs's flags wherever they stand among the arguments, so
// "bridge tail tasks -n 1" works as "bridge tail -n 1 tasks"; after "--" every argument
// is positional. It returns the positional arguments in order.
func parseInterspersed(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		// flag stops at the first positional argument or after "--", which it drops.
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}
