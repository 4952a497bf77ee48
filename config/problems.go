package config

import (
	"fmt"
	"regexp"
	"sort"
	"strings"
)

// Problem is one thing wrong with a configuration: the full path of the key at fault
// (listen.ops, routes[2].rules[0].topic; empty when no key is), the line the key is
// written on (0 when the file does not write it: a default, or a key that is missing),
// and what is wrong.
type Problem struct {
	Path    string `json:"path"`
	Line    int    `json:"line"`
	Message string `json:"message"`
}

func (p Problem) String() string {
	var b strings.Builder
	if p.Line > 0 {
		fmt.Fprintf(&b, "line %d: ", p.Line)
	}
	if p.Path != "" {
		b.WriteString(p.Path + ": ")
	}
	b.WriteString(p.Message)
	return b.String()
}

// Problems lists everything wrong with a configuration, one problem a line.
type Problems []Problem

func (p Problems) Error() string {
	lines := make([]string, len(p))
	for i, pr := range p {
		lines[i] = pr.String()
	}
	return strings.Join(lines, "\n")
}

func (p Problems) Unwrap() error { return ErrInvalid }

// keyPath is a key path as the checks write it before the first ": " of a problem.
var keyPath = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]*(\[\d+\])*(\.[A-Za-z][A-Za-z0-9_]*(\[\d+\])*)*$`)

// Problemf formats a problem written "key.path: what is wrong"; a text that does not
// start with a key path is a problem of no key.
func Problemf(format string, args ...any) Problem {
	s := fmt.Sprintf(format, args...)
	if path, msg, ok := strings.Cut(s, ": "); ok && keyPath.MatchString(path) {
		return Problem{Path: path, Message: msg}
	}
	return Problem{Message: s}
}

// Addf appends Problemf(format, args...).
func (p *Problems) Addf(format string, args ...any) { *p = append(*p, Problemf(format, args...)) }

// under reports whether path is at or below the key at.
func under(path, at string) bool {
	return path == at || strings.HasPrefix(path, at+".") || strings.HasPrefix(path, at+"[")
}

// parent is the path one key up ("" above a top-level key).
func parent(path string) string {
	i := strings.LastIndexAny(path, ".[")
	if i < 0 {
		return ""
	}
	return path[:i]
}

// merge puts the checks' problems after the decoding ones, leaving out a check's problem
// about a key whose value could not be decoded (its report would only repeat it: the
// key is missing or still its default), gives each the line of its key or, for a key the
// file leaves out, of the nearest key above it that the file writes, and sorts them by
// line.
func merge(decoding, checks Problems, lines map[string]int) Problems {
	out := append(Problems{}, decoding...)
next:
	for _, c := range checks {
		for _, d := range decoding {
			if c.Path != "" && under(c.Path, d.Path) {
				continue next
			}
		}
		if c.Line == 0 {
			for at := c.Path; at != ""; at = parent(at) {
				if l, ok := lines[at]; ok {
					c.Line = l
					break
				}
			}
		}
		out = append(out, c)
	}
	seen := map[Problem]bool{}
	uniq := out[:0]
	for _, p := range out {
		if !seen[p] {
			seen[p] = true
			uniq = append(uniq, p)
		}
	}
	sort.SliceStable(uniq, func(i, j int) bool {
		li, lj := uniq[i].Line, uniq[j].Line
		if li == 0 || lj == 0 {
			return li != 0 && lj == 0 // problems of no line go last
		}
		return li < lj
	})
	return uniq
}
