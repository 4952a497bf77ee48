package egress

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/labstack/echo/v4"
)

// ConfirmedAcker is what a Subscription implements to acknowledge with the broker's
// confirmation (the protocol's ack receipts): AckConfirmed returns once the broker has
// answered for every delivery, errs[i] being ds[i]'s outcome (nil: the broker applied
// the acknowledgement). A delivery whose acknowledgement failed stays the stream's.
type ConfirmedAcker interface {
	AckConfirmed(ctx context.Context, ds []*Delivery) (errs []error)
}

// ackReceiptTimeout bounds the wait for the broker's confirmations of one /ack.
var ackReceiptTimeout = 10 * time.Second

// confirmer returns the subscription's ConfirmedAcker when the stream's acknowledgements
// wait for the broker (ackReceipt, the default).
func (st *stream) confirmer() (ConfirmedAcker, bool) {
	if !st.def.AckReceipt {
		return nil, false
	}
	ca, ok := st.sub.(ConfirmedAcker)
	return ca, ok
}

// ackConfirmed acknowledges es and waits for the broker's answers; it returns the
// entries acknowledged and those that were not, with the first error.
func (st *stream) ackConfirmed(ctx context.Context, ca ConfirmedAcker, es []*unackedEntry) (acked, failed []*unackedEntry, err error) {
	if len(es) == 0 {
		return nil, nil, nil
	}
	ds := make([]*Delivery, len(es))
	for i, e := range es {
		ds[i] = e.d
	}
	ctx, cancel := context.WithTimeout(ctx, ackReceiptTimeout)
	errs := ca.AckConfirmed(ctx, ds)
	cancel()
	for i, e := range es {
		if errs[i] != nil {
			if err == nil {
				err = fmt.Errorf("acknowledging %s: %w", e.d.ID, errs[i])
			}
			failed = append(failed, e)
			continue
		}
		st.srv.obs.Acked(st.def.Name, 1, time.Since(e.at))
		acked = append(acked, e)
	}
	return acked, failed, err
}

// ackIDsConfirmed serves an /ack of ids on a stream whose acknowledgements wait for the
// broker: 200 only once the broker confirmed every one; 503 naming those it did not
// (notAcked: they stay unacknowledged, their ack timeout running, for the client to post
// again).
func (sm *stream) ackIDsConfirmed(c echo.Context, ca ConfirmedAcker, ids []string) error {
	var unknown []string
	var es []*unackedEntry
	for _, id := range ids {
		if e := sm.take(id, &unknown); e != nil {
			es = append(es, e)
		}
	}
	acked, failed, err := sm.ackConfirmed(c.Request().Context(), ca, es)
	if len(failed) > 0 {
		sm.putBack(failed)
	}
	sm.wake()
	if len(failed) > 0 {
		notAcked := make([]string, len(failed))
		for i, e := range failed {
			notAcked[i] = e.d.ID
		}
		c.Response().Header().Set("Retry-After", "1")
		return c.JSON(http.StatusServiceUnavailable, map[string]any{"status": 503, "acked": len(acked), "failed": notAcked[0],
			"notAcked": notAcked, "unknown": unknown,
			"error": fmt.Sprintf("%v; the broker did not confirm %d acknowledgements: post the ids in notAcked again", err, len(failed))})
	}
	if len(unknown) > 0 {
		return c.JSON(http.StatusBadRequest, map[string]any{"status": 400, "acked": len(acked), "unknown": unknown,
			"error": unknownIDs(len(unknown))})
	}
	return c.JSON(http.StatusOK, map[string]any{"status": 200, "acked": len(acked)})
}
