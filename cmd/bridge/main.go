// Command bridge is a sidecar that turns RecordIO HTTP streams into Apache Pulsar
// topics and back. This file holds the sub-commands and their wiring.
package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"
)

// Set at link time: -ldflags "-X main.version=v1.2.3 -X main.commit=abc".
var (
	version = "dev"
	commit  = ""
)

const usage = `bridge: RecordIO HTTP streams into Apache Pulsar topics and back.

Usage:
  bridge run -config FILE        serve ingress and the operations endpoints (reloads FILE on change and on SIGHUP)
  bridge validate -config FILE   check a configuration file exactly as start-up would
  bridge version                 print the version and build information
  bridge help                    this text
`

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

// run executes one sub-command and returns the process exit code:
// 0 on success, 1 when the command failed, 2 on a usage error.
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
	case "help", "-h", "-help", "--help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "bridge: unknown command %q\n\n%s", args[0], usage)
		return 2
	}
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
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return 2
	}
	if *path == "" || fs.NArg() > 0 {
		fmt.Fprintln(stderr, "bridge validate: usage: bridge validate -config FILE")
		return 2
	}
	if _, err := load(*path); err != nil {
		fmt.Fprintf(stderr, "bridge validate: %v\n", err)
		return 1
	}
	fmt.Fprintf(stdout, "%s: valid\n", *path)
	return 0
}

func versionString() string {
	rev := commit
	if rev == "" {
		if bi, ok := debug.ReadBuildInfo(); ok {
			for _, s := range bi.Settings {
				if s.Key == "vcs.revision" {
					rev = s.Value
				}
			}
		}
	}
	if rev == "" {
		rev = "unknown"
	}
	return fmt.Sprintf("%s (commit %s, %s, %s/%s)", version, rev, runtime.Version(), runtime.GOOS, runtime.GOARCH)
}
