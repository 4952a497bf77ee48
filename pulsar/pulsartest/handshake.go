// The handshake and keep-alive: CONNECT with its credentials, AUTH_CHALLENGE and
// AUTH_RESPONSE, PING.

package pulsartest

import (
	"google.golang.org/protobuf/proto"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// WithToken makes the broker require token authentication with this token; SetToken
// changes it later (a rotation, for AUTH_CHALLENGE tests).
func WithToken(token string) Option { return func(b *Broker) { b.token = token } }

// WithAuthenticator makes the broker check the credentials of every CONNECT and
// AUTH_RESPONSE with check (instead of one token): an error refuses CONNECT with
// AuthenticationError and the error's text, and closes the connection of an
// AUTH_RESPONSE, as the broker does.
func WithAuthenticator(check func(method string, data []byte) error) Option {
	return func(b *Broker) { b.authCheck = check }
}

// Credentials are the auth method and data of one CONNECT.
type Credentials struct {
	Method string
	Data   string
}

// ConnectCredentials returns the credentials of every CONNECT received, in order.
func (b *Broker) ConnectCredentials() []Credentials {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Credentials(nil), b.connectAuth...)
}

// SetToken changes the token the broker accepts.
func (b *Broker) SetToken(t string) { b.mu.Lock(); b.token = t; b.mu.Unlock() }

// ChallengeAuth sends AUTH_CHALLENGE on every connection; the answers show in AuthResponses.
func (b *Broker) ChallengeAuth() {
	for _, c := range b.connections() {
		c.write(&pb.BaseCommand{Type: pb.BaseCommand_AUTH_CHALLENGE.Enum(), AuthChallenge: &pb.CommandAuthChallenge{
			ServerVersion: proto.String("pulsartest"), Challenge: &pb.AuthData{AuthMethodName: proto.String("token"), AuthData: []byte("refresh")}}})
	}
}

// AuthResponses returns the credentials received in AUTH_RESPONSE frames, in order.
func (b *Broker) AuthResponses() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.authResponses...)
}

// SetMaxMessageSize sets the limit announced in CONNECTED for new connections.
func (b *Broker) SetMaxMessageSize(n int) { b.mu.Lock(); b.maxMessageSize = int32(n); b.mu.Unlock() }

// connect is the handshake: it checks the credentials and answers CONNECTED, or ERROR and a close.
func (c *serverConn) connect(cc *pb.CommandConnect) {
	b := c.b
	b.mu.Lock()
	max, token, check, watchers := b.maxMessageSize, b.token, b.authCheck, b.topicWatchers
	if cc.ProxyToBrokerUrl != nil {
		b.proxyTargets = append(b.proxyTargets, cc.GetProxyToBrokerUrl())
	}
	b.connectAuth = append(b.connectAuth, Credentials{cc.GetAuthMethodName(), string(cc.GetAuthData())})
	b.mu.Unlock()
	if check != nil {
		if err := check(cc.GetAuthMethodName(), cc.GetAuthData()); err != nil {
			c.write(&pb.BaseCommand{Type: pb.BaseCommand_ERROR.Enum(), Error: &pb.CommandError{
				Error: pb.ServerError_AuthenticationError.Enum(), Message: proto.String(err.Error())}})
			c.nc.Close()
			return
		}
	}
	if token != "" && (cc.GetAuthMethodName() != "token" || string(cc.GetAuthData()) != token) {
		c.write(&pb.BaseCommand{Type: pb.BaseCommand_ERROR.Enum(), Error: &pb.CommandError{
			Error: pb.ServerError_AuthenticationError.Enum(), Message: proto.String("pulsartest: bad or missing token")}})
		c.nc.Close()
		return
	}
	c.write(&pb.BaseCommand{Type: pb.BaseCommand_CONNECTED.Enum(), Connected: &pb.CommandConnected{
		ServerVersion: proto.String("pulsartest"), ProtocolVersion: proto.Int32(20), MaxMessageSize: proto.Int32(max),
		FeatureFlags: &pb.FeatureFlags{SupportsTopicWatchers: proto.Bool(watchers)}}})
}

// ping answers PING unless SetIgnorePings.
func (c *serverConn) ping() {
	b := c.b
	b.mu.Lock()
	ignore := b.ignorePings
	b.mu.Unlock()
	if !ignore {
		c.write(&pb.BaseCommand{Type: pb.BaseCommand_PONG.Enum(), Pong: &pb.CommandPong{}})
	}
}

// authResponse records the credentials and closes the connection if they are refused.
func (c *serverConn) authResponse(r *pb.CommandAuthResponse) {
	b := c.b
	data := string(r.GetResponse().GetAuthData())
	b.mu.Lock()
	b.authResponses = append(b.authResponses, data)
	token, check := b.token, b.authCheck
	b.mu.Unlock()
	if (token != "" && data != token) || (check != nil && check(r.GetResponse().GetAuthMethodName(), []byte(data)) != nil) {
		c.nc.Close()
	}
}
