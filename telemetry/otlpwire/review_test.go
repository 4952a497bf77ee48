package otlpwire

import (
	"context"
	"math"
	"net/http"
	"strings"
	"testing"
	"time"

	coltracepb "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"
)

// retriesWouldPass tells the retry budget's refusal from the export timeout's.
const retriesWouldPass = "retries would pass"

// A throttle the collector asks for that passes the retry budget fails the export at
// once, whatever its size: a Retry-After of huge numbers or a far date (which the sum
// elapsed+throttle used to overflow into a negative, so the export waited out its whole
// timeout holding the batch processor instead).
func TestHTTPHugeRetryAfterFailsAtOnce(t *testing.T) {
	for _, ra := range []string{"9223372036854775807", "9223372036", "99999999999", "Fri, 31 Dec 9999 23:59:59 GMT"} {
		t.Run(ra, func(t *testing.T) {
			c := newCapture(t)
			c.answer = func(w http.ResponseWriter, _ *http.Request, _ int) bool {
				w.Header().Set("Retry-After", ra)
				http.Error(w, "busy", http.StatusServiceUnavailable)
				return true
			}
			// The timeout is long enough that waiting it out fails the test's own deadline.
			e := newWire(t, Config{Protocol: ProtocolHTTP, Endpoint: c.url(), Retry: fastRetry, Timeout: time.Hour})
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := e.ExportSpans(ctx, oneSpan())
			if err == nil || !strings.Contains(err.Error(), retriesWouldPass) || ctx.Err() != nil {
				t.Fatalf("export answered 503 Retry-After %q: %v; want the retry budget's refusal at once", ra, err)
			}
			if n := len(c.requests()); n != 1 {
				t.Fatalf("%d requests; want 1", n)
			}
		})
	}
}

// The same for gRPC's RetryInfo, whose delay saturates at the largest Duration.
func TestGRPCHugeRetryInfoFailsAtOnce(t *testing.T) {
	g := newGRPCCapture(t)
	g.answer = func(context.Context, int) (*coltracepb.ExportTraceServiceResponse, error) {
		s, _ := status.New(codes.ResourceExhausted, "slow down").WithDetails(&errdetails.RetryInfo{
			RetryDelay: durationpb.New(time.Duration(math.MaxInt64))})
		return nil, s.Err()
	}
	e := newWire(t, Config{Protocol: ProtocolGRPC, Endpoint: g.addr, Insecure: true, Retry: fastRetry, Timeout: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := e.ExportSpans(ctx, oneSpan())
	if err == nil || !strings.Contains(err.Error(), retriesWouldPass) || ctx.Err() != nil {
		t.Fatalf("export answered ResourceExhausted with a huge RetryInfo: %v; want the retry budget's refusal at once", err)
	}
}
