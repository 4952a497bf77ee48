package pulsar

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// TestUndecodableFloodIsLoggedOncePerReasonThenAsACount: a flood of undecodable
// messages logs the first of each reason, then one count per reason per interval,
// not a line per message.
func TestUndecodableFloodIsLoggedOncePerReasonThenAsACount(t *testing.T) {
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	var l reasonLog
	t0 := time.Unix(1000, 0)
	for i := range 1000 {
		l.note(log, t0, &UndecodableError{Topic: "t", Reason: ReasonDecompression}, "acknowledged")
		if i%2 == 0 {
			l.note(log, t0, &UndecodableError{Topic: "t", Reason: ReasonBadBatch}, "acknowledged")
		}
	}
	l.flush(log, t0.Add(undecodableLogEvery/2)) // too early: nothing
	if n := strings.Count(buf.String(), "\n"); n != 2 {
		t.Fatalf("%d lines for the first of two reasons, want 2:\n%s", n, buf.String())
	}
	l.flush(log, t0.Add(undecodableLogEvery))
	out := buf.String()
	if n := strings.Count(out, "\n"); n != 4 || !strings.Contains(out, "reason=decompression_error messages=999") || !strings.Contains(out, "reason=bad_batch messages=499") {
		t.Fatalf("after an interval, want one count per reason:\n%s", out)
	}
	l.flush(log, t0.Add(3*undecodableLogEvery)) // nothing more came: nothing more said
	if n := strings.Count(buf.String(), "\n"); n != 4 {
		t.Fatalf("%d lines with nothing new:\n%s", n, buf.String())
	}
}
