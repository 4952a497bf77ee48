package config

import (
	"context"
	"fmt"
	"path/filepath"
	"reflect"
	"strings"
	"time"

	"github.com/fsnotify/fsnotify"
)

// Watch calls changed whenever the file at path may have changed: written in place,
// replaced by a rename, or swapped the way Kubernetes updates a mounted ConfigMap (the
// directory's ..data symlink is replaced). It watches the directory, not the file, so
// replacements are seen, but only events on the file itself and on ..data count: other
// files in the directory (a log file written there) are ignored. Bursts of events are
// merged over settle. It returns when ctx ends, or at once if the directory cannot be
// watched.
func Watch(ctx context.Context, path string, settle time.Duration, changed func()) error {
	return watch(ctx, path, settle, changed, watchHooks{})
}

// watchHooks tell a test when the watch is set up and when each event was judged.
type watchHooks struct {
	ready func()
	seen  func(name string, counted bool)
}

func watch(ctx context.Context, path string, settle time.Duration, changed func(), hooks watchHooks) error {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("watching %s: %w", path, err)
	}
	defer w.Close()
	path = filepath.Clean(path)
	dir := filepath.Dir(path)
	if err := w.Add(dir); err != nil {
		return fmt.Errorf("watching %s: %w", dir, err)
	}
	seen := hooks.seen
	if seen == nil {
		seen = func(string, bool) {}
	}
	if hooks.ready != nil {
		hooks.ready()
	}
	var timer *time.Timer
	var fire <-chan time.Time
	for {
		select {
		case <-ctx.Done():
			if timer != nil {
				timer.Stop()
			}
			return nil
		case ev, ok := <-w.Events:
			if !ok {
				return nil
			}
			if ev.Op == fsnotify.Chmod || !concerns(path, ev.Name) {
				seen(ev.Name, false)
				continue
			}
			seen(ev.Name, true)
			if timer == nil {
				timer = time.NewTimer(settle)
			} else {
				timer.Reset(settle)
			}
			fire = timer.C
		case err, ok := <-w.Errors:
			if !ok {
				return nil
			}
			_ = err // an overflow: treat it as a change
			if timer == nil {
				timer = time.NewTimer(settle)
			} else {
				timer.Reset(settle)
			}
			fire = timer.C
		case <-fire:
			fire = nil
			changed()
		}
	}
}

// concerns reports whether an event on name (in path's directory) may change the file
// at path: an event on the file itself, or on the ..data symlink a Kubernetes volume
// swaps to update every file at once.
func concerns(path, name string) bool {
	name = filepath.Clean(name)
	return name == path || filepath.Base(name) == "..data"
}

// RestartNeeded lists, one line per key, what differs between a running configuration
// and a new one but only takes effect after a restart.
func RestartNeeded(old, cur Config) []string {
	var out []string
	diff := func(key string, a, b any) {
		if !reflect.DeepEqual(a, b) {
			out = append(out, fmt.Sprintf("%s: changed from %v to %v; takes effect after a restart", key, show(a), show(b)))
		}
	}
	diff("listen.data", old.Listen.Data, cur.Listen.Data)
	diff("listen.ops", old.Listen.Ops, cur.Listen.Ops)
	diff("listen.tls", old.Listen.TLS, cur.Listen.TLS)
	diff("pulsar.url", old.Pulsar.URL, cur.Pulsar.URL)
	diff("pulsar.token", old.Pulsar.Token, cur.Pulsar.Token)
	diff("pulsar.oauth2", old.Pulsar.OAuth2, cur.Pulsar.OAuth2)
	diff("pulsar.tls", old.Pulsar.TLS, cur.Pulsar.TLS)
	diff("pulsar.operationTimeout", old.Pulsar.OperationTimeout, cur.Pulsar.OperationTimeout)
	diff("pulsar.keepAlive", old.Pulsar.KeepAlive, cur.Pulsar.KeepAlive)
	diff("pulsar.writeTimeout", old.Pulsar.WriteTimeout, cur.Pulsar.WriteTimeout)
	diff("pulsar.compression", old.Pulsar.Compression, cur.Pulsar.Compression)
	diff("pulsar.producerIdleTimeout", old.Pulsar.ProducerIdleTimeout, cur.Pulsar.ProducerIdleTimeout)
	diff("pulsar.namedStreamAccessMode", old.Pulsar.NamedStreamAccessMode, cur.Pulsar.NamedStreamAccessMode)
	diff("ingress.publishTimeout", old.Ingress.PublishTimeout, cur.Ingress.PublishTimeout)
	diff("pulsar.maxProducers", old.Pulsar.MaxProducers, cur.Pulsar.MaxProducers)
	diff("memory.budget", old.Memory.Budget, cur.Memory.Budget)
	diff("memory.limit", old.Memory.Limit, cur.Memory.Limit)
	// Tracing is set up once, at start-up: every key of the section, including keys added
	// later, needs a restart.
	ot, ct := reflect.ValueOf(old.Tracing), reflect.ValueOf(cur.Tracing)
	for i := range ot.NumField() {
		if ot.Type().Field(i).Type == reflect.TypeFor[Removed]() {
			continue // refused by Validate: never in a configuration that loads
		}
		name, _, _ := strings.Cut(ot.Type().Field(i).Tag.Get("yaml"), ",")
		diff("tracing."+name, ot.Field(i).Interface(), ct.Field(i).Interface())
	}
	return out
}

func show(v any) string {
	switch x := v.(type) {
	case Secret:
		return fmt.Sprintf("%q", string(x)) // a reference, never the secret
	case Duration:
		return x.D().String()
	case string:
		return fmt.Sprintf("%q", x)
	}
	return fmt.Sprintf("%+v", v)
}
