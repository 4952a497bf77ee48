// Command bridge is a sidecar that turns RecordIO HTTP streams into Apache Pulsar
// topics and back. It parses the sub-commands' flags and calls internal/app, which is
// the bridge.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"syscall"

	"go.opentelemetry.io/otel"

	"github.com/recordio-bridge/bridge/config"
	"github.com/recordio-bridge/bridge/internal/app"
	"github.com/recordio-bridge/bridge/telemetry"
)

// Set at link time: -ldflags "-X main.version=v1.2.3 -X main.commit=abc".
var (
	version = "dev"
	commit  = ""
)

const usage = `bridge: RecordIO HTTP streams into Apache Pulsar topics and back.

Usage:
  bridge run -config FILE        serve ingress and the operations endpoints (reloads FILE on change and on SIGHUP)
  bridge validate -config FILE   check a configuration file exactly as start-up would, without binding
                 [-o text|json]  every problem at once, each with its key path and line
  bridge publish ROUTE [FILE...] publish JSON lines (or -format recordio|raw) from FILEs or stdin to a route
                                 [-url URL] [-stream-name NAME [-sequence N]]; each refusal named by its line
  bridge tail STREAM             print a stream's records as JSON lines (or -o recordio|envelope)
                                 [-url URL] [-n N] [-ack client] [-position earliest|latest]; Ctrl-C ends it
  bridge version                 print the version and build information
  bridge help                    this text

"bridge COMMAND -h" lists a command's flags.
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one sub-command and returns the process exit code:
// 0 on success, 1 when the command failed, 2 on a usage error (publish and tail have
// more: see their usage).
func run(args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	switch args[0] {
	case "version", "-version", "--version":
		return cmdVersion(args[1:], stdout, stderr)
	case "run":
		return cmdRun(args[1:], stdout, stderr)
	case "validate":
		return cmdValidate(args[1:], stdout, stderr)
	case "publish":
		sigs, stop := notifySignals()
		defer stop()
		return cmdPublish(args[1:], os.Stdin, stdout, stderr, os.Getenv, sigs)
	case "tail":
		sigs, stop := notifySignals()
		defer stop()
		return cmdTail(args[1:], stdout, stderr, os.Getenv, sigs)
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "bridge: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
}

// notifySignals delivers SIGINT and SIGTERM to the returned channel instead of ending
// the process, until stop is called.
func notifySignals() (sigs <-chan os.Signal, stop func()) {
	ch := make(chan os.Signal, 2)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	return ch, func() { signal.Stop(ch) }
}

func cmdVersion(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("version", flag.ContinueOnError)
	fs.SetOutput(stderr)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	fmt.Fprintf(stdout, "bridge %s\n", versionString())
	return 0
}

func cmdValidate(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("validate", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "the configuration file to check")
	format := fs.String("o", "text", "text (one problem a line, FILE:LINE: key.path: message) or json (an array of {path, line, message})")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *path == "" || fs.NArg() > 0 || (*format != "text" && *format != "json") {
		fmt.Fprintln(stderr, "bridge validate: usage: bridge validate -config FILE [-o text|json]")
		return 2
	}
	err := app.Validate(*path)
	var probs config.Problems
	if err != nil && !errors.As(err, &probs) {
		probs = config.Problems{{Message: strings.TrimPrefix(err.Error(), config.ErrInvalid.Error()+": ")}}
	}
	if *format == "json" {
		if probs == nil {
			probs = config.Problems{}
		}
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(probs)
	} else if err == nil {
		fmt.Fprintf(stdout, "%s: valid\n", *path)
	} else {
		for _, p := range probs {
			where := *path
			if p.Line > 0 {
				where += ":" + strconv.Itoa(p.Line)
			}
			if p.Path != "" {
				where += ": " + p.Path
			}
			fmt.Fprintf(stderr, "%s: %s\n", where, p.Message)
		}
		fmt.Fprintf(stderr, "bridge validate: %s: %d problem(s)\n", *path, len(probs))
	}
	if err != nil {
		return 1
	}
	return 0
}

func versionString() string {
	rev := revision()
	if rev == "" {
		rev = "unknown"
	}
	return fmt.Sprintf("%s (commit %s, %s, %s/%s)", version, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}

// revision is the commit the binary was built from: the link-time one, else the one
// Go recorded, else "".
func revision() string {
	if commit != "" {
		return commit
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" {
				return s.Value
			}
		}
	}
	return ""
}

func cmdRun(args []string, stdout, stderr io.Writer) int {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	fs.SetOutput(stderr)
	path := fs.String("config", "", "the configuration file (watched, and re-read on SIGHUP)")
	level := fs.String("log-level", "info", "debug, info, warn or error")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *path == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "bridge run: usage: bridge run -config FILE [-log-level info]")
		return 2
	}
	var lv slog.Level
	if err := lv.UnmarshalText([]byte(*level)); err != nil {
		fmt.Fprintf(stderr, "bridge run: -log-level %q is not debug, info, warn or error\n", *level)
		return 2
	}
	log := slog.New(telemetry.NewLogHandler(slog.NewJSONHandler(stderr, &slog.HandlerOptions{Level: lv})))
	// OpenTelemetry's own errors (exports that failed, spans dropped) go to the same log.
	otelLog := log.With("component", "opentelemetry")
	otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { otelLog.Warn("telemetry export problem", "error", err.Error()) }))
	a, err := app.New(app.Options{ConfigPath: *path, Logger: log, Version: version, Revision: revision()})
	if err != nil {
		log.Error("configuration refused", "error", err.Error())
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, syscall.SIGINT)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				_ = a.Reload("SIGHUP")
			}
		}
	}()
	if err := a.Run(ctx); err != nil {
		log.Error("bridge stopped", "error", err.Error())
		return 1
	}
	return 0
}
