package chaos

import (
	"fmt"
	"net"
	"os"
	"testing"
)

// TestClusterStartSaysWhenAPortIsHeld: cluster.sh start exits 75 (another base may work),
// starting nothing, when a port of broker 2 or of the proxy already has a listener, as when
// another suite's cluster runs on the same base; the tests then start from another base.
// Broker 1's ports are pulsar.sh's, which exits 75 the same way.
func TestClusterStartSaysWhenAPortIsHeld(t *testing.T) {
	for _, held := range []struct {
		what   string
		host   string
		offset int
	}{{"broker 2's binary port", "127.0.0.2", 10}, {"the proxy's web port", "127.0.0.1", 22}} {
		t.Run(held.what, func(t *testing.T) {
			base, err := freeRange(19000, 23)
			if err != nil {
				t.Skip(err)
			}
			l, err := net.Listen("tcp", fmt.Sprintf("%s:%d", held.host, base+held.offset))
			if err != nil {
				t.Skipf("cannot hold the port: %v", err)
			}
			defer l.Close()
			env := append(os.Environ(), "CLUSTER_STATE_DIR="+t.TempDir(), fmt.Sprintf("CLUSTER_PORT_BASE=%d", base))
			out, err := run(env, scriptPath(), "start")
			if !portsTaken(err) {
				_, _ = run(env, scriptPath(), "stop")
				t.Fatalf("cluster.sh start with %s held: %v, want exit status 75\n%s", held.what, err, out)
			}
		})
	}
}
