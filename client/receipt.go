package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"strconv"
	"strings"
	"unicode/utf8"
)

// wireReceipt is a receipt or the summary of a streamed answer (docs/http-api.md), or a
// refusal's {"status":S,"error":"..."}. Receipts are read one per record, so they are
// scanned by hand: the objects are flat, and encoding/json's reflection would cost more
// than the rest of the client together. A string with escapes is unquoted by
// encoding/json.
type wireReceipt struct {
	summary     bool
	seq         int64
	status      int
	topic       string
	messageID   string
	sequence    uint64
	hasSequence bool
	duplicate   bool
	err         string
	retryAfter  int
	resume      int64
	hasResume   bool
	lastTopic   string   // the previous receipt's topic when its JSON is its bytes, kept across parse calls
	ids         *idArena // where message ids are made, kept across parse calls; nil: one allocation each
}

var errReceiptSyntax = errors.New("not a flat JSON object")

func (w *wireReceipt) parse(b []byte) error {
	*w = wireReceipt{seq: -1, lastTopic: w.lastTopic, ids: w.ids}
	if w.parseCompact(b) {
		return nil
	}
	return w.parseGeneral(b)
}

// parseGeneral reads any flat JSON object, with spaces, escapes and fields a receipt
// does not have.
func (w *wireReceipt) parseGeneral(b []byte) error {
	*w = wireReceipt{seq: -1, lastTopic: w.lastTopic, ids: w.ids}
	i := skipSpace(b, 0)
	if i >= len(b) || b[i] != '{' {
		return errReceiptSyntax
	}
	i = skipSpace(b, i+1)
	if i < len(b) && b[i] == '}' {
		return nil
	}
	for {
		key, next, err := scanKey(b, i)
		if err != nil {
			return err
		}
		i = skipSpace(b, next)
		if i >= len(b) || b[i] != ':' {
			return errReceiptSyntax
		}
		i = skipSpace(b, i+1)
		if i >= len(b) {
			return errReceiptSyntax
		}
		var raw []byte
		start := i
		switch c := b[i]; {
		case c == '"':
			next, err = skipString(b, i)
			if err != nil {
				return err
			}
			raw, i = b[start:next], next
		case c == '{' || c == '[':
			next, err = skipComposite(b, i)
			if err != nil {
				return err
			}
			raw, i = b[start:next], next
		default:
			for i < len(b) && b[i] != ',' && b[i] != '}' && b[i] != ' ' && b[i] != '\n' && b[i] != '\t' && b[i] != '\r' {
				i++
			}
			raw = b[start:i]
		}
		if err := w.set(key, raw); err != nil {
			return err
		}
		i = skipSpace(b, i)
		if i >= len(b) {
			return errReceiptSyntax
		}
		if b[i] == '}' {
			return nil
		}
		if b[i] != ',' {
			return errReceiptSyntax
		}
		i = skipSpace(b, i+1)
	}
}

func (w *wireReceipt) set(key []byte, raw []byte) error {
	var err error
	switch string(key) { // compared without a copy
	case "summary":
		w.summary = string(raw) == "true"
	case "seq":
		w.seq, err = strconv.ParseInt(string(raw), 10, 64)
	case "status":
		w.status, err = strconv.Atoi(string(raw))
	case "topic":
		if len(raw) >= 2 && raw[0] == '"' && w.lastTopic != "" && string(raw[1:len(raw)-1]) == w.lastTopic {
			w.topic = w.lastTopic // one topic's receipts share its name
		} else {
			w.topic, err = unquote(raw)
			w.lastTopic = ""
			if strings.IndexByte(w.topic, '\\') < 0 {
				// Shared only when its JSON is its own bytes: valid UTF-8 (as every
				// decoded string is) with no backslash, so no escape can read the same.
				w.lastTopic = w.topic
			}
		}
	case "messageId":
		w.messageID, err = unquote(raw)
	case "sequence":
		w.sequence, err = strconv.ParseUint(string(raw), 10, 64)
		w.hasSequence = err == nil
	case "duplicate":
		w.duplicate = string(raw) == "true"
	case "error":
		w.err, err = unquote(raw)
	case "retryAfter":
		w.retryAfter, err = strconv.Atoi(string(raw))
	case "resumeSequence":
		w.resume, err = strconv.ParseInt(string(raw), 10, 64)
		w.hasResume = err == nil
	}
	if err != nil {
		return errors.New("field " + strconv.Quote(string(key)) + ": " + err.Error())
	}
	return nil
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\n' || b[i] == '\t' || b[i] == '\r') {
		i++
	}
	return i
}

// scanKey returns the key at b[i] (its bytes between the quotes; a key with escapes is
// unquoted) and the index after it.
func scanKey(b []byte, i int) ([]byte, int, error) {
	next, err := skipString(b, i)
	if err != nil {
		return nil, 0, err
	}
	raw := b[i:next]
	if bytes.IndexByte(raw, '\\') < 0 {
		return raw[1 : len(raw)-1], next, nil
	}
	s, err := unquote(raw)
	return []byte(s), next, err
}

// skipString returns the index after the string that starts at b[i].
func skipString(b []byte, i int) (int, error) {
	if i >= len(b) || b[i] != '"' {
		return 0, errReceiptSyntax
	}
	for j := i + 1; j < len(b); j++ {
		switch b[j] {
		case '\\':
			j++
		case '"':
			return j + 1, nil
		}
	}
	return 0, errReceiptSyntax
}

func unquote(raw []byte) (string, error) {
	if len(raw) < 2 || raw[0] != '"' {
		if string(raw) == "null" {
			return "", nil
		}
		return "", errReceiptSyntax
	}
	body := raw[1 : len(raw)-1]
	if bytes.IndexByte(body, '\\') >= 0 || !utf8.Valid(body) {
		var s string // escapes, or bytes encoding/json replaces with U+FFFD
		err := json.Unmarshal(raw, &s)
		return s, err
	}
	return string(body), nil
}

// skipComposite skips an object or array value (not one a receipt has; tolerated).
func skipComposite(b []byte, i int) (int, error) {
	depth := 0
	for ; i < len(b); i++ {
		switch b[i] {
		case '"':
			next, err := skipString(b, i)
			if err != nil {
				return 0, err
			}
			i = next - 1
		case '{', '[':
			depth++
		case '}', ']':
			depth--
			if depth == 0 {
				return i + 1, nil
			}
		}
	}
	return 0, errReceiptSyntax
}
