package recordio

import (
	"errors"
	"fmt"
	"mime"
	"sort"
	"strconv"
	"strings"
)

// Media types of RecordIO over HTTP.
const (
	MediaRecordIO = "application/recordio"
	MediaJSON     = "application/json"
	MediaProtobuf = "application/x-protobuf"
)

// Negotiation errors, matched with errors.Is. The HTTP layer maps them to statuses
// (the Mesos rules: ErrNoContentType and ErrMissingMessageContentType 400,
// ErrUnsupportedMediaType 415, ErrNotAcceptable 406).
var (
	ErrNoContentType             = errors.New("recordio: the request has no Content-Type")
	ErrMissingMessageContentType = errors.New("recordio: Content-Type application/recordio needs a Message-Content-Type header")
	ErrUnsupportedMediaType      = errors.New("recordio: unsupported media type")
	ErrNotAcceptable             = errors.New("recordio: no acceptable response media type")
)

// MediaError says which header and value failed negotiation.
type MediaError struct {
	Err    error  // one of the negotiation sentinels
	Header string // the header at fault
	Value  string // its value
	Detail string
}

func (e *MediaError) Error() string {
	msg := e.Err.Error()
	if e.Header != "" {
		msg += fmt.Sprintf(": %s %q", e.Header, e.Value)
	}
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

func (e *MediaError) Unwrap() error { return e.Err }

// RequestFormat is what a request body holds.
type RequestFormat struct {
	Streaming  bool   // the body is a RecordIO stream
	RecordType string // media type of each record; of the whole body when not streaming
}

// ParseRequest applies the Mesos request rules: Content-Type application/recordio marks a
// stream whose records have the Message-Content-Type, which must be one of recordTypes; a
// Content-Type among recordTypes is a single record; Message-Content-Type is refused on a
// non-streaming request.
func ParseRequest(contentType, messageContentType string, recordTypes []string) (RequestFormat, error) {
	if strings.TrimSpace(contentType) == "" {
		return RequestFormat{}, &MediaError{Err: ErrNoContentType, Detail: "send Content-Type: application/recordio with Message-Content-Type, or the type of a single record"}
	}
	mt, _, err := mime.ParseMediaType(contentType)
	if err != nil {
		return RequestFormat{}, &MediaError{Err: ErrUnsupportedMediaType, Header: "Content-Type", Value: contentType, Detail: err.Error()}
	}
	if mt == MediaRecordIO {
		if strings.TrimSpace(messageContentType) == "" {
			return RequestFormat{}, &MediaError{Err: ErrMissingMessageContentType, Detail: "allowed: " + strings.Join(recordTypes, ", ")}
		}
		rt, _, err := mime.ParseMediaType(messageContentType)
		if err != nil {
			return RequestFormat{}, &MediaError{Err: ErrUnsupportedMediaType, Header: "Message-Content-Type", Value: messageContentType, Detail: err.Error()}
		}
		if !contains(recordTypes, rt) {
			return RequestFormat{}, &MediaError{Err: ErrUnsupportedMediaType, Header: "Message-Content-Type", Value: messageContentType,
				Detail: "allowed: " + strings.Join(recordTypes, ", ")}
		}
		return RequestFormat{Streaming: true, RecordType: rt}, nil
	}
	if !contains(recordTypes, mt) {
		return RequestFormat{}, &MediaError{Err: ErrUnsupportedMediaType, Header: "Content-Type", Value: contentType,
			Detail: "allowed: " + MediaRecordIO + ", " + strings.Join(recordTypes, ", ")}
	}
	if strings.TrimSpace(messageContentType) != "" {
		return RequestFormat{}, &MediaError{Err: ErrUnsupportedMediaType, Header: "Message-Content-Type", Value: messageContentType,
			Detail: "only allowed with Content-Type: " + MediaRecordIO}
	}
	return RequestFormat{RecordType: mt}, nil
}

// ResponseFormat is the negotiated shape of a response.
type ResponseFormat struct {
	Streaming   bool   // a RecordIO stream of records
	ContentType string // the response's Content-Type
	RecordType  string // Message-Content-Type when streaming; ContentType otherwise
}

// NegotiateResponse picks the response format from Accept and Message-Accept. When the
// server also offers plainTypes, a RecordIO stream (records of one of streamTypes) is
// chosen only when Accept names application/recordio explicitly, and otherwise one of
// plainTypes in the server's order of preference among equal q-values: a missing Accept
// means */*, so JSON-first servers stay compatible with clients that send none. When a
// stream is all the server offers (no plainTypes), any range that covers
// application/recordio with q > 0 accepts it, */* and a missing Accept included.
// Message-Accept without a streamed response is refused, as Mesos does.
func NegotiateResponse(accept, messageAccept string, streamTypes, plainTypes []string) (ResponseFormat, error) {
	ranges := parseAccept(accept)
	bestQ, best := 0.0, ResponseFormat{}
	if len(streamTypes) > 0 {
		if q, explicit := quality(ranges, MediaRecordIO); q > 0 && (explicit || len(plainTypes) == 0) {
			bestQ, best = q, ResponseFormat{Streaming: true, ContentType: MediaRecordIO}
		}
	}
	for _, t := range plainTypes {
		if q, _ := quality(ranges, t); q > bestQ {
			bestQ, best = q, ResponseFormat{ContentType: t, RecordType: t}
		}
	}
	if bestQ == 0 {
		offered := plainTypes
		if len(streamTypes) > 0 {
			offered = append([]string{MediaRecordIO}, plainTypes...)
		}
		return ResponseFormat{}, &MediaError{Err: ErrNotAcceptable, Header: "Accept", Value: accept, Detail: "offered: " + strings.Join(offered, ", ")}
	}
	if !best.Streaming {
		if strings.TrimSpace(messageAccept) != "" {
			return ResponseFormat{}, &MediaError{Err: ErrNotAcceptable, Header: "Message-Accept", Value: messageAccept,
				Detail: "only allowed with Accept: " + MediaRecordIO}
		}
		return best, nil
	}
	mranges := parseAccept(messageAccept)
	bestQ = 0
	for _, t := range streamTypes {
		if q, _ := quality(mranges, t); q > bestQ {
			bestQ, best.RecordType = q, t
		}
	}
	if bestQ == 0 {
		return ResponseFormat{}, &MediaError{Err: ErrNotAcceptable, Header: "Message-Accept", Value: messageAccept,
			Detail: "offered: " + strings.Join(streamTypes, ", ")}
	}
	return best, nil
}

type mediaRange struct {
	typ, sub string
	q        float64
}

// parseAccept parses an Accept-style header; an empty one means */*. Unparsable ranges are ignored.
func parseAccept(h string) []mediaRange {
	if strings.TrimSpace(h) == "" {
		return []mediaRange{{"*", "*", 1}}
	}
	var out []mediaRange
	for _, part := range strings.Split(h, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		mt, params, err := mime.ParseMediaType(part)
		if err != nil {
			continue
		}
		typ, sub, ok := strings.Cut(mt, "/")
		if !ok {
			continue
		}
		q := 1.0
		if v, ok := params["q"]; ok {
			f, err := strconv.ParseFloat(v, 64)
			if err != nil || f < 0 || f > 1 {
				continue
			}
			q = f
		}
		out = append(out, mediaRange{typ, sub, q})
	}
	// Most specific first, so the first match decides (RFC 9110, 12.5.1).
	sort.SliceStable(out, func(i, j int) bool { return specificity(out[i]) > specificity(out[j]) })
	return out
}

func specificity(r mediaRange) int {
	switch {
	case r.typ == "*":
		return 0
	case r.sub == "*":
		return 1
	}
	return 2
}

// quality is the q-value the ranges give media type t, and whether a range names t exactly.
func quality(ranges []mediaRange, t string) (q float64, explicit bool) {
	typ, sub, _ := strings.Cut(t, "/")
	for _, r := range ranges {
		if (r.typ == "*" || r.typ == typ) && (r.sub == "*" || r.sub == sub) {
			return r.q, r.typ == typ && r.sub == sub
		}
	}
	return 0, false
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}
