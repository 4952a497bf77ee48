package otlpwire

import (
	"context"
	"fmt"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/encoding/gzip"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

// exportMethod is the OTLP trace service's one RPC.
const exportMethod = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"

// rawMessage is a request already encoded, or a response not decoded yet.
type rawMessage struct{ b []byte }

// rawCodec hands gRPC the encoded bytes as they are. Its name is "proto": on the wire
// the content-subtype is the one the service's generated clients use.
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error) {
	m, ok := v.(*rawMessage)
	if !ok {
		return nil, fmt.Errorf("otlpwire: gRPC codec given %T", v)
	}
	return m.b, nil
}

func (rawCodec) Unmarshal(data []byte, v any) error {
	m, ok := v.(*rawMessage)
	if !ok {
		return fmt.Errorf("otlpwire: gRPC codec given %T", v)
	}
	m.b = append(m.b[:0], data...)
	return nil
}

func (rawCodec) Name() string { return "proto" }

type grpcTransport struct {
	conn *grpc.ClientConn
	md   metadata.MD
	opts []grpc.CallOption
	kept bool
	resp rawMessage
}

func newGRPCTransport(cfg Config) (*grpcTransport, error) {
	target := cfg.Endpoint
	if target == "" {
		target = defaultGRPCTarget
	}
	var creds credentials.TransportCredentials
	if cfg.Insecure {
		creds = insecure.NewCredentials()
	} else {
		creds = credentials.NewTLS(cfg.TLS)
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("%w: gRPC target %q: %w", ErrConfig, target, err)
	}
	t := &grpcTransport{conn: conn, opts: []grpc.CallOption{grpc.ForceCodec(rawCodec{})}}
	switch cfg.Compression {
	case "gzip":
		t.opts = append(t.opts, grpc.UseCompressor(gzip.Name))
	case "":
	default:
		_ = conn.Close()
		return nil, fmt.Errorf("%w: compression %q: want gzip or none", ErrConfig, cfg.Compression)
	}
	if len(cfg.Headers) > 0 {
		t.md = metadata.New(cfg.Headers)
	}
	return t, nil
}

func (t *grpcTransport) send(ctx context.Context, body []byte) ([]byte, error) {
	if t.md != nil {
		ctx = metadata.NewOutgoingContext(ctx, t.md)
	}
	t.resp.b = t.resp.b[:0]
	err := t.conn.Invoke(ctx, exportMethod, &rawMessage{b: body}, &t.resp, t.opts...)
	if err == nil {
		return t.resp.b, nil
	}
	// The RPC ended before the server answered it: the transport may still hold body.
	t.kept = true
	s := status.Convert(err)
	switch s.Code() {
	case codes.Canceled, codes.DeadlineExceeded, codes.Aborted, codes.OutOfRange, codes.Unavailable, codes.DataLoss:
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, &retryable{throttle: retryInfo(s), err: err}
	case codes.ResourceExhausted:
		// Only when the server says when to come back, as the official exporter does.
		for _, d := range s.Details() {
			if _, ok := d.(*errdetails.RetryInfo); ok {
				return nil, &retryable{throttle: retryInfo(s), err: err}
			}
		}
	}
	return nil, err
}

// retryInfo is the delay a status's RetryInfo asks for (0 without one).
func retryInfo(s *status.Status) time.Duration {
	for _, d := range s.Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			return ri.GetRetryDelay().AsDuration()
		}
	}
	return 0
}

func (t *grpcTransport) bufferKept() bool {
	k := t.kept
	t.kept = false
	return k
}

func (t *grpcTransport) close() error { return t.conn.Close() }
