package pulsar_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar"
	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
	"github.com/recordio-bridge/bridge/pulsar/pulsartest"
)

func TestTokenAuthenticationAndChallenge(t *testing.T) {
	b, err := pulsartest.NewBroker(pulsartest.WithToken("token-1"))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("token-1\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	p := producer(t, client(t, b.URL(), func(o *pulsar.ClientOptions) { o.TokenFile = tokenFile }), pulsar.ProducerOptions{})
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("m-00000")}); err != nil {
		t.Fatal(err)
	}

	// The token rotates: the file changes, the broker challenges, the client answers
	// with the new token on the same connection.
	if err := os.WriteFile(tokenFile, []byte("token-2"), 0o600); err != nil {
		t.Fatal(err)
	}
	b.SetToken("token-2")
	b.ChallengeAuth()
	deadline := time.Now().Add(5 * time.Second)
	for len(b.AuthResponses()) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := b.AuthResponses(); len(got) != 1 || got[0] != "token-2" {
		t.Fatalf("AUTH_RESPONSE carried %q, want the re-read token-2", got)
	}
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("m-00001")}); err != nil {
		t.Fatal(err)
	}
	if n := b.Frames(pb.BaseCommand_CONNECT); n != 1 {
		t.Fatalf("%d CONNECTs: answering the challenge must keep the connection", n)
	}

	// A wrong token is refused with the broker's reason (once the creation, which retries
	// an AuthenticationError within the operation timeout, gives up).
	bad := client(t, b.URL(), func(o *pulsar.ClientOptions) { o.Token = "nope"; o.OperationTimeout = 500 * time.Millisecond })
	_, err = bad.CreateProducer(context.Background(), pulsar.ProducerOptions{Topic: "t"})
	var se *pulsar.ServerError
	if !errors.Is(err, pulsar.ErrHandshake) || !errors.As(err, &se) || se.Code != pulsar.ServerErrorCode(pb.ServerError_AuthenticationError) {
		t.Fatalf("wrong token: %v", err)
	}
}

// pki writes a CA, a server certificate for 127.0.0.1/localhost and a client
// certificate, all signed by the CA, and returns their paths.
type pki struct{ ca, serverCert, serverKey, clientCert, clientKey string }

func newPKI(t *testing.T) pki {
	t.Helper()
	dir := t.TempDir()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"}, NotBefore: time.Now().Add(-time.Hour),
		NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, _ := x509.ParseCertificate(caDER)
	write := func(name, typ string, der []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	leaf := func(name string, serial int64, usage x509.ExtKeyUsage) (string, string) {
		key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: name}, NotBefore: time.Now().Add(-time.Hour),
			NotAfter: time.Now().Add(time.Hour), ExtKeyUsage: []x509.ExtKeyUsage{usage}, DNSNames: []string{"localhost"},
			IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &key.PublicKey, caKey)
		if err != nil {
			t.Fatal(err)
		}
		kder, _ := x509.MarshalECPrivateKey(key)
		return write(name+".crt", "CERTIFICATE", der), write(name+".key", "EC PRIVATE KEY", kder)
	}
	var p pki
	p.ca = write("ca.crt", "CERTIFICATE", caDER)
	p.serverCert, p.serverKey = leaf("server", 2, x509.ExtKeyUsageServerAuth)
	p.clientCert, p.clientKey = leaf("client", 3, x509.ExtKeyUsageClientAuth)
	return p
}

func TestTLSVerifiesTheBrokerAndPresentsAClientCertificate(t *testing.T) {
	k := newPKI(t)
	serverCert, err := tls.LoadX509KeyPair(k.serverCert, k.serverKey)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(k.ca)
	clientCAs := x509.NewCertPool()
	clientCAs.AppendCertsFromPEM(caPEM)
	b, err := pulsartest.NewBroker(pulsartest.WithTLS(&tls.Config{Certificates: []tls.Certificate{serverCert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCAs}))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !strings.HasPrefix(b.URL(), "pulsar+ssl://") {
		t.Fatalf("URL %s", b.URL())
	}
	withCA := func(o *pulsar.ClientOptions) {
		o.TLSCAFile, o.TLSCertFile, o.TLSKeyFile = k.ca, k.clientCert, k.clientKey
		o.OperationTimeout = 2 * time.Second
	}
	p := producer(t, client(t, b.URL(), withCA), pulsar.ProducerOptions{})
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("m-00000")}); err != nil {
		t.Fatal(err)
	}
	exactlyOnceInOrder(t, b, "persistent://public/default/fault", 1)

	refused := []struct {
		name string
		opt  func(*pulsar.ClientOptions)
		msg  string
	}{
		{"unknown CA", func(o *pulsar.ClientOptions) { withCA(o); o.TLSCAFile = "" }, "certificate"},
		{"wrong host name", func(o *pulsar.ClientOptions) { withCA(o); o.TLSServerName = "broker.example.com" }, "broker.example.com"},
		{"no client certificate", func(o *pulsar.ClientOptions) { withCA(o); o.TLSCertFile, o.TLSKeyFile = "", "" }, "certificate required"},
	}
	for _, r := range refused {
		t.Run(r.name, func(t *testing.T) {
			c := client(t, b.URL(), r.opt)
			_, err := c.CreateProducer(context.Background(), pulsar.ProducerOptions{Topic: "tls"})
			if err == nil || !strings.Contains(err.Error(), r.msg) {
				t.Fatalf("err = %v, want a refusal mentioning %q", err, r.msg)
			}
		})
	}
	if _, err := pulsar.NewClient(pulsar.ClientOptions{URL: b.URL(), TLSCAFile: filepath.Join(t.TempDir(), "missing.pem")}); !errors.Is(err, pulsar.ErrInvalidOptions) {
		t.Fatalf("missing CA file: %v", err)
	}
}

