package client

import (
	"bytes"
	"strings"
)

// parseCompact reads the receipts as the bridge writes them, one per record: no spaces,
// keys among seq, status, topic, messageId, sequence and duplicate, numbers of plain
// digits, strings of ASCII without escapes. It scans them in place, in one pass, and
// allocates only the message id (a topic equal to the previous receipt's is shared). On
// anything else it returns false, having perhaps set some fields, and parse reads the
// receipt again from the start with the general scanner: the two agree on every receipt
// this one accepts. With ids set, the message ids come from it.
func (w *wireReceipt) parseCompact(b []byte) bool {
	if len(b) < 2 || b[0] != '{' {
		return false
	}
	i := 1
	if b[i] == '}' {
		return true
	}
	for {
		if i >= len(b) || b[i] != '"' {
			return false
		}
		var ok bool
		switch k := b[i+1:]; { // constant comparisons: loads, not calls
		case len(k) >= 5 && string(k[:5]) == `seq":`:
			var n uint64
			if n, i, ok = compactUint(b, i+6); !ok {
				return false
			}
			w.seq = int64(n)
		case len(k) >= 8 && string(k[:8]) == `status":`:
			var n uint64
			if n, i, ok = compactUint(b, i+9); !ok {
				return false
			}
			w.status = int(n)
		case len(k) >= 7 && string(k[:7]) == `topic":`:
			var s []byte
			if s, i, ok = compactString(b, i+8, w.lastTopic); !ok {
				return false
			}
			if w.lastTopic == "" || string(s) != w.lastTopic { // compared without a copy
				w.lastTopic = string(s)
			}
			w.topic = w.lastTopic // one topic's receipts share its name
		case len(k) >= 11 && string(k[:11]) == `messageId":`:
			var s []byte
			if s, i, ok = compactString(b, i+12, ""); !ok {
				return false
			}
			if w.ids != nil {
				w.messageID = w.ids.string(s)
			} else {
				w.messageID = string(s)
			}
		case len(k) >= 10 && string(k[:10]) == `sequence":`:
			if w.sequence, i, ok = compactUint(b, i+11); !ok {
				return false
			}
			w.hasSequence = true
		case len(k) >= 11 && string(k[:11]) == `duplicate":`:
			if w.duplicate, i, ok = compactBool(b, i+12); !ok {
				return false
			}
		default:
			return false
		}
		// compactUint, compactString and compactBool end at a ',' or '}'.
		if b[i] == '}' {
			return true
		}
		i++
	}
}

// compactUint reads 1 to 18 digits at b[i] (no overflow is possible), followed by ',' or
// '}', whose index it returns.
func compactUint(b []byte, i int) (uint64, int, bool) {
	var n uint64
	j := i
	for ; j < len(b) && j-i <= 18; j++ {
		c := b[j]
		if c < '0' || c > '9' {
			break
		}
		n = n*10 + uint64(c-'0')
	}
	if j == i || j-i > 18 || !compactEnd(b, j) {
		return 0, 0, false
	}
	return n, j, true
}

// compactString reads a string of ASCII without escapes at b[i], followed by ',' or '}',
// and returns its body and the index of that ',' or '}'. A body equal to known, a string
// read before (valid UTF-8 without a backslash), is not checked again.
func compactString(b []byte, i int, known string) ([]byte, int, bool) {
	if i >= len(b) || b[i] != '"' {
		return nil, 0, false
	}
	n := bytes.IndexByte(b[i+1:], '"')
	if n < 0 {
		return nil, 0, false
	}
	s := b[i+1 : i+1+n]
	if known == "" || string(s) != known {
		for _, c := range s {
			if c == '\\' || c >= 0x80 {
				return nil, 0, false
			}
		}
	}
	j := i + 2 + n
	if !compactEnd(b, j) {
		return nil, 0, false
	}
	return s, j, true
}

func compactBool(b []byte, i int) (bool, int, bool) {
	switch {
	case bytes.HasPrefix(b[i:], []byte("true")) && compactEnd(b, i+4):
		return true, i + 4, true
	case bytes.HasPrefix(b[i:], []byte("false")) && compactEnd(b, i+5):
		return false, i + 5, true
	}
	return false, 0, false
}

func compactEnd(b []byte, i int) bool {
	return i < len(b) && (b[i] == ',' || b[i] == '}')
}

// idArena makes the receipts' message ids, one string per record, out of shared 1 KiB
// blocks: one allocation for dozens of ids instead of one each (with the collector's
// share of it, the largest cost left per receipt). A strings.Builder only ever appends,
// so the strings it returned never change; an id a caller keeps keeps its block (1 KiB at
// most) alive.
type idArena struct {
	b strings.Builder
}

const idArenaBlock = 1 << 10

func (a *idArena) string(s []byte) string {
	if a.b.Cap()-a.b.Len() < len(s) {
		a.b = strings.Builder{} // the old block stays with the strings made from it
		a.b.Grow(max(idArenaBlock, len(s)))
	}
	n := a.b.Len()
	a.b.Write(s)
	return a.b.String()[n:]
}
