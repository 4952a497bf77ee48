package e2e

import (
	"encoding/json"
	"encoding/pem"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"testing"
)

// leakCheck collects what the bridge said (its output, the bodies of its HTTP answers,
// its metrics) and the secrets a test gave it, and fails the test if any of them shows
// one.
type leakCheck struct {
	mu      sync.Mutex
	said    map[string]*strings.Builder // where -> text
	secrets [][2]string                 // what, secret
}

func newLeakCheck() *leakCheck {
	return &leakCheck{said: map[string]*strings.Builder{}}
}

// secret adds a secret; a PEM block adds its base64 lines too (a leak of the key
// without its armour).
func (l *leakCheck) secret(what, v string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if v = strings.TrimSpace(v); v == "" {
		return
	}
	l.secrets = append(l.secrets, [2]string{what, v})
	if b, _ := pem.Decode([]byte(v)); b != nil {
		for i, line := range strings.Split(v, "\n") {
			if len(line) >= 32 && !strings.HasPrefix(line, "-----") {
				l.secrets = append(l.secrets, [2]string{what + " (line " + strconv.Itoa(i+1) + ")", line})
			}
		}
	}
}

// saw adds text the bridge said in where.
func (l *leakCheck) saw(where string, text string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.said[where]
	if b == nil {
		b = &strings.Builder{}
		l.said[where] = b
	}
	b.WriteString(text)
	b.WriteByte('\n')
}

// sawJSON adds v (a receipt, a /readyz answer) as the JSON it arrived as.
func (l *leakCheck) sawJSON(where string, v any) {
	b, _ := json.Marshal(v)
	l.saw(where, string(b))
}

// sawGet fetches url and adds its body.
func (l *leakCheck) sawGet(t testing.TB, where, url string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	l.saw(where, string(b))
}

// check fails t for every secret found in what the bridge said, naming both and
// showing neither, and returns how many bytes were searched for how many secrets.
func (l *leakCheck) check(t testing.TB) (bytes, secrets int) {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	for where, text := range l.said {
		s := text.String()
		bytes += len(s)
		for _, sec := range l.secrets {
			if strings.Contains(s, sec[1]) {
				t.Errorf("%s shows %s", where, sec[0])
			}
		}
	}
	return bytes, len(l.secrets)
}