func TestLookupFollowsRedirectsAndProxies(t *testing.T) {
	service := fakeBroker(t)
	owner := fakeBroker(t)
	service.Redirect("persistent://public/default/moved", owner.URL(), false)
	p := producer(t, client(t, service.URL()), pulsar.ProducerOptions{Topic: "moved"})
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("m-00000")}); err != nil {
		t.Fatal(err)
	}
	exactlyOnceInOrder(t, owner, "persistent://public/default/moved", 1)
	if len(service.Messages("persistent://public/default/moved")) != 0 {
		t.Fatal("the redirect was not followed")
	}

	// proxy_through_service_url: connect to the service URL, asking to be proxied to the
	// owner's host:port (a real Pulsar proxy cannot resolve "pulsar://host" as a host name).
	service.Redirect("persistent://public/default/proxied", "pulsar://broker-7.internal:6650", true)
	p2 := producer(t, client(t, service.URL()), pulsar.ProducerOptions{Topic: "proxied"})
	if _, err := p2.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("m-00000")}); err != nil {
		t.Fatal(err)
	}
	if got := service.ProxyTargets(); len(got) == 0 || got[len(got)-1] != "broker-7.internal:6650" {
		t.Fatalf("proxy targets %v", got)
	}
}

func TestConnectingToAWebPortSaysSo(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(400) }))
	defer srv.Close()
	c := client(t, "pulsar://"+srv.Listener.Addr().String())
	_, err := c.CreateProducer(context.Background(), pulsar.ProducerOptions{Topic: "t"})
	if !errors.Is(err, pulsar.ErrHandshake) || !strings.Contains(err.Error(), "web port") {
		t.Fatalf("err = %v, want a handshake error naming the web port", err)
	}
}

func TestClientOptionsAreValidated(t *testing.T) {
	for _, o := range []pulsar.ClientOptions{
		{URL: "http://localhost:6650"},
		{URL: "localhost:6650"},
		{URL: "pulsar://h:6650", Token: "a", TokenFile: "/x"},
		{URL: "pulsar://h:6650", TokenFile: "/does/not/exist"},
	} {
		if _, err := pulsar.NewClient(o); !errors.Is(err, pulsar.ErrInvalidOptions) {
			t.Errorf("%+v: %v, want ErrInvalidOptions", o, err)
		}
	}
}

func TestTLSAuthenticationNamesTheMethodTLSWithTheCertificateAsIdentity(t *testing.T) {
	k := newPKI(t)
	serverCert, err := tls.LoadX509KeyPair(k.serverCert, k.serverKey)
	if err != nil {
		t.Fatal(err)
	}
	caPEM, _ := os.ReadFile(k.ca)
	clientCAs := x509.NewCertPool()
	clientCAs.AppendCertsFromPEM(caPEM)
	b, err := pulsartest.NewBroker(pulsartest.WithTLS(&tls.Config{Certificates: []tls.Certificate{serverCert},
		ClientAuth: tls.RequireAndVerifyClientCert, ClientCAs: clientCAs}),
		pulsartest.WithAuthenticator(func(method string, data []byte) error {
			if method != "tls" || len(data) != 0 {
				return fmt.Errorf("auth method %q with %d bytes, want tls and none", method, len(data))
			}
			return nil
		}))
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	c := client(t, b.URL(), func(o *pulsar.ClientOptions) {
		o.TLSCAFile, o.TLSCertFile, o.TLSKeyFile = k.ca, k.clientCert, k.clientKey
		o.Auth = pulsar.TLSAuthentication()
	})
	p := producer(t, c, pulsar.ProducerOptions{})
	if _, err := p.Send(context.Background(), &pulsar.ProducerMessage{Payload: []byte("m-00000")}); err != nil {
		t.Fatal(err)
	}
	if cc := b.ConnectCredentials(); len(cc) == 0 || cc[0].Method != "tls" {
		t.Fatalf("CONNECT carried %+v", cc)
	}
	for _, o := range []pulsar.ClientOptions{
		{URL: "pulsar://h:6650", TLSCertFile: k.clientCert, TLSKeyFile: k.clientKey, Auth: pulsar.TLSAuthentication()},
		{URL: b.URL(), TLSCAFile: k.ca, Auth: pulsar.TLSAuthentication()},
		{URL: b.URL(), TLSCAFile: k.ca, TLSCertFile: k.clientCert, TLSKeyFile: k.clientKey, Auth: pulsar.TLSAuthentication(), Token: "t"},
	} {
		if _, err := pulsar.NewClient(o); !errors.Is(err, pulsar.ErrInvalidOptions) {
			t.Errorf("%+v: %v, want ErrInvalidOptions", o, err)
		}
	}
}
