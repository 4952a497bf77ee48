package conn

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/frame"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

func (c *Conn) handshake(ctx context.Context, br *bufio.Reader) error {
	connect := &pb.CommandConnect{
		ClientVersion:   proto.String(c.opts.ClientVersion),
		ProtocolVersion: proto.Int32(ProtocolVersion),
		FeatureFlags:    &pb.FeatureFlags{SupportsAuthRefresh: proto.Bool(true), SupportsTopicWatchers: proto.Bool(true)},
	}
	if c.opts.ProxyToBrokerURL != "" {
		connect.ProxyToBrokerUrl = proto.String(c.opts.ProxyToBrokerURL)
	}
	if c.opts.Auth != nil {
		data, err := c.opts.Auth.Data()
		if err != nil {
			return fmt.Errorf("%w: %w", ErrCredentials, err)
		}
		connect.AuthMethodName = proto.String(c.opts.Auth.Method())
		connect.AuthData = data
	}
	buf, err := frame.AppendCommand(nil, &pb.BaseCommand{Type: pb.BaseCommand_CONNECT.Enum(), Connect: connect})
	if err != nil {
		return err
	}
	if dl, ok := ctx.Deadline(); ok {
		_ = c.nc.SetDeadline(dl)
		defer c.nc.SetDeadline(time.Time{})
	}
	if _, err := c.nc.Write(buf); err != nil {
		return handshakeErr("sending CONNECT to", c.opts.Addr, err)
	}
	for {
		var f frame.Frame
		if err := readFrame(br, &f, frame.DefaultMaxMessageSize+frame.Padding); err != nil {
			return handshakeErr("waiting for CONNECTED from", c.opts.Addr, err)
		}
		switch f.Cmd.GetType() {
		case pb.BaseCommand_CONNECTED:
			cd := f.Cmd.GetConnected()
			c.serverVersion = cd.GetServerVersion()
			c.protocol = cd.GetProtocolVersion()
			if n := cd.GetMaxMessageSize(); n > 0 {
				c.maxMessageSize = int(n)
			}
			c.topicWatchers = cd.GetFeatureFlags().GetSupportsTopicWatchers()
			return nil
		case pb.BaseCommand_ERROR:
			e := f.Cmd.GetError()
			return fmt.Errorf("%w: %w", ErrHandshake, &ServerError{Code: ServerErrorCode(e.GetError()), Message: e.GetMessage()})
		case pb.BaseCommand_AUTH_CHALLENGE:
			resp, _, err := c.authResponse()
			if err != nil {
				if errors.Is(err, ErrCredentials) {
					return err
				}
				return fmt.Errorf("%w: %v", ErrHandshake, err)
			}
			if _, err := c.nc.Write(resp); err != nil {
				return handshakeErr("answering AUTH_CHALLENGE of", c.opts.Addr, err)
			}
		default:
			return fmt.Errorf("%w: %s answered CONNECT with %s", ErrHandshake, c.opts.Addr, f.Cmd.GetType())
		}
	}
}

// Fingerprint names credentials in logs without showing them: "sha256:" and the first
// 12 hex digits of their SHA-256 (empty credentials: "none").
func Fingerprint(data []byte) string {
	if len(data) == 0 {
		return "none"
	}
	h := sha256.Sum256(data)
	return "sha256:" + hex.EncodeToString(h[:6])
}

// authResponse is the AUTH_RESPONSE frame answering a challenge, and the credentials it holds.
func (c *Conn) authResponse() ([]byte, []byte, error) {
	if c.opts.Auth == nil {
		return nil, nil, errors.New("the broker sent AUTH_CHALLENGE but no authentication is configured")
	}
	data, err := c.opts.Auth.Data()
	if err != nil {
		return nil, nil, fmt.Errorf("%w: answering AUTH_CHALLENGE: %w", ErrCredentials, err)
	}
	resp, err := frame.AppendCommand(nil, &pb.BaseCommand{
		Type: pb.BaseCommand_AUTH_RESPONSE.Enum(),
		AuthResponse: &pb.CommandAuthResponse{
			ClientVersion:   proto.String(c.opts.ClientVersion),
			ProtocolVersion: proto.Int32(ProtocolVersion),
			Response:        &pb.AuthData{AuthMethodName: proto.String(c.opts.Auth.Method()), AuthData: data},
		},
	})
	return resp, data, err
}

// handshakeErr is the error of a handshake whose read or write failed. What the peer
// sent that is not a Pulsar frame (a web or TLS port, garbage) is ErrHandshake, as is a
// refusal: it will not change by itself. A transport failure — the broker closed or
// reset the connection, or sent nothing before the deadline (frozen, restarting, a
// proxy cutting in) — is the connection's loss (ErrClosed), temporary like any other.
func handshakeErr(what, addr string, err error) error {
	if errors.Is(err, frame.ErrCorrupt) || errors.Is(err, frame.ErrTooLarge) {
		return fmt.Errorf("%w: %s %s: %v", ErrHandshake, what, addr, err)
	}
	return fmt.Errorf("%w: %s %s during the handshake: %w", ErrClosed, what, addr, err)
}
