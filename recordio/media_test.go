package recordio

import (
	"errors"
	"strings"
	"testing"
)

var routeTypes = []string{MediaJSON, MediaProtobuf}

func TestParseRequestMesosRules(t *testing.T) {
	tests := []struct {
		name, ct, mct string
		types         []string
		want          RequestFormat
		err           error
		msg           string
	}{
		{"stream of json", "application/recordio", "application/json", routeTypes, RequestFormat{true, MediaJSON}, nil, ""},
		{"stream of protobuf with params", "application/recordio; charset=binary", "application/x-protobuf", routeTypes, RequestFormat{true, MediaProtobuf}, nil, ""},
		{"case-insensitive type", "Application/RecordIO", "Application/JSON", routeTypes, RequestFormat{true, MediaJSON}, nil, ""},
		{"single json record", "application/json", "", routeTypes, RequestFormat{false, MediaJSON}, nil, ""},
		{"single protobuf record", "application/x-protobuf", "", routeTypes, RequestFormat{false, MediaProtobuf}, nil, ""},
		{"no content type", "", "", routeTypes, RequestFormat{}, ErrNoContentType, "no Content-Type"},
		{"missing message content type", "application/recordio", "", routeTypes, RequestFormat{}, ErrMissingMessageContentType, "needs a Message-Content-Type"},
		{"record type the route does not allow", "application/recordio", "text/plain", routeTypes, RequestFormat{}, ErrUnsupportedMediaType, `Message-Content-Type "text/plain"`},
		{"route allows only json", "application/recordio", "application/x-protobuf", []string{MediaJSON}, RequestFormat{}, ErrUnsupportedMediaType, "allowed: application/json"},
		{"message content type on a single record", "application/json", "application/json", routeTypes, RequestFormat{}, ErrUnsupportedMediaType, "only allowed with Content-Type: application/recordio"},
		{"unknown content type", "text/plain", "", routeTypes, RequestFormat{}, ErrUnsupportedMediaType, `Content-Type "text/plain"`},
		{"malformed content type", "application/", "", routeTypes, RequestFormat{}, ErrUnsupportedMediaType, "Content-Type"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseRequest(tc.ct, tc.mct, tc.types)
			if tc.err == nil {
				if err != nil || got != tc.want {
					t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
				}
				return
			}
			var me *MediaError
			if !errors.Is(err, tc.err) || !errors.As(err, &me) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("err = %v; want %v mentioning %q", err, tc.err, tc.msg)
			}
		})
	}
}

func TestNegotiateResponse(t *testing.T) {
	plain := []string{MediaJSON}
	stream := []string{MediaJSON, MediaProtobuf}
	tests := []struct {
		name, accept, maccept string
		stream, plain         []string
		want                  ResponseFormat
		err                   error
	}{
		{"streaming receipts", "application/recordio", "application/json", stream, plain, ResponseFormat{true, MediaRecordIO, MediaJSON}, nil},
		{"no accept means json", "", "", stream, plain, ResponseFormat{false, MediaJSON, MediaJSON}, nil},
		{"star means json", "*/*", "", stream, plain, ResponseFormat{false, MediaJSON, MediaJSON}, nil},
		{"application/* does not select a stream", "application/*", "", stream, plain, ResponseFormat{false, MediaJSON, MediaJSON}, nil},
		{"missing message-accept takes the first record type", "application/recordio", "", stream, plain, ResponseFormat{true, MediaRecordIO, MediaJSON}, nil},
		{"message-accept picks protobuf", "application/recordio", "application/x-protobuf", stream, plain, ResponseFormat{true, MediaRecordIO, MediaProtobuf}, nil},
		{"q-values pick protobuf", "application/recordio", "application/json;q=0.5, application/x-protobuf", stream, plain, ResponseFormat{true, MediaRecordIO, MediaProtobuf}, nil},
		{"q-values prefer json over recordio", "application/recordio;q=0.2, application/json", "", stream, plain, ResponseFormat{false, MediaJSON, MediaJSON}, nil},
		{"equal q prefers the explicit stream", "application/json, application/recordio", "application/json", stream, plain, ResponseFormat{true, MediaRecordIO, MediaJSON}, nil},
		{"q=0 refuses json", "application/json;q=0, application/recordio", "", stream, plain, ResponseFormat{true, MediaRecordIO, MediaJSON}, nil},
		{"specific range beats wildcard", "*/*;q=0.1, application/json;q=0", "", nil, []string{MediaJSON, MediaProtobuf}, ResponseFormat{false, MediaProtobuf, MediaProtobuf}, nil},
		{"egress: recordio only", "application/recordio", "application/json", []string{MediaJSON}, nil, ResponseFormat{true, MediaRecordIO, MediaJSON}, nil},
		{"egress: no accept takes the stream", "", "", []string{MediaJSON}, nil, ResponseFormat{true, MediaRecordIO, MediaJSON}, nil},
		{"egress: star takes the stream", "*/*", "", []string{MediaJSON}, nil, ResponseFormat{true, MediaRecordIO, MediaJSON}, nil},
		{"egress: application/* takes the stream", "application/*", "application/json", []string{MediaJSON}, nil, ResponseFormat{true, MediaRecordIO, MediaJSON}, nil},
		{"egress: curl's default with a q-valued star", "text/html, */*;q=0.8", "", []string{MediaJSON}, nil, ResponseFormat{true, MediaRecordIO, MediaJSON}, nil},

		{"nothing usable", "text/html", "", stream, plain, ResponseFormat{}, ErrNotAcceptable},
		{"egress: json accept refused", "application/json", "", []string{MediaJSON}, nil, ResponseFormat{}, ErrNotAcceptable},
		{"message-accept on a plain response", "application/json", "application/json", stream, plain, ResponseFormat{}, ErrNotAcceptable},
		{"message-accept allows no record type", "application/recordio", "text/plain", stream, plain, ResponseFormat{}, ErrNotAcceptable},
		{"recordio refused with q=0", "application/recordio;q=0", "", stream, nil, ResponseFormat{}, ErrNotAcceptable},
		{"egress: star refused when recordio has q=0", "application/recordio;q=0, */*", "", []string{MediaJSON}, nil, ResponseFormat{}, ErrNotAcceptable},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := NegotiateResponse(tc.accept, tc.maccept, tc.stream, tc.plain)
			if tc.err == nil {
				if err != nil || got != tc.want {
					t.Fatalf("got %+v, %v; want %+v", got, err, tc.want)
				}
				return
			}
			if !errors.Is(err, tc.err) {
				t.Fatalf("err = %v, want %v", err, tc.err)
			}
		})
	}
}
