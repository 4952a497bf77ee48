package pulsar

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/recordio-bridge/bridge/pulsar/internal/pb"
)

// A creation whose attempts the broker refused for now, and whose last attempt the
// deadline cut short (a dial that timed out on a loaded machine), says what the broker
// answered: the cut attempt's own error alone named only a dial timeout.
func TestACreationCutByItsDeadlineStillNamesTheBrokersRefusal(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 150*time.Millisecond)
	defer cancel()
	refusal := &ServerError{Code: ServerErrorCode(pb.ServerError_AuthenticationError), Message: "could not fetch the issuer's JWKS"}
	attempts := 0
	err := creationRetry(ctx, nil, Backoff{Initial: 10 * time.Millisecond, Max: 10 * time.Millisecond}, func() error {
		attempts++
		if attempts == 1 {
			return refusal
		}
		<-ctx.Done()
		return fmt.Errorf("dialing 127.0.0.1:1: %w", ctx.Err())
	})
	var se *ServerError
	if !errors.As(err, &se) || pb.ServerError(se.Code) != pb.ServerError_AuthenticationError || !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("after a refusal and an attempt cut by the deadline: %v; want both named", err)
	}
}
